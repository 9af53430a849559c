"""Pass tokens, promotion records, `verify` and `status`: the bookkeeping around the rungs."""

from __future__ import annotations

import time
from pathlib import Path

from . import ctx as C
from . import report
from .candidates import KNOWN, fingerprint

ROOT = C.ROOT


report_paths = C.report_paths


class Refusal(Exception):
    def __init__(self, reasons):
        self.reasons = reasons
        super().__init__("; ".join(reasons))


def token(reports: list[str], out: str) -> None:
    """Turn passing reports of one rung into a pass token, or refuse with a one-line reason."""
    docs = {}
    for p in reports:
        try:
            d = report.read(p)
        except report.ReportError as e:
            raise Refusal([str(e)]) from None
        if d["verdict"] != "pass":
            raise Refusal([f"rung {d['rung']} ({d['rung_name']}) FAILED for {d['candidate']}" + (f" block {d['block']}" if d["block"] is not None else "")
                           + f": {d['reasons'][0]} -- see {p}"])
        docs[p] = d
    first = next(iter(docs.values()))
    report.write(out, {"candidate": first["candidate"], "rung": first["rung"], "reports": {p: report.file_sha256(p) for p in reports}}, schema="token")


def check_reports(candidate: str, paths: dict[int, list[Path]], sources: list[str], config_digests: dict[int, str]) -> tuple[list[str], dict]:
    """Every reason a set of reports cannot be promoted: missing, invalid, edited, failing, stale
    kernels or config, or a broken digest chain."""
    reasons, docs = [], {}
    code_now = C.code_fingerprint()
    current_fp = {}
    for f in sources:
        try:
            current_fp[f] = fingerprint([f])[f]
        except FileNotFoundError:
            reasons.append(f"kernel source {f} is missing")
    for rung, plist in paths.items():
        for p in plist:
            try:
                d = report.read(p)
            except report.ReportError as e:
                reasons.append(str(e))
                continue
            docs[str(p)] = d
            if d["candidate"] != candidate or d["rung"] != rung:
                reasons.append(f"{p}: is a rung {d['rung']} report of {d['candidate']}, expected rung {rung} of {candidate}")
            if d["verdict"] != "pass":
                reasons.append(f"{p}: verdict fail: {d['reasons'][0]}")
            for f, h in d["kernel_fingerprint"].items():
                if current_fp.get(f) not in (None, h):
                    reasons.append(f"{p}: stale: kernel {f} changed since the gate ran (sha256 {h[:12]} -> {current_fp[f][:12]})")
            if set(d["kernel_fingerprint"]) != set(current_fp):
                reasons.append(f"{p}: stale: gate ran with kernels {sorted(d['kernel_fingerprint'])}, config now uses {sorted(current_fp)}")
            if d["code_fingerprint"] != code_now:
                reasons.append(f"{p}: stale: h3gates modules changed since the gate ran")
            if rung in config_digests and d["config_digest"] != config_digests[rung]:
                reasons.append(f"{p}: stale: config changed since the gate ran")
    for p, d in docs.items():
        for up, h in d["upstream"].items():
            try:
                now = report.file_sha256(up)
            except FileNotFoundError:
                reasons.append(f"{p}: upstream {up} is missing")
                continue
            if now != h:
                reasons.append(f"{p}: digest chain broken: upstream {up} changed after this gate ran")
    return reasons, docs


def promote(config: dict, candidate: str, record: str, flag: str, configfiles: list[str]) -> None:
    paths = report_paths(config["profile"], candidate, config["blocks"])
    sources = C.kernel_sources(config, candidate)
    digests = {r: C.digest(C.rung_context(config, candidate, r)) for r in paths}
    revoke(flag)
    reasons, docs = check_reports(candidate, paths, sources, digests)
    if reasons:
        revoke(record)
        raise Refusal(reasons)
    deployable = config["profile"] in config["deployable_profiles"]
    enforced = C.enforce_perf(config)
    notes = []
    if not deployable:
        notes.append(f"profile {config['profile']} is a rehearsal: not deployable (deployable profiles: {config['deployable_profiles']})")
    if not enforced:
        notes.append("the block performance gate was recorded but not enforced for this profile")
    any_doc = next(iter(docs.values()))
    rec = {
        "schema_version": 1, "candidate": candidate, "flag": KNOWN[candidate].flag, "profile": config["profile"], "deployable": deployable,
        "device": any_doc["device"], "reference": any_doc["reference"],
        "reports": {p: report.file_sha256(p) for p in docs}, "verdicts": {p: d["verdict"] for p, d in docs.items()},
        "kernel_fingerprint": fingerprint(sources), "config_digest": {str(r): h for r, h in digests.items()},
        "config": {"files": configfiles, "profile": config["profile"]}, "performance_gate_enforced": enforced,
        "verdict": "promoted" if deployable else "promoted (rehearsal, not deployable)", "notes": notes,
    }
    report.write(record, rec, schema="promotion")
    Path(flag).write_text(f"# written by h3gates promote {candidate} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; check with: python -m h3gates verify {record}\n"
                          + ("" if deployable else "# REHEARSAL (profile not deployable): do not deploy\n") + f"{KNOWN[candidate].flag}={1 if deployable else 0}\n")


