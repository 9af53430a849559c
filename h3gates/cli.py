"""`python -m h3gates`: the user's commands (status, verify, replay, candidates, fc2) and the ones the
workflow's rules run (rung, baseline, token, promote, plot, profile-target). Each command imports only what it
needs, so a pass token or a record check costs a Python start, and a rung's code fingerprint is what
its own module imports (h3gates.core.fingerprints)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from h3gates.core.config import WORKFLOW_CONFIG, configfiles  # noqa: F401 (configfiles: also the CLI's API)

EXIT_CODES = """exit codes:
  0  done: the check passed, the record verified, the report was written (a failing gate still writes its report and exits 0)
  1  refused: a gate, a pass token, a promotion or a verification said no; the reasons and the fix are printed
  2  usage or configuration error, or a command that needs a GPU run without one; nothing was checked
  other: h3gates itself failed (a traceback says where)"""

USER = ("status", "verify", "replay", "check-config", "candidates", "doctor", "keys", "fc2")
# the Snakefile's own configfile: snakemake always loads it first and merges every --configfile over it
OVERLAYS = f"overlays merged in order over {WORKFLOW_CONFIG}, key by key, as snakemake --configfile merges them"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("h3gates")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="h3gates",
        description="NVFP4 kernel validation ladder: status, verify and replay its gates.",
        epilog=EXIT_CODES + "\n\nThe workflow itself runs through snakemake (see README.md); the commands "
        "rung, baseline, token, promote, plot and profile-target are what its rules call.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"h3gates {_version()}")
    sub = ap.add_subparsers(
        dest="cmd", required=True, metavar="{status,verify,replay,check-config,candidates,doctor,keys,fc2}"
    )
    s = sub.add_parser("status", help="candidate x rung table: pass / fail / stale / missing / invalid, with reasons")
    s.add_argument("--configfile", nargs="+", default=[], help=f"{OVERLAYS} (default: none)")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--verdicts",
        action="store_true",
        help="one line per candidate with results: each rung's state and whether its promotion verifies now "
        "(what a snakemake run prints at its end)",
    )
    v = sub.add_parser(
        "verify", help="re-check a promotion record, its flag and every report it rests on (what deployment runs)"
    )
    v.add_argument("record")
    v.add_argument("--flag", help="the flag file to check (default: the one the record wrote)")
    v.add_argument("--revoke", action="store_true", help="delete the flag when verification fails")
    v.add_argument(
        "--heal",
        action="store_true",
        help="move reports that no longer stand aside, so the next snakemake run recomputes them",
    )
    v.add_argument(
        "--configfile",
        nargs="+",
        help=f"compare with this configuration and name what changed ({OVERLAYS}; default: the record's own)",
    )
    v.add_argument("--config-json", help=argparse.SUPPRESS)
    r = sub.add_parser(
        "replay",
        help="rerun one failing case from its *.replay.*.pt dump against the reference; print the first mismatch",
    )
    r.add_argument("dump")
    k = sub.add_parser(
        "check-config",
        help="validate config overlays as the workflow would, naming the file and line of a YAML error",
    )
    k.add_argument("configfile", nargs="*", help=OVERLAYS)
    c = sub.add_parser("candidates", help="the registered candidates (kernels/<name>/candidate.py)")
    c.add_argument("--markdown", action="store_true", help="the README's table")
    for name, what in (
        ("doctor", "what a user runs first on a new machine: GPU, libraries, references, a self-check (--json)"),
        ("keys", "the key that signs promotion records and the keys verify trusts: show, export, trust"),
    ):  # (main() hands both to their own modules before this parser runs; listed for --help)
        sub.add_parser(name, help=what, add_help=False).add_argument("args", nargs=argparse.REMAINDER)
    f = sub.add_parser(
        "fc2",
        help="the FC2 cuBLASLt scheduling study (seed 003): characterize, sweep, selected, profile (needs a GPU)",
        add_help=False,
    )
    f.add_argument("args", nargs=argparse.REMAINDER)
    # what the workflow's rules run (not listed in --help)
    g = sub.add_parser("rung")
    g.add_argument("rung", type=int, choices=range(1, 9))
    g.add_argument("--context", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--block", type=int)
    g.add_argument("--upstream", nargs="*", default=[])
    b = sub.add_parser("baseline")
    b.add_argument("--context", required=True)
    b.add_argument("--out", required=True, nargs="+", help="one artifact; for the captures (rung 0), one per --blocks")
    b.add_argument("--blocks", type=int, nargs="*", default=[], help="the captures' blocks (rung 0), in --out's order")
    t = sub.add_parser("token")
    t.add_argument("--out", required=True)
    t.add_argument(
        "--record", help="the candidate's promotion record: its flag is revoked if the record no longer verifies"
    )
    t.add_argument("--flag")
    t.add_argument("reports", nargs="+")
    p = sub.add_parser("promote")
    p.add_argument("candidate")
    p.add_argument("--configfile", nargs="*", default=[])
    p.add_argument("--config-json", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--flag", required=True)
    pl = sub.add_parser("plot")
    pl.add_argument("--out", required=True)
    pl.add_argument("reports", nargs="+")
    pw = sub.add_parser("perf-worker")
    pw.add_argument("--context", required=True)
    pw.add_argument("--block", type=int, required=True)
    pw.add_argument("--first", choices=("baseline", "candidate"), required=True)
    pw.add_argument("--mode", choices=("graph", "eager"), required=True)
    pt = sub.add_parser("profile-target")
    pt.add_argument("--context", required=True)
    pt.add_argument(
        "--side",
        choices=("baseline", "candidate", "baseline-artifact"),
        required=True,
        help="baseline-artifact: --context is a baseline context (rule baseline_artifact, rung 8)",
    )
    return ap


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:  # the signing key and the trusted keys (h3gates/keys.py)
        from h3gates.keys import main as keys_main

        return keys_main(argv[1:])
    if argv[:1] == ["doctor"]:  # what a user runs first on a new machine (h3gates/doctor.py)
        from h3gates.doctor import main as doctor_main

        return doctor_main(argv[1:])
    if argv[:1] == ["fc2"]:
        from h3gates.fc2.commands import main as fc2_main

        return fc2_main(argv[1:])
    a = parser().parse_args(argv)
    from h3gates.core.errors import ConfigError, Refusal

    try:
        return _run(a)
    except Refusal as e:
        print(f"h3gates {a.cmd}: REFUSED", file=sys.stderr)
        for reason in e.reasons:
            print(f"  - {reason}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"h3gates {a.cmd}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`status | head -1`): stop quietly, as other commands do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail again
        return 1


def format_verified(rec: dict) -> str:
    """What verify proved, from the derived facts (never the record's own summary fields)."""
    v = rec["verified"]
    blocks = ", ".join(
        f"block {b}: attempt {x['attempt']}/{x['max_attempts']} {x['decision']}"
        + (f" ({x['mode']})" if x.get("mode") else "")
        for b, x in v["attempts"].items()
    )
    cap = v["rung8_capture"]
    lines = [
        f"OK {rec['candidate']} ({rec['verdict']}): {len(rec['reports'])} reports and the flag {rec['flag_file']['line']} verified;"
        f" signed by {v['signed_by']}",
        f"  performance gate enforced: {'yes' if v['enforced'] else 'no'} ({blocks})",
        f"  rung 8 Nsight Compute capture of both sides: {'held' if cap['held'] else 'missing'}"
        + ("" if cap["required"] else " (not required: no GPU)"),
    ]
    if not v["deployable"]:
        lines.append("  NOT deployable: " + "; ".join(v["why_not"]))
    return "\n".join(lines)


def files_text(files) -> str:
    return " + ".join(files)


def nothing_climbed(config: dict) -> list[str]:
    """Why each registered candidate is not climbed by a configuration that climbs none."""
    from h3gates.core.config import not_climbed

    return list(not_climbed(config, [], {}).values())


def verdicts(config: dict, candidates=None) -> list[str]:
    """A short table of every candidate with results under this configuration (or of `candidates`): the
    state of each rung now (h3gates.core.promotion.status) and whether its promotion record verifies now
    (never the record's own summary), with the first problem of a candidate that is not promoted."""
    from pathlib import Path

    from h3gates.core.errors import Refusal
    from h3gates.core.outputs import RUNG_NAMES, promotion_paths
    from h3gates.core.promotion import status, verify
    from h3gates.core.workflow import one_line

    rows = [r for r in status(config) if candidates is None or r["candidate"] in candidates]
    lines = []
    for row in rows:
        record, flag = promotion_paths(config["profile"], row["candidate"])
        states = [row["rungs"][r]["state"] for r in RUNG_NAMES]
        if not Path(record).exists() and not Path(flag).exists() and all(s == "missing" for s in states):
            continue  # never climbed here: no line
        problem = next(
            (
                f"r{r}: " + (v["reason"] if f": {v['state']}" in v["reason"] else f"{v['state']}: {v['reason']}")
                for r, v in row["rungs"].items()
                if v["state"] != "pass"
            ),
            None,
        )
        if not Path(record).exists():
            promo = "no record" + (f" (a flag {flag} without its record)" if Path(flag).exists() else "")
        else:
            try:
                rec = verify(record)
                promo = f"verified: {rec['flag_file']['line']}" + (
                    "" if rec["verified"]["deployable"] else " (rehearsal)"
                )
                problem = None
            except Refusal as e:
                promo = "REFUSED"
                problem = problem or f"promotion: {e.reasons[0]}"
        cells = " ".join(f"{'-' if s == 'missing' else s:7s}" for s in states)
        lines.append(f"  {row['candidate']:18s} {cells} {promo}")
        if problem:
            lines.append(f"    {one_line(problem, 160)}")
    if not lines:
        return []
    head = f"  {'candidate':18s} " + " ".join(f"{'r' + str(r):7s}" for r in RUNG_NAMES) + " promotion"
    return [f"h3gates verdicts (profile {config['profile']}):", head, *lines]


def print_verdicts(config: dict, file=None) -> None:
    """The verdict table on stderr, as the Snakefile's onsuccess/onerror hooks print it: a failure to make it
    is one line, never a traceback after the run's own outcome."""
    file = file or sys.stderr
    try:
        lines = verdicts(config)
    except Exception as e:  # noqa: BLE001 (the run's outcome stands; the table only summarizes it)
        lines = [f"h3gates: no verdict table ({type(e).__name__}: {e})"]
    if lines:
        print("\n".join(lines), file=file)


def _run(a) -> int:
    if a.cmd == "rung":
        from h3gates.core.context import RungContext
        from h3gates.rungs import ladder

        # a rerun gate leaves the candidate's promotion alone: it proves nothing about the config the record was
        # made under; the next promote_<candidate> (verify) refuses a record whose reports changed and revokes its flag
        ctx = RungContext.from_json(a.context)
        if ctx.device == "cuda":
            from h3gates.core.lease import acquire

            acquire(f"rung {a.rung} {ctx.candidate}" + ("" if a.block is None else f" block {a.block}"))
        ladder.run(a.rung, ctx, a.out, a.block, a.upstream)
        return 0
    if a.cmd == "baseline":
        from h3gates.core.context import CAPTURES, ArtifactContext, artifact_meta

        actx = ArtifactContext.from_json(a.context)
        rung = actx.rung
        if rung != CAPTURES and len(a.out) != 1:
            parser().error(f"baseline r{rung}: one --out expected, got {len(a.out)}")
        meta = artifact_meta(actx)  # the artifact's identity, computed here: the computing module needs no key code
        if actx.device == "cuda":
            from h3gates.core.lease import acquire

            acquire(
                f"baseline captures block {' '.join(map(str, a.blocks))}" if rung == CAPTURES else f"baseline r{rung}"
            )
        if rung == CAPTURES:
            from h3gates.rungs.artifacts import compute_captures

            compute_captures(actx, a.blocks, a.out, meta)
        elif rung == 8:
            from h3gates.rungs.r8_baseline import compute

            compute(actx, a.out[0], meta)
        else:
            from h3gates.rungs.artifacts import compute

            compute(actx, a.out[0], meta)
        return 0
    if a.cmd == "token":
        from h3gates.core.errors import Refusal
        from h3gates.core.tokens import token

        try:
            token(a.reports, a.out)
        except Refusal:
            if a.record:  # a failing gate: revoke the promotion only where the record no longer verifies
                from h3gates.core.promotion import revoke_if_wrong

                revoke_if_wrong(a.record, a.flag)
            raise
        return 0
    if a.cmd == "promote":
        from h3gates.core.config import validate_config
        from h3gates.core.promotion import promote

        promote(validate_config(json.loads(a.config_json)), a.candidate, a.record, a.flag, a.configfile)
        print(f"promoted {a.candidate}: {a.record}")
        return 0
    if a.cmd == "verify":
        from h3gates.core.config import load_config, validate_config
        from h3gates.core.promotion import verify

        config = (
            validate_config(json.loads(a.config_json))
            if a.config_json
            else load_config(configfiles(a.configfile))
            if a.configfile
            else None
        )
        rec = verify(a.record, revoke_flag=a.revoke, flag=a.flag, config=config, configfiles=a.configfile, heal=a.heal)
        print(format_verified(rec))
        return 0
    if a.cmd == "status":
        from h3gates.core.config import load_config
        from h3gates.core.promotion import format_status, status

        files = configfiles(a.configfile)
        config = load_config(files)
        if a.verdicts:
            print("\n".join(verdicts(config)) or "no candidate of this configuration has results yet")
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
    if a.cmd == "check-config":
        from h3gates.core.config import climbable, load_config

        files = configfiles(a.configfile)
        config = load_config(files)
        climb, left = climbable(config)
        print(
            f"config OK: {files_text(files)}: profile {config['profile']}, climbs {', '.join(climb) or 'no candidate'}"
        )
        for why in left.values():
            print(f"  NOTE: {why}")
        if not climb:
            for why in nothing_climbed(config):
                print(f"  - {why}")
        return 0
    if a.cmd == "candidates":
        from h3gates.core import registry

        if a.markdown:
            print(registry.markdown_table())
        else:
            for c in registry.discover().values():
                print(
                    f"{c.name:18s} {c.flag:28s} roles {','.join(c.roles):12s} overrides {','.join(c.overrides):13s} {c.folder}"
                )
        return 0
    if a.cmd == "replay":
        from h3gates.rungs.replay import replay

        return replay(a.dump)
    if a.cmd == "plot":
        from h3gates.core.report import read
        from h3gates.rungs.plots import ratio_plot

        docs = [read(p) for p in a.reports]
        ratio_plot([(f"{d['candidate']} block {d['block']}", d["timing"]) for d in docs], a.out)
        return 0
    if a.cmd == "perf-worker":  # a timing process of rung 4 (h3gates.rungs.timing), started by the rung itself
        from h3gates.core.context import RungContext
        from h3gates.rungs.nsight import exit_with_parent
        from h3gates.rungs.r4_block import worker

        exit_with_parent()
        worker(RungContext.from_json(a.context), a.block, a.first, a.mode)
        return 0
    if a.cmd == "profile-target":
        from h3gates.rungs.nsight import exit_with_parent

        exit_with_parent()
        if a.side == "baseline-artifact":  # --context is rung 8's baseline artifact context (rule baseline_artifact)
            from h3gates.core.context import ArtifactContext, artifact_path
            from h3gates.rungs.r8_baseline import profile_target

            actx = ArtifactContext.from_json(a.context)
            cctx = actx.capture_context()
            profile_target(actx, artifact_path(cctx, block=actx.profiler["block"]), cctx)
            return 0
        from h3gates.core.context import RungContext
        from h3gates.rungs.r8_profiler import target

        target(RungContext.from_json(a.context), a.side)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
