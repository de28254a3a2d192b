"""Cells and tables: the one place records become numbers (mean ± std per method and workers).

A *setup* is what must match for two runs to share a table: source (ours or the published
figures), model, local batch and network (for our runs: device/backend, plus the engine when it
is not torch, plus, on an emulated cluster, the set link rate, labelled with the range the links
measured). Cells never mix setups. Several ok records of one configuration combine as the
mean ± std over all their repeats (each record's `samples_per_sec_per_repeat`).

Records that differ in any other setting that changes performance (seed, model dimensions,
profile, launcher topology, ...: the recorded config, hashed by record.config_hash less the
method, the worker and server counts and the number of repeats) never share a table either: where
one model, batch and network holds several such configurations, each gets a table of its own,
its network labelled `cfg <hash>`. Likewise two runs of one method whose method settings
(partition, credit, fusion sizes, transport) or server count differ are separate rows, the
method labelled `<name> cfg <hash>`. Records without a config (older versions) group as before.

Cells show how far they can be trusted (the test is `noise.TEST`): "(n=2)" where fewer than 3
repeats stand behind the std, "(no std)" where none was published, and "≈" where no other
method at that worker count differs from the cell beyond noise.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ddlbench import metrics

from . import noise
from .records import PREDICTED, workers_per_node

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
    n: int | None  # repeats behind the cell (None: unknown, a published figure without a std)
    repeats: tuple[float, ...] = ()  # samples/s of each repeat, where the runs are ours
    busy: float | None = None  # the share of its machine's cores busy while measuring (ours, where recorded)
    steal: float | None = None  # the most of them the hypervisor gave other guests in one repeat (ours, where recorded)


Cells = dict  # {(method, workers): Cell}


def network_of(rec: dict) -> str:
    net = f"{rec.get('device')}/{rec.get('backend')}"
    net = net if rec.get("engine") in (None, "torch") else f"{net}/{rec['engine']}"
    emu = rec.get("network") or {}
    if emu.get("emulated"):  # a setup of its own per set rate; `measured_label` adds what was measured
        intra = f", intra {emu['intra_link']}" if emu.get("intra_link") else ""
        net = f"{net} emulated {emu.get('link')}{intra}"
    return net


def measured_label(recs: list[dict]) -> str:
    """What the emulated links of a setup's records measured, as the setup's label shows it:
    the range over every link of every run (the set rate alone would hide a link that ran slow)."""
    gbps = [g for r in recs for g in ((r.get("network") or {}).get("measured_gbps") or [])]
    if not gbps:
        return ""
    lo, hi = min(gbps), max(gbps)
    rate = f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"
    return f"(measured {rate} Gbit/s per link, no added latency)"


# What a table's setup hash leaves out: the table's own axes (method and workers; servers follow
# the worker count) and how many repeats were taken (more repeats of one configuration combine).
SETUP_DROPS = ("method", "workers", "servers", "profile.repeats")


def _variant(hashes: dict, key, value: str | None) -> str:
    """`cfg <hash>` where `key` (a setup or a method in one) was seen with several hashes."""
    return f"cfg {value[:8]}" if value and len(hashes[key]) > 1 else ""


def ours(records: list[dict]) -> dict[Setup, Cells]:
    from ddlbench.record import config_hash

    # predictions are never measurements, whoever passes them in
    ok = [r for r in records if r.get("status") == "ok" and r.get("samples_per_sec") is not None
          and r.get("kind") != PREDICTED]
    setup_hash = [config_hash(r.get("config"), SETUP_DROPS) for r in ok]
    # the method's own settings and its server count: one method's variants within a setup
    method_hash = [config_hash({"method": (r.get("config") or {}).get("method"), "servers": _servers_set(r)})
                   if r.get("config") else None for r in ok]
    by_setup, by_method = defaultdict(set), defaultdict(set)
    for r, sh, mh in zip(ok, setup_hash, method_hash):
        base = (r["model"], r["local_batch"], network_of(r))
        by_setup[base].add(sh)
        by_method[base + (sh, r["method"])].add(mh)
    emulated = defaultdict(list)
    for r in ok:
        emulated[network_of(r)].append(r)
    samples: dict = defaultdict(lambda: defaultdict(list))
    busy: dict = defaultdict(lambda: defaultdict(list))
    steal: dict = defaultdict(lambda: defaultdict(list))
    for r, sh, mh in zip(ok, setup_hash, method_hash):
        base = (r["model"], r["local_batch"], network_of(r))
        network = " ".join(filter(None, [base[2], measured_label(emulated[base[2]]), _variant(by_setup, base, sh)]))
        method = " ".join(filter(None, [r["method"], _variant(by_method, base + (sh, r["method"]), mh)]))
        setup = Setup("ours", r["model"], r["local_batch"], network)
        samples[setup][(method, r["workers"])].extend(r.get("samples_per_sec_per_repeat") or [r["samples_per_sec"]])
        if r.get("host_busy_cores") and r.get("host_cores"):
            busy[setup][(method, r["workers"])] += [b / r["host_cores"] for b in r["host_busy_cores"]]
        if r.get("host_steal_cores") and r.get("host_cores"):
            steal[setup][(method, r["workers"])] += [b / r["host_cores"] for b in r["host_steal_cores"]]
    return {s: {k: cell_of(v, busy[s].get(k), steal[s].get(k)) for k, v in c.items()} for s, c in samples.items()}


def _servers_set(rec: dict):
    """The record's server count where it was set by hand; None where it is the default (one per
    worker machine, `servers: auto`), which follows the worker count as the table's columns do."""
    import math

    per_node = workers_per_node(rec) or rec.get("workers") or 1
    auto = math.ceil((rec.get("workers") or 0) / per_node) if rec.get("servers") else 0
    return None if rec.get("servers") == auto else rec.get("servers")


