"""Timing plots for the HTML report: per-round baseline vs candidate of the block gate."""

from __future__ import annotations

import json
from pathlib import Path


def timing_plot(reports, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = [json.loads(Path(p).read_text()) for p in reports]
    fig, axes = plt.subplots(1, len(docs), figsize=(4 * len(docs), 3.2), squeeze=False)
    for ax, d in zip(axes[0], docs):
        t = d["timing"]
        rounds = range(1, len(t["baseline_s"]) + 1)
        ax.plot(rounds, [x * 1e3 for x in t["baseline_s"]], "o-", label="baseline")
        ax.plot(rounds, [x * 1e3 for x in t["candidate_s"]], "s-", label="candidate")
        g = d["timing"]["performance_gate"]
        ax.set_title(f"{d['candidate']} block {d['block']}\ngain {g['gain'] * 100:+.2f}% (need {g['required_gain'] * 100:.2f}%{'' if g['enforced'] else ', not enforced'})", fontsize=8)
        ax.set_xlabel("round (AB, BA alternating)")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
