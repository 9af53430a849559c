"""Plot of rung 4's performance gate: each pair's candidate/baseline ratio per process (under the report's
timing.samples), the bounds at each
look, 1 - min_gain, and the decision with whether it was enforced."""

from __future__ import annotations

import math
from pathlib import Path

from h3gates.core import perfgate as PG


def ratio_plot(timings, out_png) -> None:
    """timings: (title, timing record of a rung-4 report) per block; one panel each, written to out_png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timings = list(timings)
    fig, axes = plt.subplots(1, len(timings), figsize=(4.5 * len(timings), 3.4), squeeze=False)
    for ax, (title, t) in zip(axes[0], timings):
        gate = t.get("performance_gate") or {}
        verdict = f"{gate.get('decision', t.get('decision'))}" + (
            "" if gate.get("enforced", True) else " (not enforced)"
        )
        x0 = 0
        samples = (t.get("params") or {}).get("samples", "steady")  # the report's statistic (older ones: steady)
        for i, proc in enumerate(t.get("processes") or []):
            r = [math.exp(PG.pair_d(p, samples, own)) for p, own in zip(proc["pairs"], PG.own_first(proc["pairs"]))]
            ax.plot(
                range(x0 + 1, x0 + len(r) + 1), r, "o", ms=3, alpha=0.8, label=f"process {i} ({proc['first']} first)"
            )
            x0 += len(r)
        for h in t.get("look_history") or []:
            if h["lower"] is not None:
                at = h["pairs_per_process"] * len(t.get("processes") or [1])
                ax.errorbar(
                    [at],
                    [h["ratio"]],
                    yerr=[[h["ratio"] - h["lower"]], [h["upper"] - h["ratio"]]],
                    fmt="s",
                    color="tab:red",
                    ms=4,
                    capsize=3,
                    label=f"bounds at look {h['look'] + 1}",
                )
        if t.get("threshold") is not None:
            ax.axhline(t["threshold"], color="tab:green", ls="--", lw=1, label="1 - min_gain")
        mode = t.get("mode") or "-"
        ratio = f"{t['ratio']:.4f}" if t.get("ratio") else "n/a"
        ax.set_title(f"{title}\n{verdict}, {mode}, attempt {t.get('attempt')}, ratio {ratio}", fontsize=8)
        ax.set_xlabel("pair")
        ax.set_ylabel("candidate / baseline")
        ax.legend(fontsize=6)
    fig.tight_layout()
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
