"""Plot of rung 4's sequential performance gate: per-round paired ratios, the bounds at each look, 1 - min_gain."""

from __future__ import annotations

from pathlib import Path


def ratio_plot(timings, out_png) -> None:
    """timings: (title, timing dict from h3gates.core.perfgate.run) per block; one panel each, written to out_png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timings = list(timings)
    fig, axes = plt.subplots(1, len(timings), figsize=(4.5 * len(timings), 3.4), squeeze=False)
    for ax, (title, t) in zip(axes[0], timings):
        for o, marker in (("AB", "o"), ("BA", "s")):
            idx = [i for i, x in enumerate(t["order"]) if x == o]
            ax.scatter(
                [i + 1 for i in idx], [t["ratios"][i] for i in idx], marker=marker, s=14, alpha=0.7, label=f"{o} round"
            )
        ax.plot([2 * i + 1.5 for i in range(len(t["pair_ratios"]))], t["pair_ratios"], "k.", ms=4, label="AB/BA pair")
        at = [lk["rounds"] for lk in t["looks"]]
        for key, style in (("upper", "v-"), ("lower", "^-")):
            pts = [(r, lk[key]) for r, lk in zip(at, t["looks"]) if lk[key] is not None]
            if pts:
                ax.plot(*zip(*pts), style, color="tab:red", ms=5, lw=1.2, label=f"{key} bound at look")
        ax.axhline(t["threshold"], color="tab:green", ls="--", lw=1, label="1 - min_gain")
        ax.set_title(
            f"{title}\n{t['decision']} after {t['rounds']} rounds, median {t['median_ratio']:.4f}, "
            f"CV A/B {t['cv']['baseline'] * 100:.1f}/{t['cv']['candidate'] * 100:.1f}%",
            fontsize=8,
        )
        ax.set_xlabel("round")
        ax.set_ylabel("candidate / baseline")
        ax.legend(fontsize=6)
    fig.tight_layout()
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
