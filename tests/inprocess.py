"""A candidate's climb run in this process, as the workflow chains its jobs (no Snakemake: seconds
instead of minutes): the baseline artifacts rules baseline_captures and baseline_artifact would make, each rung, its pass
token."""

from __future__ import annotations

from pathlib import Path

from h3gates import baseline, paths, provenance, rungs, tokens


def climb(cfg: dict, cand: str) -> tuple[int, str]:
    """Rung after rung -> (the rung whose token refused, its one-line refusal), or (0, "")."""
    upstream: list[str] = []
    for rung in range(1, 9):
        ctx = provenance.rung_context(cfg, cand, rung)
        if not all(Path(p).exists() for p in ctx.get("captures", {}).values()):
            cctx, blocks = baseline.capture_context_of(ctx), baseline.captured_blocks(cfg)
            baseline.compute_captures(cctx, blocks, [baseline.capture_path(cctx, b) for b in blocks])
        if "baseline_artifact" in ctx and not Path(ctx["baseline_artifact"]).exists():
            baseline.compute(baseline.context_of(ctx), ctx["baseline_artifact"])
        outs = paths.report_paths(cfg["profile"], cand, cfg["blocks"])[rung]
        for out, block in zip(outs, cfg["blocks"] if rung in paths.PER_BLOCK else [None]):
            rungs.run(rung, ctx, out, block, upstream)
        try:
            tokens.token(outs, paths.token_path(cfg["profile"], cand, rung))
        except tokens.Refusal as e:
            return rung, e.reasons[0]
        upstream = outs
    return 0, ""
