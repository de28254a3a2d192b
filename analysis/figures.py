"""The study's Figure 4, per setup: grouped bars of samples/s per method, one group per worker
count, error bars from the repeats, and above each group the best speedup over one worker: the
method, how many others are within noise of it (noise.TEST), and the 95% t-interval of its mean
over the one-worker mean (the baseline is common to every bar of the setup); where the cell has
fewer than 3 repeats, its repeats and the setup's run-to-run spread instead."""
from __future__ import annotations

import re
from pathlib import Path

from ddlbench import metrics

from . import noise
from .tables import Cells, Setup, baseline, methods_of, workers_of


def slug(setup: Setup) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", f"fig4-{setup.source}-{setup.model}-b{setup.local_batch}-{setup.network}").strip("-").lower()


def best_speedup_label(cells: Cells, workers: int, base: float) -> str:
    """Two lines: the fastest method at this worker count (with "(≈ k others)" where k methods
    are within noise of it), then its speedup with an interval, or why it has none."""
    method, cell = max(((m, c) for (m, w), c in cells.items() if w == workers), key=lambda mc: mc[1].mean)
    spread = noise.setup_spread(cells)
    tied = noise.ties(cells, method, workers, spread)
    sp = metrics.speedup(cell.mean, base)
    ci = noise.mean_interval(cell)
    if ci:
        value = f"{sp:.2f}x [{metrics.speedup(ci[0], base):.2f}, {metrics.speedup(ci[1], base):.2f}]"
    else:
        noted = "no std" if cell.n is None else f"n={cell.n}"
        value = f"{sp:.2f}x ({noted}" + (f", spread {spread:.0%})" if spread is not None else ")")
    others = f" (≈ {len(tied)} other{'s' if len(tied) > 1 else ''})" if tied else ""
    return f"{method}{others}\n{value}"


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
            if w > 1:
                ax.text(j, top * 1.03, best_speedup_label(cells, w, base), ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, top * 1.2)
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
