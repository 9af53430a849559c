"""`python -m h3gates verify`: re-check a promotion record, its flag and every report it rests on."""

from __future__ import annotations

import argparse
import json

from h3gates.commands.common import OVERLAYS

NAME = "verify"


def subparser(sub):
    v = sub.add_parser(
        NAME, help="re-check a promotion record, its flag and every report it rests on (what deployment runs)"
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
    return v


def run(a) -> int:
    from h3gates.core.config import configfiles, load_config, validate_config
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
    if config is None:  # verified under its own config: say too whether it still stands under today's
        from h3gates.core.promotion import _fix, under_current

        state, reasons = under_current(rec)
        if state == "stands":  # (the record's own config files, re-read: status agrees given the same files)
            from h3gates.core.config import overlays

            files = overlays(rec["config"]["files"])
            said = f"`status --configfile {' '.join(files)}`" if files else "`status`"
            print(f"  under the current config and tree: still stands ({said} agrees)")
        else:
            print(
                f"  under the current config and tree: {'STALE' if state == 'stale' else 'UNKNOWN'} "
                f"({len(reasons)} reason(s), first: {reasons[0]}); the record stands only for the config it was made with; "
                f"to promote under the current one: {_fix(rec['candidate'], rec['config']['files'], [])}"
            )
    return 0


def format_verified(rec: dict) -> str:
    """What verify proved, from the derived facts (never the record's own summary fields)."""
    from h3gates.core.promotion import attempt_text

    v = rec["verified"]
    blocks = ", ".join(
        f"block {b}: {attempt_text(x)}" + (f" ({x['mode']})" if x.get("mode") else "") for b, x in v["attempts"].items()
    )
    cap = v["rung8_capture"]
    lines = [
        f"OK {v['results_name']} ({rec['verdict']}): {len(rec['reports'])} reports and the flag {rec['flag_file']['line']} verified;"
        f" signed by {v['signed_by']}",
        f"  performance gate enforced: {'yes' if v['enforced'] else 'no'} ({blocks})",
        f"  rung 8 Nsight Compute capture of both sides: {'held' if cap['held'] else 'missing'}"
        + ("" if cap["required"] else " (not required: no GPU)"),
    ]
    if not v["deployable"]:
        lines.append("  NOT deployable: " + "; ".join(v["why_not"]))
    return "\n".join(lines)
