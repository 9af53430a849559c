"""`python -m h3gates <job>`: the commands the workflow's rules and rungs run (rung, baseline, token, promote,
plot, perf-worker, profile-target), apart from the user's commands (h3gates.cli). h3gates/__main__.py hands
a job here without importing the CLI, so every job's code fingerprint covers this small module
(h3gates.core.fingerprints.ALWAYS) and no user command. Each job imports only what it needs, inside its
function, so a pass token or a promotion costs a Python start and a rung's fingerprint is what its own
module imports. Exit statuses are the CLI's (h3gates.core.errors.exit_status).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _rung(a) -> int:
    from h3gates.rungs import ladder

    # a rerun gate deletes no record (it proves nothing about the config the record was made under), but the
    # flag goes at once when the record no longer verifies, its report rewritten or gone (_flag_basis); the
    # report and its replay dumps are signed where they were made (_sign_report, h3gates.core.links)
    ctx, kept, done = _restore(a)
    if done:
        return 0
    try:
        if ctx.device == "cuda":
            from h3gates.core.outputs import RUNG

            _lease(
                f"rung {a.rung} {ctx.candidate}" + ("" if a.block is None else f" block {a.block}"),
                shared=RUNG[a.rung].gpu_shared,
            )
        ladder.run(a.rung, ctx, a.out, a.block, a.upstream)
        _sign_report(a)
        if kept is not None:
            kept.keep()
    finally:
        _flag_basis(a.out)
    return 0


def _restore(a):
    """A report kept at this job's key (its context, sources, inputs' bytes and software) is restored, not rerun:
    before the lease, torch or the model (h3gates.core.runcache); a restored report is signed here as a rerun's
    would be (it was made from the same inputs, sources and software: the key) -> (context, entry, restored)."""
    from h3gates.core import runcache
    from h3gates.core.context import RungContext

    ctx = RungContext.from_json(a.context)
    kept = runcache.entry(ctx, a.rung, a.out, a.block, a.upstream)
    touched = False  # the report rewritten, or possibly so (an error during the restore): its flag checked
    try:
        touched = True
        if kept is None or not kept.restore():
            touched = False
            return ctx, kept, False
        _sign_report(a)
        return ctx, kept, True
    finally:
        if touched:
            _flag_basis(a.out)


def restored(argv: list[str]) -> int | None:
    """A rung job's run-cache restore in the job's own process, before it goes to the run's warm worker
    (h3gates/__main__.py): its exit status where the kept report was restored (or the job refused), None
    where the gate must run. A restore needs neither torch nor the worker, whose imports a job would
    otherwise wait for (the first restore of a revert took 2.8 s with them, 0.3 s without, on the CPU machine:
    studies/ladder/evidence/revert_bench_tiny_cpu_2026-12-06/, its round-1 consoles)."""
    import contextlib
    import io

    from h3gates.core.errors import exit_status

    try:  # (a command line the job itself would refuse is refused there, in its own words)
        with contextlib.redirect_stderr(io.StringIO()):
            a = parser().parse_args(argv)
    except SystemExit:
        return None
    if a.cmd != "rung":
        return None

    def attempt(a):
        if getattr(a, "context", None) is not None:
            from h3gates.core.context import check_planned_reference

            check_planned_reference(a.context)
        return 0 if _restore(a)[2] else None

    return exit_status(a.cmd, attempt, a)


def light(argv: list[str]) -> int:
    """What a child of the run's warm worker forked without waiting for its imports of torch runs
    (h3gates.core.warm.LIGHT): a pass token or a promotion whole; of a rung job, its restore alone (`restored`):
    the exit status where its kept report was restored (or the job refused), warm.NOT_RESTORED where the gate
    must run (the job then goes to the worker as a rung job, or runs in its own process)."""
    if argv[:1] == ["rung"]:
        from h3gates.core.warm import NOT_RESTORED

        code = restored(argv)
        return NOT_RESTORED if code is None else code
    return main(argv)


def light_preload() -> list[str]:
    """What the warm worker imports before it forks its first light job (`light`): the h3gates core modules and
    libraries a pass token, a promotion and a restore import (no torch; no rung, candidate kernel or file read
    at import: a child reads its files itself). The worker watches these modules' files as its own
    (h3gates.core.warm: an edit sends every job to a fresh process). The names of those it imported."""
    import h3gates.core.context
    import h3gates.core.links
    import h3gates.core.promotion
    import h3gates.core.runcache
    import h3gates.core.tokens  # noqa: F401

    return ["h3gates.core"] + [m for m in ("jsonschema", "yaml", "securesystemslib") if m in sys.modules]


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # torch.cuda.is_available() through NVML, not the CUDA driver


def _lease(job: str, shared: bool) -> None:
    """Lease the GPU for this job (h3gates.core.lease) once its libraries are imported (preload: torch and Comfy
    Kitchen, the CUDA driver not started, so the lease's CUDA_VISIBLE_DEVICES still takes effect). A job in a fresh process
    (rung 4 and its timing process 0, every job with H3GATES_WARM=off) imported them inside its lease before:
    about 3 s of an exclusive lease on the H200 before the job's first line
    (studies/ladder/evidence/canonical_onegpu_shared_2026-12-04/), and a job that waits for the GPU now imports
    while it waits. A job forked from the warm worker has them already."""
    preload()
    from h3gates.core.lease import acquire

    acquire(job, shared=shared)


def _sign_report(a) -> None:
    """Sign what the rung wrote (h3gates.core.links): its report and replay dumps, from what it read."""
    from h3gates.core import links, report

    links.sign_report(a.out, report.read(a.out), a.key, a.trusted_keys, ["h3gates", "rung", str(a.rung)])


def _flag_basis(out) -> None:
    """A rung rewrote (or failed to write) one report of a candidate: its flag goes at once if the promotion
    record no longer verifies (its basis broke: the report gone, or no longer the one it was made from)."""
    from pathlib import Path

    from h3gates.core.outputs import RESULTS, promotion_paths

    parts = Path(out).parts
    if len(parts) < 3 or parts[0] != RESULTS:
        return
    record, flag = promotion_paths(parts[1], parts[2])
    if Path(flag).exists():
        from h3gates.core.promotion import revoke_if_wrong

        if revoke_if_wrong(record, flag):
            print(f"h3gates: revoked {flag}: its promotion no longer verifies ({out} changed)", file=sys.stderr)


def _baseline(a) -> int:
    from h3gates.core.context import CAPTURES, ArtifactContext, artifact_meta

    actx = ArtifactContext.from_json(a.context)
    rung = actx.rung
    if rung != CAPTURES and len(a.out) != 1:
        parser().error(f"baseline r{rung}: one --out expected, got {len(a.out)}")
    meta = artifact_meta(actx)  # the artifact's identity, computed here: the computing module needs no key code
    if actx.device == "cuda":
        # the block captures record no time and share the device; the baseline artifacts record their wall time
        # (rungs 5-7 report it) or Nsight Compute's counters (rung 8): the device alone
        _lease(
            f"baseline captures block {' '.join(map(str, a.blocks))}" if rung == CAPTURES else f"baseline r{rung}",
            shared=rung == CAPTURES,
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
    _sign_artifact(a, actx)
    return 0


def _sign_artifact(a, actx) -> None:
    """Sign the artifact(s) the job wrote (h3gates.core.links): from the capture it read (rung 8's) and its context."""
    from h3gates.core import links
    from h3gates.core.context import CAPTURES, artifact_path
    from h3gates.core.fingerprints import digest, file_sha256

    read = []
    if actx.rung == 8:
        read.append(artifact_path(actx.capture_context(), block=actx.profiler["block"]))
    materials = {p: file_sha256(p) for p in read if os.path.exists(p)}
    materials[links.CONFIG] = digest(json.loads(a.context))
    step = "baseline captures" if actx.rung == CAPTURES else f"baseline r{actx.rung}"
    links.sign(step, a.out, materials, a.key, a.trusted_keys, ["h3gates", "baseline"])


def _token(a) -> int:
    from h3gates.core.errors import Refusal
    from h3gates.core.tokens import token

    try:
        token(a.reports, a.out, a.trusted_keys)
    except Refusal:
        if a.record:  # a failing gate: revoke the promotion only where the record no longer verifies
            from h3gates.core.promotion import revoke_if_wrong

            revoke_if_wrong(a.record, a.flag)
        raise
    return 0


def _promote(a) -> int:
    from h3gates.core.config import validate_config
    from h3gates.core.promotion import promote

    promote(validate_config(json.loads(a.config_json)), a.candidate, a.record, a.flag, a.configfile)
    print(f"promoted {a.candidate}: {a.record}")
    return 0


def _plot(a) -> int:
    from h3gates.core.report import read
    from h3gates.rungs.plots import ratio_plot

    docs = [read(p) for p in a.reports]
    ratio_plot([(f"{d['candidate']} block {d['block']}", d["timing"]) for d in docs], a.out)
    return 0


def _perf_worker(a) -> int:  # a timing process of rung 4 (h3gates.rungs.timing), started by the rung itself
    from h3gates.core.context import RungContext
    from h3gates.rungs.nsight import exit_with_parent
    from h3gates.rungs.r4_block import worker

    exit_with_parent()
    worker(RungContext.from_json(a.context), a.block, a.first, a.mode, a.read_before_go)
    return 0


def _profile_target(a) -> int:
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


def _signing(p) -> None:
    """The key a job signs its link with and the trusted list (the config's attestation; default: h3gates.core.attest)."""
    p.add_argument(
        "--key", help="signing key (attestation.key; default $H3GATES_KEY, else this user's on this machine)"
    )
    p.add_argument("--trusted-keys", help="trusted public keys (attestation.trusted_keys)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="h3gates", description="The workflow's jobs (its rules and rungs run them).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("rung")
    g.add_argument("rung", type=int, choices=range(1, 9))
    g.add_argument("--context", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--block", type=int)
    g.add_argument("--upstream", nargs="*", default=[])
    _signing(g)
    g.set_defaults(run=_rung)
    b = sub.add_parser("baseline")
    b.add_argument("--context", required=True)
    b.add_argument("--out", required=True, nargs="+", help="one artifact; for the captures (rung 0), one per --blocks")
    b.add_argument("--blocks", type=int, nargs="*", default=[], help="the captures' blocks (rung 0), in --out's order")
    _signing(b)
    b.set_defaults(run=_baseline)
    t = sub.add_parser("token")
    t.add_argument("--out", required=True)
    t.add_argument(
        "--record", help="the candidate's promotion record: its flag is revoked if the record no longer verifies"
    )
    t.add_argument("--flag")
    t.add_argument("reports", nargs="+")
    _signing(t)
    t.set_defaults(run=_token)
    p = sub.add_parser("promote")
    p.add_argument("candidate")
    p.add_argument("--configfile", nargs="*", default=[])
    p.add_argument("--config-json", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--flag", required=True)
    p.set_defaults(run=_promote)
    pl = sub.add_parser("plot")
    pl.add_argument("--out", required=True)
    pl.add_argument("reports", nargs="+")
    pl.set_defaults(run=_plot)
    pw = sub.add_parser("perf-worker")
    pw.add_argument("--context", required=True)
    pw.add_argument("--block", type=int, required=True)
    pw.add_argument("--first", choices=("baseline", "candidate"), required=True)
    pw.add_argument("--mode", choices=("graph", "eager"), required=True)
    pw.add_argument("--read-before-go", action="store_true")
    pw.set_defaults(run=_perf_worker)
    pt = sub.add_parser("profile-target")
    pt.add_argument("--context", required=True)
    pt.add_argument(
        "--side",
        choices=("baseline", "candidate", "baseline-artifact"),
        required=True,
        help="baseline-artifact: --context is a baseline context (rule baseline_artifact, rung 8)",
    )
    pt.set_defaults(run=_profile_target)
    return ap


JOBS = ("rung", "baseline", "token", "promote", "plot", "perf-worker", "profile-target")  # parser()'s commands


def preload() -> list[str]:
    """What a run's warm worker (h3gates.core.warm) imports before it forks a child per job, and what a GPU job
    imports before its lease (_lease): the third-party libraries a rung or baseline job imports, the slow part of
    its start (torch and Comfy Kitchen: 5-10 s on a CPU here). Never an h3gates module beyond this entry, never a
    candidate's kernels. Nothing here starts the CUDA driver: Comfy Kitchen's import asks torch.cuda.is_available(),
    which would (cudaGetDeviceCount, then cuInit, which reads CUDA_VISIBLE_DEVICES once: a lease set after it would
    not take, and a forked child could not use the driver), so it is asked through NVML here
    (PYTORCH_NVML_BASED_CUDA_CHECK=1 for the imports, as it was before them afterwards). The names of those it
    imported (all are the project's dependencies; it stops at one missing)."""
    loaded = []
    before = os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"
    try:
        import torch  # noqa: F401

        loaded.append("torch")
        import comfy_kitchen  # noqa: F401

        loaded.append("comfy_kitchen")
        import jsonschema  # noqa: F401
        import numpy  # noqa: F401
        import yaml  # noqa: F401

        loaded += ["numpy", "yaml", "jsonschema"]
        import cryptography  # noqa: F401
        import securesystemslib  # noqa: F401

        loaded += ["cryptography", "securesystemslib"]
    except ImportError:
        pass
    finally:
        if before is None:
            del os.environ[NVML_CHECK]
        else:
            os.environ[NVML_CHECK] = before
    return loaded


def main(argv=None) -> int:
    from h3gates.core.errors import exit_status

    a = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return exit_status(a.cmd, _on_planned_host, a)


def _on_planned_host(a) -> int:
    """Run the job, after checking first (before the lease, torch or the model) that a job reading a context
    runs on a host that would plan it the same way: its GEMM reference and its implementations' needs
    (h3gates.core.context.check_planned_reference; a mismatch is one line and exit 2)."""
    if getattr(a, "context", None) is not None:
        from h3gates.core.context import check_planned_reference

        check_planned_reference(a.context)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
