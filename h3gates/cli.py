"""`python -m h3gates ...`: the commands the Snakemake rules run, and the user's status/verify."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="h3gates", description="NVFP4 kernel validation ladder")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rung", help="run one rung and write its report (exit 0 on a numeric failure)")
    r.add_argument("rung", type=int, choices=range(1, 9))
    r.add_argument("--context", required=True, help="JSON rung context (from the workflow)")
    r.add_argument("--out", required=True)
    r.add_argument("--block", type=int)
    r.add_argument("--upstream", nargs="*", default=[])
    t = sub.add_parser("token", help="turn passing reports into a pass token, or refuse with the reason")
    t.add_argument("--out", required=True)
    t.add_argument("--revoke", nargs="*", default=[], help="the candidate's promotion record and flag, deleted on refusal")
    t.add_argument("reports", nargs="+")
    p = sub.add_parser("promote", help="write the promotion record and flag, or refuse with every reason")
    p.add_argument("candidate")
    p.add_argument("--configfile", nargs="+", default=["config/config.yaml"])
    p.add_argument("--config-json", help="the resolved workflow config (overrides --configfile)")
    p.add_argument("--record", required=True)
    p.add_argument("--flag", required=True)
    v = sub.add_parser("verify", help="re-check a promotion record against the current sources, config and reports")
    v.add_argument("record")
    v.add_argument("--revoke", help="delete this flag file when verification fails")
    v.add_argument("--configfile", nargs="+")
    v.add_argument("--config-json", help="the resolved workflow config")
    s = sub.add_parser("status", help="candidate x rung table: pass / fail / missing / stale")
    s.add_argument("--configfile", nargs="+", default=["config/config.yaml"])
    s.add_argument("--json", action="store_true")
    pl = sub.add_parser("plot", help="timing plot (per-round baseline vs candidate) of block-gate reports")
    pl.add_argument("--out", required=True)
    pl.add_argument("reports", nargs="+")
    a = ap.parse_args(argv)

    from . import ctx as C
    from . import ladder

    try:
        if a.cmd == "rung":
            from .rungs import RUNG_FUNCS

            context = json.loads(a.context)
            ladder.revoke(*C.promotion_paths(context["profile"], context["candidate"]))  # a gate reruns: the old promotion is void
            fn = RUNG_FUNCS[a.rung]
            if a.rung in C.PER_BLOCK:
                fn(context, a.out, a.block, upstream=a.upstream)
            else:
                fn(context, a.out, upstream=a.upstream)
            return 0
        if a.cmd == "token":
            try:
                ladder.token(a.reports, a.out)
            except ladder.Refusal:
                ladder.revoke(*a.revoke)
                raise
            return 0
        if a.cmd == "promote":
            config = C.validate_config(json.loads(a.config_json)) if a.config_json else C.load_config(a.configfile)
            ladder.promote(config, a.candidate, a.record, a.flag, a.configfile)
            print(f"promoted {a.candidate}: {a.record}")
            return 0
        if a.cmd == "verify":
            config = C.validate_config(json.loads(a.config_json)) if a.config_json else None
            rec = ladder.verify(a.record, a.revoke, a.configfile, config)
            print(f"OK {rec['candidate']} ({rec['verdict']}): {len(rec['reports'])} reports verified" + ("" if rec["deployable"] else "; NOT deployable (rehearsal profile)"))
            return 0
        if a.cmd == "status":
            rows = ladder.status(C.load_config(a.configfile))
            print(json.dumps(rows, indent=1) if a.json else ladder.format_status(rows))
            return 0
        if a.cmd == "plot":
            from .plot import timing_plot

            timing_plot(a.reports, a.out)
            return 0
    except ladder.Refusal as e:
        print(f"h3gates {a.cmd}: REFUSED", file=sys.stderr)
        for reason in e.reasons:
            print(f"  - {reason}", file=sys.stderr)
        return 1
    except C.ConfigError as e:
        print(f"h3gates {a.cmd}: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
