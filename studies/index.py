"""Every evidence run under studies/<study>/evidence/<run>/, keyed by date, device and commit, from its
MANIFEST.json; exits 1 naming each run folder whose manifest is missing or lacks a field.

    python studies/index.py                 # one line per run, newest first
    python studies/index.py --study ladder  # one study's runs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIELDS = ("claim", "date", "commit", "command", "device", "versions")  # null where unknown, never left out


def runs(study: str | None = None):
    for run in sorted(HERE.glob(f"{study or '*'}/evidence/*/")):
        path = run / "MANIFEST.json"
        if not path.exists():
            yield run, None, "no MANIFEST.json"
            continue
        doc = json.loads(path.read_text())
        missing = [f for f in FIELDS if f not in doc]
        yield run, doc, f"MANIFEST.json lacks {', '.join(missing)}" if missing else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study")
    a = ap.parse_args()
    rows, problems = [], []
    for run, doc, problem in runs(a.study):
        name = run.relative_to(HERE)
        if problem:
            problems.append(f"{name}: {problem}")
            continue
        device = doc["device"].split(",")[0].split(" (")[0]
        rows.append((doc["date"], device, doc["commit"] or "-", str(name), doc["claim"]))
    for date, device, commit, name, claim in sorted(rows, reverse=True):
        print(f"{date}  {device[:28]:28s}  {commit:8s}  {name}\n    {claim[:150]}{'...' if len(claim) > 150 else ''}")
    for p in problems:
        print(f"studies/{p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