def cell_of(samples_per_sec_per_repeat: list[float], busy: list[float] | None = None,
            steal: list[float] | None = None) -> Cell:
    return Cell(*metrics.mean_std(samples_per_sec_per_repeat), len(samples_per_sec_per_repeat),
                tuple(samples_per_sec_per_repeat), sum(busy) / len(busy) if busy else None,
                max(steal) if steal else None)  # steal comes in bursts: one repeat's moves the mean


def baseline_cell(cells: Cells) -> Cell | None:
    """Single-worker throughput: the one-worker runs of methods that only compute at one worker
    (`config.compute_only_at_one_worker`: the same computation, so their repeats pool; this
    runtime's PS methods and ByteScheduler also push or schedule at one worker), or every
    one-worker run where there is none of those; published one-worker rows (no std) average to
    a cell with no usable std."""
    from ddlbench.config import compute_only_at_one_worker

    ones = [c for (_, w), c in cells.items() if w == 1]
    if not ones:
        return None
    # a method row may carry its settings' hash ("bsp-a2a cfg 1234abcd"; see `ours`)
    only = [c for (m, w), c in cells.items() if w == 1 and compute_only_at_one_worker(m.split(" cfg ")[0])]
    ones = only or ones
    if len(ones) == 1:
        return ones[0]
    if all(c.repeats for c in ones):
        return cell_of([x for c in ones for x in c.repeats])
    return Cell(sum(c.mean for c in ones) / len(ones), 0.0, None)


def baseline(cells: Cells) -> float | None:
    base = baseline_cell(cells)
    return base.mean if base else None


def method_key(method: str) -> tuple:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def methods_of(cells: Cells) -> list[str]:
    return sorted({m for m, _ in cells}, key=method_key)


def workers_of(cells: Cells) -> list[int]:
    return sorted({w for _, w in cells})


def repeats_note(cell: Cell) -> str:
    """Says so where a cell's std is not usable (noise.MIN_REPEATS)."""
    if noise.usable(cell):
        return ""
    return " (no std)" if cell.n is None else f" (n={cell.n})"


def mean_std_text(cell: Cell) -> str:
    return f"{cell.mean:.2f}" if cell.n is None else f"{cell.mean:.2f} ± {cell.std:.2f}"


def fmt_cell(cell: Cell | None) -> str:
    return "-" if cell is None else mean_std_text(cell) + repeats_note(cell)


TIE_MARK = "≈"
CPU_MARK = "(cpu)"
CPU_BUSY = 0.9  # the share of the cores busy from which a run measured its machine's CPU as much as its network
STEAL_MARK = "(steal)"
LEGEND = (f"(n=k): fewer than {noise.MIN_REPEATS} repeats, no usable std; (no std): none published; "
          f"{TIE_MARK}: no other method at this worker count differs from this cell beyond noise; "
          f"{CPU_MARK}: its machine's cores were at least {CPU_BUSY:.0%} busy while measuring "
          f"(host_busy_cores): bound by the CPU as much as by communication; "
          f"{STEAL_MARK}: the hypervisor gave other guests at least {metrics.DISTURBED_STEAL_SHARE:.0%} of its "
          f"machine's cores while one of its repeats was timed (host_steal_cores): it measured them too, run it again.")


def marked(text: str, cells: Cells, method: str, workers: int) -> str:
    """A cell's text with its repeats note, from two workers up the tie and CPU marks (one worker
    keeps the cores busy by design: there is no communication to be bound by), and at any worker
    count the steal mark (a disturbed one-worker cell is every speedup's baseline)."""
    cell = cells[(method, workers)]
    tie = f" {TIE_MARK}" if workers > 1 and noise.tied_with_all(cells, method, workers, noise.setup_spread(cells)) else ""
    cpu = f" {CPU_MARK}" if workers > 1 and cell.busy is not None and cell.busy >= CPU_BUSY else ""
    stolen = f" {STEAL_MARK}" if metrics.disturbed(cell.steal) else ""
    return text + repeats_note(cell) + tie + cpu + stolen


def results_table(setups: dict[Setup, Cells]) -> tuple[list[str], list[list]]:
    """Rows: model, local batch, network, source, method, then mean ± std per worker count."""
    workers = sorted({w for cells in setups.values() for w in workers_of(cells)})
    header = ["model", "local batch", "network or backend", "source", "method"] + [str(w) for w in workers]
    rows = []
    for s in sorted(setups):
        cells = setups[s]
        for m in methods_of(cells):
            rows.append([s.model, s.local_batch, s.network, s.source, m] + [
                marked(mean_std_text(cells[(m, w)]), cells, m, w) if (m, w) in cells else "-" for w in workers])
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
                    row.append(marked(f"{sp:.2f}x ({metrics.scaling_efficiency(sp, w):.0%})", cells, m, w))
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
