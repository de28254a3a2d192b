"""Cells and tables: the one place records become numbers (mean ± std per method and workers).

A *setup* is what must match for two runs to share a table: source (ours or the published
figures), model, local batch and network (for our runs: device/backend, plus the engine when it
is not torch). Cells never mix setups. Several ok records of one configuration combine as the
mean ± std over all their repeats.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ddlbench import metrics

METHOD_ORDER = ("bsp-ps", "bsp-a2a", "wfbp-ps", "wfbp-a2a", "mg-wfbp", "bytescheduler-ps", "bytescheduler-a2a", "ddp")


@dataclass(frozen=True, order=True)
class Setup:
    source: str  # "ours" or "published"
    model: str
    local_batch: int
    network: str


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float
    n: int | None  # repeats behind the cell (None: not published)


Cells = dict  # {(method, workers): Cell}


def network_of(rec: dict) -> str:
    net = f"{rec.get('device')}/{rec.get('backend')}"
    return net if rec.get("engine") in (None, "torch") else f"{net}/{rec['engine']}"


def ours(records: list[dict]) -> dict[Setup, Cells]:
    samples: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("status") != "ok" or r.get("samples_per_sec") is None:
            continue
        setup = Setup("ours", r["model"], r["local_batch"], network_of(r))
        samples[setup][(r["method"], r["workers"])].extend(r.get("samples_per_sec_per_repeat") or [r["samples_per_sec"]])
    return {s: {k: Cell(*metrics.mean_std(v), len(v)) for k, v in c.items()} for s, c in samples.items()}


def baseline(cells: Cells) -> float | None:
    """Single-worker throughput: at one worker every method is the same computation."""
    ones = [c.mean for (_, w), c in cells.items() if w == 1]
    return sum(ones) / len(ones) if ones else None


def method_key(method: str) -> tuple:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def methods_of(cells: Cells) -> list[str]:
    return sorted({m for m, _ in cells}, key=method_key)


def workers_of(cells: Cells) -> list[int]:
    return sorted({w for _, w in cells})


def fmt_cell(cell: Cell | None) -> str:
    return "-" if cell is None else f"{cell.mean:.2f} ± {cell.std:.2f}"


def results_table(setups: dict[Setup, Cells]) -> tuple[list[str], list[list]]:
    """Rows: model, local batch, network, source, method, then mean ± std per worker count."""
    workers = sorted({w for cells in setups.values() for w in workers_of(cells)})
    header = ["model", "local batch", "network or backend", "source", "method"] + [str(w) for w in workers]
    rows = []
    for s in sorted(setups):
        cells = setups[s]
        for m in methods_of(cells):
            rows.append([s.model, s.local_batch, s.network, s.source, m] + [fmt_cell(cells.get((m, w))) for w in workers])
    return header, rows


def speedup_table(setups: dict[Setup, Cells]) -> tuple[list[str], list[list]]:
    """Speedup over one worker and scaling efficiency, where a one-worker run exists."""
    workers = sorted({w for cells in setups.values() for w in workers_of(cells) if w > 1})
    header = ["model", "local batch", "network or backend", "source", "method"] + \
             [f"{w}: speedup (efficiency)" for w in workers]
    rows = []
    for s in sorted(setups):
        cells = setups[s]
        base = baseline(cells)
        if base is None:
            continue
        for m in methods_of(cells):
            row = [s.model, s.local_batch, s.network, s.source, m]
            for w in workers:
                c = cells.get((m, w))
                if c is None:
                    row.append("-")
                else:
                    sp = metrics.speedup(c.mean, base)
                    row.append(f"{sp:.2f}x ({metrics.scaling_efficiency(sp, w):.0%})")
            rows.append(row)
    return header, rows


def markdown(header: list, rows: list[list]) -> str:
    text = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(text[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in text[1:]])


def write_csv(path: Path, header: list, rows: list[list]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
