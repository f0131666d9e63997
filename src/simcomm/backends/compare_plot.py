"""--plot for simcomm compare: measured and predicted busbw against size, one panel per table."""
from __future__ import annotations

import math


def plot_comparisons(comparisons, path) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    k = len(comparisons)
    cols = min(k, 2)
    rows = math.ceil(k / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    for ax, cmp in zip(axes.flat, comparisons):
        sizes = [p.size for p in cmp.points]
        ax.plot(sizes, [cmp.busbw(p.measured, p.size) for p in cmp.points], "o-", label="measured")
        ax.plot(sizes, [cmp.busbw(p.predicted, p.size) for p in cmp.points], "s--", label=f"simcomm ({cmp.cluster})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{cmp.collective}, {cmp.ranks} ranks" + (f": {cmp.title}" if cmp.title else ""), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
