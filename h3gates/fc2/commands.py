"""`python -m h3gates fc2 <mode>` (also `python -m h3gates.fc2.commands <mode>`): the FC2 scheduling study.

  characterize [--budgets 0,4,8,16,32,64] [--heuristic-limit 32] [--explicit-bases 2]
  sweep        [--workspace-mib 32] [--max-candidates 8] [--max-explicit 4] [--rounds 6] [--iters 2]
  selected     --algorithm SPEC [--sweep REPORT] [--rounds 6] [--iters 2]
  capture      --algorithm SPEC        (run it under ncu --profile-from-start off)
each with [--rows 37810 --n 5376 --k 14336] [--descriptor-rows logical|padded] [--seed 0] [--out FILE.json].
SPEC: inline JSON, a JSON file, enumerate:<budget_mib>:<index>, heuristic0, or auto (with --sweep).
Without --out the report goes to stdout. Exit 2 with one line when the machine cannot run the study.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from h3gates.fc2 import spec as S
from h3gates.fc2.spec import SpecError

PROG = "h3gates fc2"


def _budgets(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated MiB, e.g. 0,4,8,16,32,64") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: budgets must be non-negative")
    return vals


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return v


DESCRIPTION = "FC2 cuBLASLt algorithm study (seed 003) on the emulated NVFP4 GEMM"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    arguments(ap)
    return ap


def arguments(ap: argparse.ArgumentParser) -> None:
    """The study's modes and options, in its own parser or as `h3gates fc2` (h3gates.commands.fc2)."""
    sub = ap.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--rows", type=_positive, default=37810, help="activation rows (logical M)")
    common.add_argument("--n", type=_positive, default=5376)
    common.add_argument("--k", type=_positive, default=14336)
    common.add_argument(
        "--descriptor-rows",
        choices=("logical", "padded"),
        default="logical",
        help="build the cuBLASLt descriptor with the logical rows or the rows padded to 16",
    )
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--out", help="write the report here (schema-validated) instead of stdout")
    common.add_argument(
        "--sign",
        action="store_true",
        help="sign the report as the workflow's step (h3gates.core.links: the rungs that read it check its link)",
    )
    common.add_argument("--key", help="signing key for --sign (the config's attestation.key)")
    common.add_argument("--trusted-keys", help="trusted public keys for --sign (attestation.trusted_keys)")
    c = sub.add_parser("characterize", parents=[common], help="heuristics per budget, explicit split-K, AlgoCheck")
    c.add_argument("--budgets", type=_budgets, default=(0, 4, 8, 16, 32, 64), help="workspace budgets in MiB")
    c.add_argument("--heuristic-limit", type=_positive, default=32)
    c.add_argument(
        "--explicit-bases", type=int, default=2, help="distinct heuristic algorithms to try explicit split-K on"
    )
    c.add_argument("--explicit-budget", type=int, default=S.DEFAULT_WORKSPACE_MIB, help="MiB")
    c.add_argument("--no-planner", action="store_true", help="skip nvmath's Matmul.plan cross-check")
    w = sub.add_parser("sweep", parents=[common], help="time up to N candidates against heuristic #0")
    w.add_argument("--workspace-mib", type=int, default=S.DEFAULT_WORKSPACE_MIB)
    w.add_argument("--max-candidates", type=_positive, default=8)
    w.add_argument("--max-explicit", type=int, default=4)
    for p in (w, s := sub.add_parser("selected", parents=[common], help="measure one algorithm and print its pin")):
        p.add_argument("--rounds", type=_positive, default=6)
        p.add_argument("--iters", type=_positive, default=2, help="GEMMs per timed sample")
    s.add_argument("--algorithm", required=True, help="SPEC")
    s.add_argument("--sweep", help="the sweep report `auto` selects from")
    pr = sub.add_parser(
        "capture", parents=[common], help="one GEMM inside cudaProfilerStart/Stop, for an Nsight Compute capture"
    )
    pr.add_argument("--algorithm", required=True, help="SPEC")


def _fail(msg: str, code: int = 2) -> int:
    print(f"{PROG}: {msg}", file=sys.stderr)
    return code


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(parser().parse_args(argv), argv)


def run(a: argparse.Namespace, argv: list[str]) -> int:
    """One mode of the study; `argv`: its arguments as given (the report records the command)."""
    algorithm = None
    if getattr(a, "algorithm", None) is not None:
        try:
            algorithm = S.parse(a.algorithm)
            if algorithm["source"] == "auto":
                if a.mode != "selected" or not a.sweep:
                    return _fail(
                        "--algorithm auto needs --sweep REPORT (selected only): auto is the fastest byte-exact algorithm of a sweep"
                    )
                from h3gates.fc2.select import select_auto

                algorithm = select_auto(json.loads(Path(a.sweep).read_text()))
        except (SpecError, OSError, json.JSONDecodeError) as e:
            return _fail(f"--algorithm: {e}")

    from h3gates.core.lease import acquire

    acquire(
        f"fc2 {a.mode}", warn=False
    )  # one free GPU of this host, before CUDA starts (without one: the line below says so)
    import torch

    if not torch.cuda.is_available():
        return _fail("needs a CUDA GPU (none visible)")
    from h3gates.fc2 import cublaslt

    try:
        cublaslt.lib()
    except cublaslt.NvmathMissing:
        return _fail("needs nvmath-python (pip install -e '.[cuda]')")
    from h3gates.fc2 import study

    command = shlex.join(["python", "-m", "h3gates", "fc2", *argv])
    shape = {"rows": a.rows, "n": a.n, "k": a.k, "descriptor_rows": a.descriptor_rows, "command": command}
    try:
        if a.mode == "characterize":
            doc = study.characterize(
                **shape,
                budgets=a.budgets,
                heuristic_limit=a.heuristic_limit,
                explicit_bases=a.explicit_bases,
                explicit_budget_mib=a.explicit_budget,
                planner=not a.no_planner,
            )
        elif a.mode == "sweep":
            doc = study.sweep(
                **shape,
                workspace_mib=a.workspace_mib,
                max_candidates=a.max_candidates,
                max_explicit=a.max_explicit,
                rounds=a.rounds,
                iters=a.iters,
                seed=a.seed,
            )
        elif a.mode == "selected":
            doc = study.selected(algorithm, **shape, rounds=a.rounds, iters=a.iters, seed=a.seed)
        else:
            doc = study.capture(algorithm, **shape, seed=a.seed)
    except (cublaslt.AlgoError, SpecError) as e:
        return _fail(str(e), 1)
    if a.out:
        study.write(a.out, doc)
        if a.sign:
            from h3gates.core import links
            from h3gates.core.fingerprints import digest

            opts = {k: v for k, v in vars(a).items() if isinstance(v, str | int | float | bool | tuple | list)}
            links.sign(f"fc2 {a.mode}", [a.out], {links.CONFIG: digest(opts)}, a.key, a.trusted_keys)
        print(f"{PROG} {a.mode}: {a.out}")
    else:
        study.validate(doc)
        print(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
