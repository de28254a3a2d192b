"""Views of commbench records: a table like nccl-tests', log-log plots, a recommendation, and
the seeds' experiments (time against process groups; per-tensor vs fused vs buckets)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ddlbench.analysis.tables import markdown


def _sizes(rows):
    return [r for r in rows if r.get("mode", "sizes") == "sizes" and "bytes" in r]


def _label(r) -> str:
    return r["backend"] + (f" (fallback for {r['fallback_from']})" if r.get("fallback_from") else "")


def render(rows: list[dict]) -> str:
    out = []
    for r in rows:
        if "unsupported" in r:
            out.append(f"{r['backend']} x{r['workers']}: {r['collective']} {r['dtype']} on {r['device']} unsupported: {r['unsupported']}")
        if "error" in r:
            out.append(f"ERROR: {r['error']}")
    groups = defaultdict(list)
    for r in _sizes(rows):
        groups[(r["collective"], r["dtype"], r["device"], r["workers"])].append(r)
    for (coll, dtype, device, workers), rs in sorted(groups.items()):
        out.append(f"\n{coll}, {dtype}, {device}, {workers} workers")
        header = ["backend", "size (B)", "time (us)", "p50 (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]
        body = [[_label(r), r["bytes"], f"{r['time_us']:.1f}", f"{r['time_us_p50']:.1f}", f"{r['algbw_GBps']:.3f}",
                 f"{r['busbw_GBps']:.3f}", r["wrong"]] for r in sorted(rs, key=lambda r: (r["backend"], r["bytes"]))]
        out.append(markdown(header, body))
    rec = recommend(rows)
    if rec:
        out.append("\nrecommendation (fastest mean time; consecutive sizes with the same winner merged):")
        out += [f"  {k}: {v}" for k, v in rec.items()]
    out += _groups(rows) + _fusion(rows)
    return "\n".join(out) if out else "no measurements"


def recommend(rows: list[dict]) -> dict[str, str]:
    """{"all_reduce fp32 cpu x2": "gloo up to 64 KiB; mpi4py from 256 KiB", ...}."""
    best = defaultdict(dict)
    for r in _sizes(rows):
        if r["wrong"]:
            continue  # a wrong answer is never fast
        key = f"{r['collective']} {r['dtype']} {r['device']} x{r['workers']}"
        cur = best[key].get(r["bytes"])
        if cur is None or r["time_us"] < cur[1]:
            best[key][r["bytes"]] = (r["backend"], r["time_us"])
    out = {}
    for key, by_size in best.items():
        runs = []
        for size in sorted(by_size):
            b = by_size[size][0]
            if runs and runs[-1][0] == b:
                runs[-1][2] = size
            else:
                runs.append([b, size, size])
        out[key] = "; ".join(f"{b} for {_h(lo)}..{_h(hi)}" for b, lo, hi in runs)
    return out


def _h(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def _groups(rows) -> list[str]:
    rs = sorted((r for r in rows if r.get("mode") == "groups" and "time_us" in r), key=lambda r: (r["backend"], r["groups"]))
    if not rs:
        return []
    body = [[r["backend"], r["groups"], r["workers"], r["bytes"], f"{r['time_us']:.1f}", r["cores"]] for r in rs]
    return ["\nseed 002: pairs of ranks, each its own group, all reducing at once",
            markdown(["backend", "groups", "workers", "bytes", "time per call (us)", "cores"], body)]


def _fusion(rows) -> list[str]:
    rs = [r for r in rows if r.get("mode") == "fusion" and "time_us" in r]
    if not rs:
        return []
    fused = {(r["backend"], r["model"], r["workers"]): r["time_us"] for r in rs if r["strategy"] == "fused"}
    body = [[r["backend"], r["model"], r["workers"], r["strategy"], r["messages"], f"{r['time_us'] / 1e3:.1f}",
             f"{r['time_us'] / fused[(r['backend'], r['model'], r['workers'])]:.2f}"] for r in rs]
    return ["\nseed 003: all-reducing a model's gradients, time relative to one fused buffer",
            markdown(["backend", "model", "workers", "strategy", "messages", "time (ms)", "/ fused"], body)]


def plots(rows: list[dict], out_prefix: Path) -> str:
    """Log-log time and busbw against size: one line per backend (and worker count), one panel
    per dtype and device. Returns where they were written."""
    rs = _sizes(rows)
    if not rs:
        return "no size sweep to plot"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["collective"], r["dtype"], r["device"]) for r in rs})
    written = []
    for metric, ylabel in (("time_us", "time (us)"), ("busbw_GBps", "bus bandwidth (GB/s)")):
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
        for ax, (coll, dtype, device) in zip(axes[0], panels):
            lines = defaultdict(list)
            for r in rs:
                if (r["collective"], r["dtype"], r["device"]) == (coll, dtype, device):
                    lines[f"{_label(r)} x{r['workers']}"].append((r["bytes"], r[metric]))
            for name, pts in sorted(lines.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [max(p[1], 1e-9) for p in pts], marker="o", ms=3, label=name)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{coll}, {dtype}, {device}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
        fig.tight_layout()
        out_prefix.parent.mkdir(parents=True, exist_ok=True)
        path = out_prefix.with_name(f"{out_prefix.name}-{metric}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return "plots: " + ", ".join(written)