def verify(record: str, revoke_flag: str | None = None, configfiles: list[str] | None = None, config: dict | None = None) -> dict:
    """Re-check a promotion record now: reports present, schema-valid, passing, unedited, produced
    from the current kernel sources and config, digest chain intact."""
    try:
        rec = report.read(record, schema="promotion")
    except report.ReportError as e:
        revoke(revoke_flag)
        raise Refusal([str(e)]) from None
    config = config or C.load_config(configfiles or rec["config"]["files"])
    reasons = []
    if config["profile"] != rec["profile"]:
        reasons.append(f"config profile is now {config['profile']}, the record is for {rec['profile']}")
    config["profile"] = rec["profile"]
    paths = report_paths(rec["profile"], rec["candidate"], config["blocks"])
    sources = C.kernel_sources(config, rec["candidate"])
    digests = {r: C.digest(C.rung_context(config, rec["candidate"], r)) for r in paths}
    more, docs = check_reports(rec["candidate"], paths, sources, digests)
    reasons += more
    for p, h in rec["reports"].items():
        if p in docs and report.file_sha256(p) != h:
            reasons.append(f"{p}: differs from the report the record was made from")
    if reasons:
        revoke(revoke_flag)
        raise Refusal(reasons)
    return rec


def revoke(*paths) -> None:
    """Delete a promotion's flag and/or record: when verification fails, or a gate of the
    candidate reruns or refuses (its old promotion no longer stands)."""
    for p in paths:
        if p:
            Path(p).unlink(missing_ok=True)


def status(config: dict) -> list[dict]:
    """candidate x rung: pass / fail / missing / stale, with the reason of each failure."""
    rows = []
    for cand in C.enabled(config):
        paths = report_paths(config["profile"], cand, config["blocks"])
        sources = C.kernel_sources(config, cand)
        row = {"candidate": cand, "rungs": {}}
        for rung, plist in paths.items():
            digest = {rung: C.digest(C.rung_context(config, cand, rung))}
            states = []
            for p in map(Path, plist):
                if not p.exists():
                    states.append(("missing", ""))
                    continue
                reasons, docs = check_reports(cand, {rung: [p]}, sources, digest)
                d = docs.get(str(p))
                if d is None:
                    states.append(("invalid", reasons[0]))
                elif d["verdict"] == "fail":
                    states.append(("fail", d["reasons"][0]))
                elif reasons:
                    states.append(("stale", reasons[0]))
                else:
                    states.append(("pass", ""))
            worst = next((s for s in ("fail", "invalid", "stale", "missing", "pass") if any(x[0] == s for x in states)))
            row["rungs"][rung] = {"state": worst, "reason": next((r for s, r in states if s == worst and r), "")}
        rows.append(row)
    return rows


def format_status(rows) -> str:
    head = f"{'candidate':18s} " + " ".join(f"r{r}:{C.RUNG_NAMES[r][:9]:9s}" for r in range(1, 9))
    lines = [head, "-" * len(head)]
    reasons = []
    for row in rows:
        lines.append(f"{row['candidate']:18s} " + " ".join(f"{row['rungs'][r]['state']:12s}" for r in range(1, 9)))
        reasons += [f"  {row['candidate']} r{r}: {v['state']}: {v['reason']}" for r, v in row["rungs"].items() if v["reason"]]
    return "\n".join(lines + ([""] + reasons if reasons else []))
