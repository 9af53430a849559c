"""A candidate's climb run in this process, as the workflow chains its jobs (no Snakemake: seconds
instead of minutes): the baseline artifacts rules baseline_captures and baseline_artifact would make, each rung, its pass
token. Each product is signed as its job signs it (h3gates.core.links), so the tokens check it as in the workflow."""

from __future__ import annotations

from pathlib import Path

from h3gates.core import context as X
from h3gates.core import links, report, tokens
from h3gates.core import outputs as paths
from h3gates.core.context import RungContext
from h3gates.core.errors import Refusal
from h3gates.core.fingerprints import digest
from h3gates.rungs import artifacts, ladder


def make_captures(cfg: dict, shared: X.SharedContext | None = None) -> None:
    cctx = X.capture_context(shared or X.SharedContext.of(cfg))
    blocks = X.captured_blocks(cfg)
    outs = [X.artifact_path(cctx, block=b) for b in blocks]
    artifacts.compute_captures(cctx, blocks, outs, X.artifact_meta(cctx))
    links.sign("baseline captures", outs, {links.CONFIG: digest(X.artifact_key(cctx))})


def make_artifact(ctx: RungContext) -> None:
    actx = ctx.artifact_context()
    artifacts.compute(actx, ctx.baseline_artifact, X.artifact_meta(actx))
    links.sign(f"baseline r{actx.rung}", [ctx.baseline_artifact], {links.CONFIG: digest(X.artifact_key(actx))})


def climb(cfg: dict, cand: str) -> tuple[int, str]:
    """Rung after rung -> (the rung whose token refused, its one-line refusal), or (0, ""). The reports go
    under the candidate's results name (`<cand>@<stem>` for a `source:` variant), as the workflow's do."""
    name = X.results_name_of(cfg, cand)
    for rung in range(1, 9):
        ctx = RungContext.from_config(cfg, cand, rung)
        if not all(Path(p).exists() for p in ctx.captures.values()):
            make_captures(cfg)
        if ctx.baseline_artifact and not Path(ctx.baseline_artifact).exists():
            make_artifact(ctx)
        outs = paths.report_paths(cfg["profile"], name, cfg["blocks"])[rung]
        for out, block in zip(outs, cfg["blocks"] if rung in paths.PER_BLOCK else [None]):
            # what the workflow's rule gives it (rules/common.smk upstream_of, the layout links checks)
            upstream = links.expected_upstream(cfg["profile"], name, rung, block, cfg["blocks"])
            ladder.run(rung, ctx, out, block, upstream)
            links.sign_report(out, report.read(out))
        try:
            tokens.token(outs, paths.token_path(cfg["profile"], name, rung))
        except Refusal as e:
            return rung, e.reasons[0]
    return 0, ""
