"""`python -m h3gates status`: the candidate x rung table (h3gates.core.promotion.status), or the verdicts."""

from __future__ import annotations

import json
import sys

from h3gates.commands.common import OVERLAYS, files_text

NAME = "status"


def subparser(sub):
    s = sub.add_parser(NAME, help="candidate x rung table: pass / fail / stale / missing / invalid, with reasons")
    s.add_argument("--configfile", nargs="+", default=[], help=f"{OVERLAYS} (default: none)")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--verdicts",
        action="store_true",
        help="one line per candidate with results: each rung's state and whether its promotion verifies now "
        "(what a snakemake run prints at its end)",
    )
    return s


def run(a) -> int:
    from h3gates.core.config import configfiles, load_config
    from h3gates.core.promotion import format_status, status
    from h3gates.core.verdicts import nothing_climbed, verdicts

    files = configfiles(a.configfile)
    config = load_config(files)
    if a.verdicts:
        print("\n".join(verdicts(config, configfiles=files)) or "no candidate of this configuration has results yet")
        return 0
    rows = status(config)
    if rows or a.json:
        print(json.dumps(rows, indent=1) if a.json else format_status(rows))
    if not rows:  # nothing to check: say why, instead of an empty table
        print(f"h3gates status: {files_text(files)} climbs no candidate, so nothing was checked:", file=sys.stderr)
        for why in nothing_climbed(config):
            print(f"  - {why}", file=sys.stderr)
        return 2
    return 0
