"""The study's Figure 4, per setup: grouped bars of samples/s per method, one group per worker
count, error bars from the repeats, and the best speedup over one worker above each group."""
from __future__ import annotations

import re
from pathlib import Path

from ddlbench import metrics

from .tables import Cells, Setup, baseline, methods_of, workers_of


def slug(setup: Setup) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", f"fig4-{setup.source}-{setup.model}-b{setup.local_batch}-{setup.network}").strip("-").lower()


def figure4(setup: Setup, cells: Cells, out_dir: Path, intensity: float | None = None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = methods_of(cells)
    workers = workers_of(cells)
    base = baseline(cells)
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(workers) + 4.5), 4.2))
    colors = plt.get_cmap("tab10")
    for i, m in enumerate(methods):
        xs, ys, errs = [], [], []
        for j, w in enumerate(workers):
            c = cells.get((m, w))
            if c is not None:  # a missing cell stays a gap, never a zero bar
                xs.append(j + (i - (len(methods) - 1) / 2) * width)
                ys.append(c.mean)
                errs.append(c.std)
        ax.bar(xs, ys, width, yerr=errs, capsize=2, label=m, color=colors(i % 10))
    top = max(c.mean + c.std for c in cells.values())
    if base:
        for j, w in enumerate(workers):
            at_w = [c.mean for (m, n), c in cells.items() if n == w]
            if at_w and w > 1:
                ax.text(j, top * 1.04, f"{metrics.speedup(max(at_w), base):.1f}x", ha="center", fontsize=9)
    ax.set_ylim(0, top * 1.15)
    ax.set_xticks(range(len(workers)), [str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.set_ylabel("samples/s")
    i_text = f"I = {intensity:.0f}, " if intensity else ""
    ax.set_title(f"{setup.model} ({i_text}LBS = {setup.local_batch}), {setup.network} [{setup.source}]", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="method", title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{slug(setup)}.{ext}"
        fig.savefig(path, dpi=120)
        paths.append(path)
    plt.close(fig)
    return paths
