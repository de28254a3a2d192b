"""The table printed at the end of `make reproduce`: samples/s ± std per method and worker
count, with speedup over one worker where a one-worker run of the same setup is recorded.

    python -m ddlbench.analysis.summary [results_dir_or_jsonl ...]

Cells never mix models, batches, engines, backends or devices: each such setup is its own table.
Several ok records of one configuration are combined as mean ± std over all their repeats.
"""
from __future__ import annotations

import sys
from collections import defaultdict

from ddlbench import metrics

from .records import load

SETUP_KEYS = ("model", "local_batch", "device", "backend", "engine")
METHOD_ORDER = ("bsp-ps", "bsp-a2a", "wfbp-ps", "wfbp-a2a", "mg-wfbp", "bytescheduler-ps", "bytescheduler-a2a", "ddp")


def aggregate(records: list[dict]) -> dict:
    """{setup: {(method, workers): (mean, std, n_repeats)}} from ok records."""
    cells: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("status") != "ok" or r.get("samples_per_sec") is None:
            continue
        setup = tuple(r.get(k) for k in SETUP_KEYS)
        per_repeat = r.get("samples_per_sec_per_repeat") or [r["samples_per_sec"]]
        cells[setup][(r["method"], r["workers"])].extend(per_repeat)
    return {s: {k: (*metrics.mean_std(v), len(v)) for k, v in c.items()} for s, c in cells.items()}


def baseline(cells: dict) -> float | None:
    """Single-worker throughput of a setup: every method is the same computation at one worker."""
    ones = [v[0] for (m, w), v in cells.items() if w == 1]
    return sum(ones) / len(ones) if ones else None


def _order(method: str) -> tuple:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def render(records: list[dict]) -> str:
    lines = []
    for setup, cells in sorted(aggregate(records).items(), key=lambda kv: tuple(map(str, kv[0]))):
        model, batch, device, backend, engine = setup
        base = baseline(cells)
        workers = sorted({w for _, w in cells})
        methods = sorted({m for m, _ in cells}, key=_order)
        lines.append(f"\n{model}, local batch {batch}, {device}/{backend}, engine {engine}: samples/s (mean ± std over repeats)"
                     + (f"; speedup over 1 worker ({base:.2f} samples/s) in brackets" if base else ""))
        header = ["method"] + [f"{w} worker{'s' if w > 1 else ''}" for w in workers]
        rows = []
        for m in methods:
            row = [m]
            for w in workers:
                if (m, w) not in cells:
                    row.append("-")
                    continue
                mean, std, _ = cells[(m, w)]
                cell = f"{mean:.2f} ± {std:.2f}"
                if base and w > 1:
                    cell += f" [{metrics.speedup(mean, base):.2f}x]"
                row.append(cell)
            rows.append(row)
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        fmt = lambda r: "| " + " | ".join(c.ljust(wd) for c, wd in zip(r, widths)) + " |"  # noqa: E731
        lines += [fmt(header), "|" + "|".join("-" * (wd + 2) for wd in widths) + "|"] + [fmt(r) for r in rows]
    return "\n".join(lines) if lines else "no ok run records yet"


def main(argv=None) -> int:
    paths = (sys.argv[1:] if argv is None else argv) or ["results"]
    loaded = load(paths)
    for p in loaded.problems:
        print(p, file=sys.stderr)
    failed = [r for r in loaded.records if r.get("status") == "failed"]
    print(render(loaded.records))
    if failed:
        print(f"\n{len(failed)} failed run(s) recorded; their errors are in the records' `error` field.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
