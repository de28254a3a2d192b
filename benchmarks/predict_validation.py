"""How good are the predictions? (issue 14's benchmark; numbers go in the closing note.)

1. Against the study's 100 Gb/s IB table (Shi et al. 2020, Figure 4): every multi-worker cell
   (3 models x 7 methods x 4/8/16/32 GPUs) predicted on `conf/network/100gbib.yaml`, the study's
   stack. The predictor is calibrated from the one-worker rows only (profile.one_worker_rows);
   the multi-worker rows are read here, after predicting, and never reach the model. Prints the
   median absolute percentage error over all cells and per method, the best-method hit rate over
   the (model, workers) cells, what dominates each model and method, and one out-of-sample check
   of the intra-node link: the study's statement that BERT-Large's all-reduce on 4 GPUs took 441 ms.
2. Against real runs here: every ok, measured record under --results whose setup has a
   one-worker run and whose network is known: a record naming a conf/network config in its
   `network` field (the emulated cluster's runs, issue 12), or all local records with
   --local-network NAME (e.g. conf/network/local-<hostname>.yaml from `make commbench`, or
   loopback), each as one machine of its workers (`network.on_one_machine`). The
   profile is scaled to that setup's measured one-worker throughput (the local calibration).
   Prints per-method MAPE. The profiles that calibrate those runs are kept under
   RESULTS/profiles: `--calibrate-only` measures them (the benches do, as they finish).
   Several --results directories (one bench each, each calibrated from its own one-worker runs
   and profiles) are pooled: the per-method medians are over every bench's runs, and a table
   gives each bench's own.

    python benchmarks/predict_validation.py [--results DIR [DIR ...]] [--local-network NAME] [--runs-only]
                                            [--again DIR] [--calibrate-only]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from ddlbench.analysis import reference
from ddlbench.analysis.records import load, workers_per_node
from ddlbench.analysis.tables import markdown
from ddlbench import hostcpu, metrics
from ddlbench.predict import cli, network, profile, simulate

STUDY_METHODS = tuple(m for m in simulate.METHODS if m != "ddp")
BERT_LARGE_4GPU_ALLREDUCE_S = 0.441  # the study's text: "each iteration requires 441ms of communication time"


COMM_UNCERTAINTIES = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0)  # the picks' sensitivity to cli.COMM_UNCERTAINTY
INTRA_NODES = ("pcie3x16", "pcie3x16-mgwfbp-table")  # the study node's two calibrations (conf/network/)


def published_cells():
    """{(model, method, workers): samples/s} of the published multi-worker rows (validation only)."""
    out = {}
    for setup, cells in reference.load().items():
        for (method, workers), cell in cells.items():
            if workers > 1:
                out[(setup.model, method, workers)] = cell.mean
    return out


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def study(intra: str = "pcie3x16", explain_workers: int = 32, opts=None, comm_uncertainty: float | None = None) -> dict:
    """Every published multi-worker cell predicted on 100gbib with the intra-node link of `intra`,
    the picks weighing communication at up to `comm_uncertainty` x the model's (default
    cli.COMM_UNCERTAINTY)."""
    from ddlbench.analysis.predicted import fastest_hits

    truth = published_cells()
    cluster = network.with_intra(network.load("100gbib"), intra) if intra != "pcie3x16" else network.load("100gbib")
    models = sorted({m for m, _, _ in truth})
    full, dominant = {}, {}
    for model in models:
        workers = sorted({w for m, _, w in truth if m == model})
        p, prof, _ = cli.predict(model, workers, cluster, STUDY_METHODS, explain=explain_workers is not None, opts=opts,
                                 comm_uncertainty=comm_uncertainty)
        for (method, w), pr in p.items():
            full[(model, method, w)] = pr
            if w == explain_workers:
                dominant[(model, method)] = cli.describe(pr.explanation)
    preds = {k: p.samples_per_sec for k, p in full.items()}
    errs = {k: ape(preds[k], v) for k, v in truth.items()}
    per_method = defaultdict(list)
    for (model, method, w), e in errs.items():
        per_method[method].append(e)
    cells = []
    for setup, published in reference.load().items():
        mine = {(me, w): v for (mo, me, w), v in full.items() if mo == setup.model}
        multi = {k: c for k, c in published.items() if k[1] > 1}
        cells += [{"model": setup.model, **h} for h in fastest_hits(mine, multi, STUDY_METHODS)]
    cells.sort(key=lambda c: (c["model"], c["workers"]))
    return {"errors": errs, "preds": preds, "truth": truth, "per_method": per_method, "cells": cells,
            "hits": sum(c["strict"] for c in cells), "hits_noise": sum(c["within_noise"] for c in cells),
            "hits_ties": sum(c["among_ties"] for c in cells),
            "dominant": dominant, "intra": intra}


def allreduce_check(intra: str) -> float:
    """Predicted time of one all-reduce of BERT-Large's gradients on one 4-GPU node."""
    prof = cli.load_profile("bert-large", 8, None)
    return network.load(intra).allreduce_s(sum(prof.tensor_bytes), 4)


def record_network(rec: dict) -> str | None:
    """The conf/network config a measured record ran on: the emulated cluster's records (issue 12)
    carry `network: {"emulated": true, "link": "1gbit", "measured_gbps": ...}` -> emulated-1gbit;
    a plain string names a config; local runs carry none."""
    net = rec.get("network")
    if isinstance(net, dict):
        return f"emulated-{net['link']}" if net.get("emulated") and net.get("link") else None
    return net or None


def record_cluster(rec: dict, net: str, directory: Path | None = None) -> network.Cluster:
    """The network a recorded run ran on, in the run's shape: a local run (no `network` in its
    record, every worker on one host) is this machine laid out as its nodes
    (`network.on_one_machine`: by default one, so per-machine PS runs one server, as its
    record's `servers` says); an emulated run with several workers per host has them talk over
    the host's loopback, shaped where its record's `intra_link` says (`network.emulated_hosts`).
    `directory`: where the config of `net` is (a bench's own, `bench_network`), else conf/network."""
    cluster, w, per_node = network.load(net, directory), rec["workers"], workers_per_node(rec)
    if isinstance(rec.get("network"), dict) and rec["network"].get("emulated"):
        return network.emulated_hosts(cluster, min(w, per_node or 1), rec["network"].get("intra_link"))
    if record_network(rec) is None and len(rec.get("hosts") or [None]) == 1:  # a local run: its nodes, one machine
        return network.on_one_machine(cluster, min(w, per_node or w))
    return cluster


def record_ps_topology(rec: dict) -> str | None:
    """A PS run's topology as it recorded it (its layout's `ps_topology`, else its config's,
    for records written before the layout said); None for an all-reduce run."""
    return rec.get("ps_topology") or ((rec.get("config") or {}).get("method") or {}).get("ps_topology")


def run_threads(rec: dict) -> int:
    """The intra-op threads each worker of a recorded run had (its OMP_NUM_THREADS, as the
    launchers set it; else the launchers' rule for this machine)."""
    from ddlbench.config import threads_for

    t = (rec.get("env") or {}).get("OMP_NUM_THREADS")
    return int(t) if t else threads_for(rec["workers"] + (rec.get("servers") or 0))


def run_copy(results: str, threads: int) -> tuple[float, float, str]:
    """The copies of a fused message on the CPU at a run's `threads`, one worker alone
    (profile.measure_copy), kept in `profiles_dir` with the bench's other calibrations: measured
    as the bench finishes (`calibrate`), or by the first validation of records without one, and
    read back by every later one (measured live, a validation moved BSP-A2A's, DDP's and
    MG-WFBP's medians 1-2 points between identical invocations)."""
    return profile.measure_copy("cpu", threads, cache_dir=profiles_dir(results))


def with_run_copy(prof, rec: dict, results: str):
    """`prof` with the copies of a fused message (pack, unpack) as the run's workers made them:
    on the CPU, those kept for the run's threads (`run_copy`, one worker alone), as many times
    as long as the run's workers outnumber the cores they share (W x threads / cores: each gets
    that share of a core, as its compute does); elsewhere (a GPU, or a record that names no
    device) the profile's own."""
    if rec.get("device") != "cpu":
        return prof
    threads = run_threads(rec)
    tensor_s, bps, source = run_copy(results, threads)
    cores = rec.get("host_cores") or hostcpu.cores()
    share = max(1.0, rec["workers"] * threads / cores)
    return prof.with_copy(tensor_s * share, bps / share,
                          source + (f", x {share:g} for {rec['workers']} workers at {threads} threads on {cores} cores"
                                    if share > 1 else ""))


def one_worker_samples_per_sec(recs: list[dict]) -> float:
    """The median over every repeat of these one-worker runs: one slow repeat on a shared
    machine (seen: 242 beside 302 and 435-533 samples/s of the same step) moves a mean. A repeat
    whose block lost metrics.DISTURBED_STEAL_SHARE of the machine's cores or more to other
    guests (`host_steal_cores`, one per repeat) is left out while any other is left: it timed
    the neighbour too, and this is every prediction's compute."""
    every = [x for r in recs for x in repeats_of(r)]
    kept = [x for r in recs for x in metrics.undisturbed(repeats_of(r), r.get("host_steal_cores"), r.get("host_cores"))]
    return statistics.median(kept or every)


def repeats_of(rec: dict) -> list[float]:
    """A run's samples/s per repeat (the record's headline alone where it kept none)."""
    return rec.get("samples_per_sec_per_repeat") or [rec["samples_per_sec"]]


def run_measured(rec: dict) -> tuple[float | None, list[tuple[int, float]]]:
    """A run's measured samples/s over the repeats no neighbour disturbed (their mean, as the
    driver's headline is over all; the headline itself where none was), and the (index, stolen
    share) of those left out (`metrics.disturbed_repeats`); None where every repeat was. A repeat whose block lost
    metrics.DISTURBED_STEAL_SHARE of the machine's cores or more timed the neighbour as much as
    the method, and nothing the model is given (a one-worker run, a profile, the bench's
    commbench) saw it. Steal comes in bursts, so it is judged per repeat, not by the run's mean:
    one emulated 4-worker ByteScheduler-A2A run lost 15, 29, 8, 11 and 0% of the cores in its five
    repeats and read 78, 62, 90, 82 and 114 samples/s."""
    return measured_of(rec, *kept_repeats(rec))


def measured_of(rec: dict, kept: list[float], out: list[tuple[int, float]]) -> tuple[float | None, list]:
    """`run_measured` from the run's `kept_repeats`."""
    if not out:
        return rec["samples_per_sec"], out
    return (statistics.mean(kept) if kept else None), out


def kept_repeats(rec: dict) -> tuple[list[float], list[tuple[int, float]]]:
    """A run's samples/s of each repeat no neighbour disturbed, and the (index, stolen share) of
    those left out (`run_measured`)."""
    reps = repeats_of(rec)
    out = metrics.disturbed_repeats(rec.get("host_steal_cores"), rec.get("host_cores"), len(reps))
    gone = {i for i, _ in out}
    return [x for i, x in enumerate(reps) if i not in gone], out


def mgwfbp_resolved(rec: dict) -> tuple[float, float] | None:
    """MG-WFBP's alpha, beta as the run resolved them (its start-up fit, in its record), which
    the prediction of that run takes with the groups it sent (`run_groups_of`; `local` reports
    beside whether the predictor alone would have chosen the run's groups, and whether these
    give them); None for another method."""
    if rec["method"] != "mg-wfbp" or rec.get("alpha_s") is None or rec.get("beta_s_per_byte") is None:
        return None
    return float(rec["alpha_s"]), float(rec["beta_s_per_byte"])


def one_worker_link(method: str, net: str | None) -> str | None:
    """The link a method's one-worker run depends on: none for an all-reduce method (its one
    worker sends nothing, so runs on any link pool); its network for PS, whose one worker
    reaches its servers over it."""
    return net if simulate.method_config(method)["architecture"] == "ps" else None


def run_groups_of(rec: dict, prof) -> tuple[int, ...] | None:
    """MG-WFBP's groups as the run sent them (its record's `groups`, bytes in send order), which
    its prediction times (`simulate.Options.mgwfbp_group_bytes`), as it takes the run's alpha
    and beta: the run merged with its own start-up timings of backward, and a profile measured
    apart tips a group's edge the other way now and then (three local benches here: 5 groups
    merged from the profile, 4 sent by each 2-worker run). None where they do not partition
    the profile's gradients (`simulate.run_groups`): then merged here."""
    try:
        groups = tuple(rec["groups"])
        simulate.Options(mgwfbp_group_bytes=groups)
        simulate.run_groups(prof, groups)
    except (TypeError, ValueError):
        return None
    return groups


def group_bytes(plan, prof) -> list[int]:
    """A plan's messages as the runtime records its groups: bytes per group, in send order."""
    return [sum(prof.tensor_bytes[i] for i in g) for g in plan.messages]


def profiles_dir(results: str) -> Path:
    """Where the profiles that calibrate the runs under `results` are kept: beside their records.
    On a shared machine what one worker gets beside others drifts over minutes (two tiny-resnet
    workers: 10.7 and 13.4 ms a step, measured minutes apart), so the bench measures them as it
    finishes (`--calibrate-only`) and every later validation of its runs reads the same ones."""
    return Path(results) / "profiles"


def bench_network(results: str, net: str | None = None) -> tuple[str, Path] | None:
    """The bench's own calibration of network `net`: (name, folder) of <profiles>/<name>.yaml,
    which make bench-local's and bench-emulated's commbench write as the bench finishes
    (--network-dir: local-<hostname>, emulated-<rate>); where `net` is not given, the bench's
    local-*.yaml (this host's name where it has several); None where it has none (then
    conf/network's). What a message costs the shared cores drifts over hours here, as a
    worker's compute does over minutes: a commbench of 10:38 charged per-machine PS 1.91 ms of
    the machine's CPU a key at 2 workers, one of 21:57 2.44 ms; two benches of the evening read
    every method with messages 10-29% fast on the first, and 7 of 8 methods within 10% on the
    second. An emulated bench on its own networks: 8 of 8; on conf/network's pooled ones, 5."""
    where = profiles_dir(results)
    if net is None:
        own, mine = sorted(p.stem for p in where.glob("local-*.yaml")), network.local_network_name()
        net = mine if mine in own else (own[0] if own else None)
    return (net, where) if net and (where / f"{net}.yaml").exists() else None


# Each calibrating profile is measured this many times and the median kept (profile.measured's
# `repeats`): measured right after a bench's runs, one of two benches here got a 2-worker profile
# 33% slower than the other's and than four measured later (15.1-15.4 ms a step), which moved its
# 2-worker predictions of BSP-A2A, BSP-PS and DDP from +4..+14% to -26..-29%.
CALIBRATION_REPEATS = 3


def setup_profiles(results: str, run: dict, one_worker_run: dict):
    """(one worker alone at the one-worker run's threads, one worker beside W-1 others at the
    W-worker run's threads): the two profiles that rescale the setup's one-worker throughput to
    what a worker of `run` got (profile.measured, CALIBRATION_REPEATS times each; kept in
    `profiles_dir`)."""
    from ddlbench.predict import profile

    where = profiles_dir(results)
    return (profile.measured(run["model"], run["local_batch"], "cpu", threads=run_threads(one_worker_run),
                             cache_dir=where, repeats=CALIBRATION_REPEATS),
            profile.measured(run["model"], run["local_batch"], "cpu", threads=run_threads(run), sharers=run["workers"],
                             cache_dir=where, repeats=CALIBRATION_REPEATS))


# ByteScheduler's machinery beside the run's other workers (profile.machinery_s) is timed in this
# many alternating rounds: beside three plain neighbours on 2 cores, 6 rounds had given 2.7 and
# 7.4 ms in two measurements of tiny-resnet.
MACHINERY_ROUNDS = 12


def runs_queue(method: str) -> bool:
    """Whether this runtime's `method` runs ByteScheduler's queue (its ByteScheduler-PS does:
    the worker variant)."""
    return simulate.runs_bytescheduler_queue(simulate.method_config(method, "worker"))


def setup_machinery(results: str, run: dict) -> float:
    """ByteScheduler's machinery in one worker of `run`, beside its W-1 others at its threads
    (profile.machinery_s, kept in `profiles_dir`): seconds per iteration, taken from compute
    (`simulate.Options.bytescheduler_cpu_s`). 0 for a method without ByteScheduler's queue.
    Where the run took a compute probe, the machinery as the machine ran then: times the run's
    free-running probe step (`probe_compute_s`: each worker's training step beside the W-1 others
    doing the same, at the run's threads) over the microbenchmark's own plain step (the same
    step, beside W-1 neighbours doing the same, timed in the rounds it was measured in):
    what a thread gets of these cores drifts by a fifth over an hour here (bl51's microbenchmark,
    12 pairs of rounds over a few minutes: plain steps of 9.1-12.4 ms beside one neighbour)."""
    return machinery_pair(results, run)[1]


def machinery_pair(results: str, run: dict) -> tuple[float, float]:
    """`setup_machinery` as measured and at the run's probe, from one read of the measurement."""
    from ddlbench.predict import profile

    if not runs_queue(run["method"]):
        return 0.0, 0.0
    m = profile.machinery_s(run["model"], run["local_batch"], threads=run_threads(run), sharers=run["workers"],
                            cache_dir=profiles_dir(results), rounds=MACHINERY_ROUNDS)
    probe = probe_compute_s(run)
    return m["machinery_s"], m["machinery_s"] * (probe / m["plain_s"] if probe and m.get("plain_s") else 1.0)


def one_worker_probe_s(recs: list[dict]) -> float | None:
    """The compute probe of these one-worker runs (the benches' one-worker runs take one: driver,
    `profile.compute_probe_iters`): the median over their repeats of each repeat's mean training
    step, at the runs' own threads and minutes, in seconds; a repeat whose block lost
    metrics.DISTURBED_STEAL_SHARE of the cores or more left out while another is left (as
    `one_worker_samples_per_sec`). None where none took one (records before 2026-12-02)."""
    every, kept = [], []
    for r in recs:
        steps = r.get("compute_probe_s")
        if not steps:
            continue
        every += steps
        kept += metrics.undisturbed(steps, r.get("host_steal_cores"), r.get("host_cores"))
    return statistics.median(kept or every) if every else None


def run_launch(results: str, run: dict) -> float:
    """What the runtime's launch of an eager all-reduce costs a worker's thread beyond make
    commbench's bare launch, per message, at the run's threads (profile.measure_launch, kept in
    `profiles_dir` with the bench's other calibrations): `simulate.Options.launch_s`. 0 off the
    CPU, where launches overlap the device's work."""
    from ddlbench.predict import profile

    if run.get("device") != "cpu":
        return 0.0
    return profile.measure_launch(run["model"], run["local_batch"], threads=run_threads(run),
                                  cache_dir=profiles_dir(results))[0]


def machinery_table(results: str) -> str | None:
    """The machinery timings kept in `profiles_dir` (`setup_machinery`), one row each, as the
    predictions of the runs sharing the cores used them; None where there are none."""
    rows = []
    for path in sorted(profiles_dir(results).glob("*-machinery.json")):
        m = json.loads(path.read_text())
        rows.append([path.name.removesuffix("-machinery.json"), f"{m['machinery_s'] * 1e3:.2f}",
                     f"{m['plain_s'] * 1e3:.2f}", f"{m['bytescheduler_s'] * 1e3:.2f}", m["source"]])
    return markdown(["kept as", "machinery ms", "plain step ms", "ByteScheduler step ms", "source"], rows) \
        if rows else None


def at_threads_of(results: str, one_worker_run: dict, x1: float, run: dict) -> float:
    """The setup's one-worker throughput `x1` (of `one_worker_run`) at the threads `run` (a
    one-worker run) computed on: a one-worker PS run shares the cores with its server (2 cores:
    one thread, where the one-worker all-reduce runs got two), so the model's compute for it is
    rescaled by the ratio of two profiles of one worker alone, at either run's threads."""
    at = thread_profiles(results, one_worker_run, run)
    return x1 if at is None else x1 * at[0].compute_s / at[1].compute_s


def thread_profiles(results: str, one_worker_run: dict, run: dict):
    """(one worker alone at `one_worker_run`'s threads, at `run`'s), measured or kept in
    `profiles_dir`; None where the two runs had the same threads."""
    from ddlbench.predict import profile

    have, want = run_threads(one_worker_run), run_threads(run)
    if have == want:
        return None
    return tuple(profile.measured(run["model"], run["local_batch"], "cpu", threads=t, cache_dir=profiles_dir(results),
                                  repeats=CALIBRATION_REPEATS) for t in (have, want))


def setup_key(r: dict) -> tuple:
    """A run's setup: model, batch, device, backend."""
    return r["model"], r["local_batch"], r.get("device"), r.get("backend")


def setups(recs: list[dict]):
    """(multi-worker run, its setup's one-worker runs of methods that only compute at one worker)
    for every ok multi-worker run of the seven methods and DDP whose setup (`setup_key`) has
    such a run."""
    base = one_worker_bases(recs)
    return [(r, base[setup_key(r)]) for r in recs
            if r["workers"] > 1 and setup_key(r) in base and r["method"] in simulate.METHODS]


def one_worker_bases(recs: list[dict]) -> dict:
    """{setup: its one-worker runs of methods that only compute at one worker}."""
    from ddlbench.config import compute_only_at_one_worker

    base = defaultdict(list)
    for r in recs:
        if r["workers"] == 1 and compute_only_at_one_worker(r["method"]) and r["method"] in simulate.METHODS:
            base[setup_key(r)].append(r)
    return base


def calibrating_runs(recs: list[dict]):
    """(one-worker run, its setup's one-worker runs of methods that only compute at one worker)
    for every one-worker run that calibrates ByteScheduler's machinery (`simulate.calibrate_unit_s`;
    this runtime's ByteScheduler-PS runs the worker's queue)."""
    base = one_worker_bases(recs)
    return [(r, base[setup_key(r)]) for r in recs if r["workers"] == 1 and setup_key(r) in base
            and r["method"] in simulate.METHODS and runs_queue(r["method"])]


def ok_records(results: str) -> list[dict]:
    return [r for r in load([results]).records if r.get("status") == "ok" and r.get("samples_per_sec")]


def calibrate(results: str) -> int:
    """Measure now the profiles, machinery timings, copy and launch timings that calibrate the
    runs under `results` (`setup_profiles`, `setup_machinery`, `run_copy`, `run_launch`, into
    `profiles_dir`; ones already there are kept): how many are there."""
    recs = ok_records(results)
    for r, base in setups(recs):
        setup_profiles(results, r, base[0])
        setup_machinery(results, r)
        if r.get("device") == "cpu":
            run_copy(results, run_threads(r))
            run_launch(results, r)
    for r, base in calibrating_runs(recs):
        thread_profiles(results, base[0], r)
    where = profiles_dir(results)
    return sum(len(list(where.glob(kept))) for kept in ("*-measured.json", "*-machinery.json", "copy-*.json",
                                                          "*-launch.json"))


def local(results: str, local_network: str | None) -> tuple[dict, dict, list, dict, dict]:
    """Over our own records with a known network: ({method: [(predicted, measured)]} with the
    workers sharing this machine, the same as if each had it alone, the per-run rows
    (method, network, workers, predicted, measured, MG-WFBP's plan check, where the compute came
    from: "lock-step", "probe" or "profile") of the first, {(model, batch, method, network):
    ByteScheduler's calibrated machinery per unit in seconds}, and the first again with other
    calibrations:
    {"profile": every run's compute from the bench-end profile, probe or not; "spread": a
    lock-step probe's run with its free-running steps' mean and spread instead, as records
    before it had (the others as the first)}).

    The setup's one-worker throughput: every one-worker run of a method that only computes at
    one worker (`compute_only_at_one_worker`), on any network (one worker sends nothing), same
    model, batch, device and backend. Every worker of a run here shared this machine's cores
    (local runs, and the emulated cluster's namespaces), so one worker's compute is what it got
    beside the others: where the run has a compute probe (`probe_compute_s`: each repeat began
    with every worker timing training steps alone, at once, with nothing communicating), the
    slowest worker's own step of its lock-step steps, begun as late as the last worker began it
    (`probe_lockstep_s`: what the W workers' compute costs an iteration that waits for all of
    them), or in records before those, its mean step, with its steps' spread as what the W
    workers wait for (`Profile.sync_factor`); else the
    one-worker throughput rescaled by the ratio of two profiles, one worker alone at the
    one-worker run's threads against one worker beside W-1 others at the W-worker run's threads
    (`setup_profiles`: profile.measured, sharers=W; no communication runs in either), measured
    as the bench finished where it kept them, else now, the second's spread what they wait for.
    What a worker gets beside others drifts over minutes here, so a profile measured minutes
    from the run mistimes its compute (one bench's 4-worker runs all 20-30% faster than
    predicted, the next's 11-20% slower); the probe times it as the run ran. ByteScheduler's own machinery: a delay per
    unit on its update path, calibrated from the one-worker runs of that method where there are
    some (`simulate.calibrate_unit_s`), against that one-worker run's own compute probe where it
    took one (`one_worker_probe_s`: the same minutes; bl50's and bl51's one-worker ByteScheduler
    runs, an hour apart, read 22-25% apart), else the setup's one-worker compute at that run's
    own threads (`at_threads_of`), and rescaled as the compute is (the run's probe over that
    compute); with the workers sharing the
    cores, also what it adds to one worker's iteration beside W-1 others doing the same at the
    run's threads (`setup_machinery`: profile.machinery_s, measured with the profiles, rescaled
    by the run's probe over its own plain step), taken from compute. The lone worker's run
    cannot price that: its machinery's threads find a core free, or take it from its own compute, where beside others they take the others' (tiny-resnet,
    one thread: 4.5 ms alone, 8.7 ms beside a second worker, 17 ms beside three); and as a
    delay on the update path alone it hid behind two workers' communication (+24% on
    ByteScheduler-A2A's 2 local workers, -4% with the cores' time as well). The two may overlap
    where the one-worker run had no core to spare (an all-reduce run at two threads on 2 cores):
    ByteScheduler-A2A's predictions here then run 2-4% slower than with the cores' time alone."""
    recs = ok_records(results)
    if local_network is None:  # the bench's own, where it measured one
        local_network = (bench_network(results) or (None,))[0]
    own = defaultdict(list)
    for r in recs:
        if r["workers"] == 1 and r["method"] in simulate.METHODS:
            link = one_worker_link(r["method"], record_network(r) or local_network)
            own[(*setup_key(r), r["method"], link)].append(r)
    shared, alone, runs, units = defaultdict(list), defaultdict(list), [], {}
    unit_probe_s = {}  # per key of `units` calibrated against its one-worker run's own probe: that probe
    others = {"profile": defaultdict(list), "spread": defaultdict(list), "unscaled": defaultdict(list),
              "disturbed": [], "repeats": {}}
    for r, base in setups(recs):
        net = record_network(r) or local_network
        if net is None:
            continue
        kept, stolen = kept_repeats(r)
        measured = measured_of(r, kept, stolen)[0]
        if stolen:  # its disturbed repeats left out, and said so (`run_measured`)
            others["disturbed"].append((r["method"], net, r["workers"], r["samples_per_sec"], measured,
                                        len(repeats_of(r)), tuple(stolen)))
        if measured is None:
            continue
        key = setup_key(r)
        x1 = one_worker_samples_per_sec(base)
        by_itself, beside = setup_profiles(results, r, base[0])
        stack_opts = cli.study_opts((r.get("config") or {}).get("profile", {}).get("name", "local"), stack="ddlbench",
                                    backend=r.get("backend"), ps_topology=record_ps_topology(r))
        stack_opts = replace(stack_opts, launch_s=run_launch(results, r))
        cfg = simulate.method_config(r["method"], stack_opts.bytescheduler_ps)
        # the network in the run's shape, as the bench measured it where it did (`bench_network`)
        here = bench_network(results, net)
        placed = record_cluster(r, net, here and here[1])
        mine = own.get((*key, r["method"], one_worker_link(r["method"], net)))  # its one-worker runs
        ukey = (r["model"], r["local_batch"], r["method"], net)
        if mine and simulate.runs_bytescheduler_queue(cfg) and ukey not in units:
            # its one-worker run's compute: the run's own compute probe where it took one (the
            # same minutes and threads), else the setup's one-worker throughput at its threads
            own_probe = one_worker_probe_s(mine)
            one = r["local_batch"] / own_probe if own_probe else at_threads_of(results, base[0], x1, mine[0])
            prof1 = cli.load_profile(r["model"], r["local_batch"], one)
            units[ukey] = simulate.calibrate_unit_s(r["method"], prof1, placed,
                                                    r["local_batch"] / one_worker_samples_per_sec(mine), stack_opts)
            if own_probe:
                unit_probe_s[ukey] = own_probe
        unit_s = units.get(ukey, 0.0)
        # the network as the run found it: the bench's, scaled by the run's communication probe
        # against the bench's commbench burst (`comm_scale`), where both were measured
        # (a PS run's: its PS probe against commbench's node burst, `ps_scale`)
        scale = comm_scale(r, net, here) or ps_scale(r, net, here)
        as_measured, placed = placed, (network.slower(placed, scale) if scale else placed)
        ratio = by_itself.compute_s / beside.compute_s
        machinery, machinery_at_run = machinery_pair(results, r)
        resolved, plan = mgwfbp_resolved(r), ""
        # the compute of one worker beside the others: the run's own probe where it has one (as
        # the run ran), else the profile measured beside W-1 others as the bench finished
        # the unit at the bench-end profile's compute beside the others: over the compute it
        # was calibrated against (its one-worker run's probe), else over the profile alone
        unit_beside = unit_s * beside.compute_s / unit_probe_s[ukey] if ukey in unit_probe_s else unit_s / ratio
        calibrations = {"profile": (x1 * ratio, unit_beside, machinery, beside.iteration_s, 0.0),
                        "alone": (x1, unit_s, 0.0, by_itself.iteration_s, 0.0)}
        probe, lockstep = probe_compute_s(r), probe_lockstep_s(r)
        if probe:
            # the unit's machinery as the machine ran: what the compute took at its calibration
            # over what it took at the run
            at_run = unit_probe_s.get(ukey, r["local_batch"] / x1) / probe
            # the W workers' compute as an iteration waits for it: the lock-step probe's slowest
            # worker's own step, begun as late as the last worker began, where it ran one; else
            # the free-running steps' spread (independent draws)
            step_s, late = lockstep or (probe, 0.0)
            calibrations["probe"] = (r["local_batch"] / step_s, unit_s / at_run, machinery_at_run,
                                     [] if lockstep else r["compute_probe_iter_s"], late)
            if lockstep:  # beside it, what the free-running steps' spread, as independent draws, gives
                calibrations["spread"] = (r["local_batch"] / probe, unit_s / at_run, machinery_at_run,
                                          r["compute_probe_iter_s"], 0.0)
        source = "probe" if probe else "profile"  # the prediction of the workers sharing the cores
        label = "lock-step" if lockstep else source  # where its compute came from
        pair = {}
        # ByteScheduler's machinery: a delay on its own update path (calibrated from its one-worker
        # run), and beside the run's other workers the cores' time it takes from them (measured so)
        # each calibration on the run's network; where a probe scaled it, the run's own calibration
        # again on the bench's network as measured ("unscaled": else the same prediction)
        predictions = [(name, c, name, placed) for name, c in calibrations.items()]
        if scale:
            predictions.append(("unscaled", calibrations[source], source, as_measured))
        for name, (one, u, cpu, spread, late), kind, on in predictions:
            opts = replace(stack_opts, bytescheduler_unit_s=u, bytescheduler_cpu_s=cpu, mgwfbp_alpha_beta=resolved)
            # the iterations' spread measured with the same compute: what W workers wait for
            prof = with_run_copy(replace(cli.load_profile(r["model"], r["local_batch"], one), iteration_s=list(spread)),
                                 r, results).started_late(late)
            if kind == "probe":  # its compute after the workers idled, as the probe timed it
                prof = prof.with_after_idle(probe_after_idle(r))
            if resolved and r.get("groups"):  # MG-WFBP: the groups the run sent, where they fit the profile
                opts = replace(opts, mgwfbp_group_bytes=run_groups_of(r, prof))
            p, prof, cluster = cli.predict(r["model"], [r["workers"]], on, (r["method"],), r["local_batch"], one,
                                           opts, explain=False, prof=prof)
            pair[name] = (p[(r["method"], r["workers"])].samples_per_sec, measured)
            if resolved and name == source and r.get("groups"):
                # the groups also depend on the backward times: does the run's alpha, beta give
                # the run's groups with this profile, and would the predictor alone choose them?
                # (the prediction times the run's own, `run_groups_of`)
                run_groups = list(r["groups"])
                given = simulate.plan_for(r["method"], prof, cluster, r["workers"],
                                          replace(opts, mgwfbp_group_bytes=None))
                own_plan = simulate.plan_for(r["method"], prof, cluster, r["workers"], stack_opts)
                plan = "same groups" if group_bytes(own_plan, prof) == run_groups else \
                    f"other: {len(own_plan.messages)} groups, the run {len(run_groups)}"
                if group_bytes(given, prof) != run_groups:
                    plan += f"; its alpha, beta give {len(given.messages)}"
                if opts.mgwfbp_group_bytes is None:
                    plan += "; timed: merged here (the run's do not fit this profile)"
        for pairs, name in ((shared, source), (others["profile"], "profile"), (alone, "alone"),
                            (others["spread"], "spread" if lockstep else source),
                            (others["unscaled"], "unscaled" if scale else source)):
            pairs[r["method"]].append(pair[name])
        probe_name = "PS probe" if r.get("servers") else "comm probe"
        where_net = (f"{net} (bench's" + (f", x{scale:.2f} by the run's {probe_name}" if scale else "") + ")") \
            if here else net
        runs.append((r["method"], where_net, r["workers"], *pair[source], plan, label))
        # the spread of what was measured, beside the error
        others["repeats"][(r["method"], where_net, r["workers"])] = (min(kept), max(kept))
    return shared, alone, runs, units, others


def comm_scale(rec: dict, net: str, here: tuple[str, Path] | None) -> float | None:
    """How much longer than at the bench's end this run's messages took: its communication
    probe (driver: `profile.comm_probe_rounds`; the model's per-tensor all-reduces launched at
    once, the slowest worker's mean round, per repeat; their median) over make commbench's same
    burst at the run's worker count, in the bench's own network (`here`, `bench_network`;
    `network.commbench_burst_s`). The validation takes the run's network as that one with every
    message that much longer and that much more of the shared cores' CPU (`network.slower`): on
    one machine's cores a message's time is the cores' (Gloo's threads, the kernel's loopback), and what the workers get of them drifts over
    minutes (the burst of tiny-resnet's 29 all-reduces at 4 local workers: 49.5 ms, then 81.6 ms
    ten minutes later; WFBP-A2A's 4-worker runs of the same code 135-167 samples/s). Local runs
    only (no `network` in the record, one host): an emulated link's rate is tc's, which does not
    drift. Nor runs with servers (PS): their probe runs beside the servers' processes, where
    commbench's burst had none, and reads slower for that, not for drift (bl44, 2 local workers:
    the three PS runs' probes 14.8-15.0 ms at the median, the four all-reduce runs' 9.2-10.0, made
    within minutes; 4 workers, 68-81 both). None where the run has no probe or the bench no such
    burst."""
    probe = rec.get("comm_probe_s")
    if not probe or not local_with_bench_network(rec, here) or rec.get("servers"):
        return None
    burst = network.commbench_burst_s(here[0], rec["workers"], rec["model"], here[1])
    return statistics.median(probe) / burst if burst else None


def local_with_bench_network(rec: dict, here: tuple[str, Path] | None) -> bool:
    """Whether a probe can scale the run's network: a local run (no `network` in the record, one
    host) of a bench that measured its own (`here`, `bench_network`)."""
    return here is not None and record_network(rec) is None and len(rec.get("hosts") or [None]) == 1


def ps_scale(rec: dict, net: str, here: tuple[str, Path] | None) -> float | None:
    """`comm_scale` for a local PS run: its PS probe (driver: `_PSProbe`, make commbench's PS
    burst of PS_BURST_KEYS keys through the run's own PS path, the slowest worker's mean round,
    per repeat; their median, per key) over commbench's node burst at the same key size through
    a node of the run's workers, in the bench's own network (`network.commbench_node_key_s`).
    What a PS message costs the shared cores drifts apart from what an all-reduce costs them
    (driver docstring: commbench's 4-worker node bursts 0.75-0.79 ms of CPU per key in some
    launches, 1.16-1.22 in others, while the all-reduce burst beside the same server moved
    otherwise), so a PS run is scaled by its own PS probe, not by the all-reduce one. Local
    per-machine runs with one node of all their workers only (commbench's node bursts are
    that); None where the run has no PS probe or the bench no such burst."""
    probe, keys = rec.get("ps_probe_s"), rec.get("ps_probe_keys")
    if not probe or not keys or not local_with_bench_network(rec, here) or not rec.get("servers") \
            or record_ps_topology(rec) != "per-machine" or (workers_per_node(rec) or rec["workers"]) != rec["workers"]:
        return None
    key_s = network.commbench_node_key_s(here[0], rec["workers"], int(rec.get("ps_probe_key_bytes") or 0), here[1])
    return statistics.median(probe) / keys / key_s if key_s else None


def probe_compute_s(rec: dict) -> float | None:
    """The run's compute probe (driver: `profile.compute_probe_iters`): the workers' mean
    training step alone beside each other, over its repeats, in seconds; None where it ran
    none."""
    steps = rec.get("compute_probe_s")
    return statistics.mean(steps) if steps and rec.get("compute_probe_iter_s") else None


def probe_lockstep_s(rec: dict) -> tuple[float, float] | None:
    """The run's lock-step probe (driver), in seconds: the mean over its repeats of the slowest
    worker's own training step, every step started together, and how much later than the first
    worker the last one began it (a machine's first start to its last end, less that own step;
    0 in records before 2026-11-28, which kept the own step alone); None where it ran none
    (records before it). It is the compute an iteration of W synchronised workers waits for,
    measured: on shared cores a worker is slow because its neighbours ran, so the maximum of W
    independent draws from the free-running steps (`Profile.sync_factor`) made that wait 1.3-2.0
    times the mean step at 4 workers on 2 cores, where the slowest worker's own step took
    0.97-1.25 times it; and half of them start when the others are done (2.1-3.5 ms later there),
    so their gradients appear that much later (`Profile.started_late`)."""
    steps = rec.get("compute_probe_lockstep_s")
    if not (steps and probe_compute_s(rec)):
        return None
    whole, own = statistics.mean(steps), rec.get("compute_probe_lockstep_own_s")
    if not own:  # the slowest worker's own step was all these records kept
        return whole, 0.0
    own = statistics.mean(own)
    return own, max(0.0, whole - own)


def probe_after_idle(rec: dict) -> list[tuple[float, float]]:
    """The run's compute probe after its workers idled (driver: `compute_probe_idle_s`): [(idle
    seconds, how much longer the lock-step step took after that idle than without)], the means
    over the repeats, none below 0 (idle does not speed a core up; noise would). The whole step
    (`compute_probe_after_idle_s` against `compute_probe_lockstep_s`: where the iteration's
    compute ends, `probe_lockstep_s`), or where a record kept only the slowest worker's own
    step after idle (be33, 2026-11-29), that against the own lock-step step: at 4 workers on 2
    cores a step after idle can interleave where one without starts late, so the own step
    grows more than the whole one. [] where the run has none (records before 2026-11-29)."""
    idles = rec.get("compute_probe_idle_s")
    for after_key, base_key in (("compute_probe_after_idle_s", "compute_probe_lockstep_s"),
                                ("compute_probe_after_idle_own_s", "compute_probe_lockstep_own_s")):
        after, base = rec.get(after_key), rec.get(base_key)
        if idles and after and base:
            break
    else:
        return []
    base = statistics.mean(base)
    return [(float(d), max(0.0, statistics.mean(rep[k] for rep in after) - base)) for k, d in enumerate(idles)]


TARGET_APE = 0.10  # issue 14: median absolute percentage error per method against real runs
REFERENCE = "bsp-a2a"  # the speedup's baseline method: every other run is also judged against it


def relative(runs: list, reference: str = REFERENCE) -> dict:
    """{method: [|p / p_ref - x / x_ref| / (x / x_ref)]}: each run's predicted and measured
    samples/s over those of the `reference` method's run at the same network and worker count
    (means where several), for every method but the reference. On a shared machine whose speed
    drifts between benches (this VM ran one one-worker setup at 185 and, minutes later, at 273-313
    samples/s) the compute's calibration errs alike for every method of a bench; a ratio cancels
    it and keeps what the model is for, how the methods compare. `runs`: `local`'s per-run rows."""
    by = defaultdict(list)
    for m, net, w, p, x, *_ in runs:
        by[(m, net, w)].append((p, x))
    mean = {k: (statistics.mean(p for p, _ in v), statistics.mean(x for _, x in v)) for k, v in by.items()}
    out = defaultdict(list)
    for (m, net, w), (p, x) in sorted(mean.items()):
        ref = mean.get((reference, net, w))
        if m != reference and ref is not None:
            out[m].append(abs(p / ref[0] - x / ref[1]) / (x / ref[1]))
    return out


def spread(results: str, again: str) -> dict:
    """{method: [|a - b| / b]} over the multi-worker runs of one configuration (model, batch,
    network, method, workers, and the rest of the resolved config but its repeats) measured in
    both `again` (a) and `results` (b): how far apart two measurements of the same run are here,
    which no prediction's error can be judged below."""
    from ddlbench.analysis import tables
    from ddlbench.record import config_hash

    def measured(path: str) -> dict:
        out = defaultdict(list)
        for r in load([path]).records:
            if r.get("status") == "ok" and r.get("samples_per_sec") and r["workers"] > 1 \
                    and (x := run_measured(r)[0]) is not None:  # as `local` measures it: undisturbed repeats
                out[(r["model"], r["local_batch"], tables.network_of(r), r["method"], r["workers"],
                     config_hash(r.get("config"), ("profile.repeats",)))].append(x)
        return {k: statistics.mean(v) for k, v in out.items()}

    a, b = measured(again), measured(results)
    out = defaultdict(list)
    for k in sorted(a.keys() & b.keys()):
        out[k[3]].append(abs(a[k] - b[k]) / b[k])
    return out


def main(argv=None) -> int:
    try:
        return _main(argv)
    except hostcpu.MachineBusy as exc:  # a calibration it would have timed beside a run
        print(f"predict_validation: error: {exc}", file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", nargs="+", default=["results"],
                    help="result directories of one bench each (several: their runs pooled, and a table per bench)")
    ap.add_argument("--runs-only", action="store_true", help="only the real runs, not the study's table")
    ap.add_argument("--local-network", default=None, help="conf/network config for local runs without one")
    ap.add_argument("--again", default=None, metavar="DIR",
                    help="another bench's records of the same runs: print how far apart the two measurements are")
    ap.add_argument("--calibrate-only", action="store_true",
                    help="only measure the profiles that calibrate the runs under --results, into RESULTS/profiles "
                         "(make bench-local and bench-emulated do so as they finish)")
    a = ap.parse_args(argv)
    if a.calibrate_only:
        for results in a.results:
            n = calibrate(results)
            print(f"predict_validation: {n} calibration(s) under {profiles_dir(results)} calibrate the runs "
                  f"under {results}")
        return 0
    if a.local_network and a.local_network not in network.names() and not a.local_network.startswith(network.EMULATED) \
            and not any(bench_network(r, a.local_network) for r in a.results):
        print(f"predict_validation: --local-network {a.local_network!r} is unknown; accepted: "
              f"{', '.join(network.names())}, or a bench's own (<results>/profiles/<name>.yaml)", file=sys.stderr)
        return 2
    if not a.runs_only:
        print_study()

    benches = pooled(a.results, a.local_network)
    shared, alone, others, rel = benches["shared"], benches["alone"], benches["others"], benches["relative"]
    runs = [row for bench in benches["per_bench"].values() for row in bench["runs"]]
    where = ", ".join(a.results)
    print(f"\nAgainst real runs under {where}" + (f" ({len(a.results)} benches pooled)" if len(a.results) > 1 else "")
          + ":")
    if not shared:
        print("  none with a known network: runs need a one-worker run of their setup and a network "
              "(a record's `network` field, or --local-network NAME)")
        return 0
    print("(workers sharing this machine's cores: one worker's compute as the run's own compute probe timed it, "
          "where it ran one, else the one-worker throughput rescaled by a profile measured beside W-1 other "
          "workers as the bench finished (also shown alone, 'bench-end profile'); alone: as if each worker had "
          "the one-worker run's machine to itself; a run's compute is its lock-step probe's slowest step where "
          "it ran one ('lock-step'), else its free-running steps' mean, their spread as independent draws for "
          "the wait, shown beside the first for every lock-step run too ('free steps'); a local run's network is "
          "the bench's with every message as much longer as the run's communication probe took against the "
          "bench's commbench burst, where it ran one (comm_scale: 'x k' in the rows below), beside the bench's "
          "network as measured ('network as the bench measured it'))")
    apart = spread(a.results[0], a.again) if a.again else {}
    print(markdown(["method", "runs", "median APE, sharing (target <= 10%)", "probed runs", "lock-step",
                    "median APE, sharing, free steps", "median APE, sharing, bench-end profile",
                    "median APE, sharing, network as the bench measured it", "median APE, alone",
                    f"median APE of samples/s over {REFERENCE}'s (sharing)"]
                   + ([f"median apart from {a.again} (runs)"] if a.again else []),
                   [[m, len(ps), f"{simulate.mape(ps):.1%}",
                     sum(1 for r in runs if r[0] == m and r[-1] in ("probe", "lock-step")),
                     sum(1 for r in runs if r[0] == m and r[-1] == "lock-step"),
                     f"{simulate.mape(others['spread'][m]):.1%}",
                     f"{simulate.mape(others['profile'][m]):.1%}", f"{simulate.mape(others['unscaled'][m]):.1%}",
                     f"{simulate.mape(alone[m]):.1%}",
                     f"{statistics.median(rel[m]):.1%}" if rel.get(m) else "-"]
                    + ([f"{statistics.median(apart[m]):.1%} ({len(apart[m])})" if apart.get(m) else "-"]
                       if a.again else [])
                    for m, ps in sorted(shared.items())]))
    print(f"(over {REFERENCE}'s: each run's predicted and measured samples/s over those of {REFERENCE} at the same "
          f"worker count in the same bench, so that a drift of the machine's speed, which the one-worker "
          f"calibration shares with every method, cancels)")
    if a.again:
        print(f"(apart: |again - these| / these for each run measured in both {a.again} and {a.results[0]}: the "
              "measurement's own spread, a floor under any prediction's error)")
    if len(a.results) > 1:
        print(f"\nPer bench: median APE per method (sharing), and how many methods are within {TARGET_APE:.0%}")
        print(per_bench_table(benches["per_bench"]))
    for results, bench in benches["per_bench"].items():
        if bench["units"]:
            print(f"\nByteScheduler's own machinery under {results}, calibrated from its one-worker runs "
                  "(per unit, one worker alone, against the runs' own compute probe where they took one):")
            print(markdown(["model", "local batch", "method", "network", "ms per unit"],
                           [[*k, f"{v * 1e3:.3f}"] for k, v in sorted(bench["units"].items())]))
        beside = machinery_table(results)
        if beside:
            print(f"\nByteScheduler's machinery beside the run's other workers under {results}, taken from their "
                  "compute (profile.machinery_s, per iteration of one worker; a run with a compute probe takes it "
                  "times its probe's step over the plain step here):")
            print(beside)
    print("\nPer run (sharing): predicted / measured samples/s")
    several = len(a.results) > 1
    print(markdown((["bench"] if several else []) + ["method", "network", "workers", "predicted", "measured", "error",
                                                     "repeats", "compute from", "MG-WFBP: predictor's own plan"],
                   [([results] if several else []) + [m, net, w, f"{p:.1f}", f"{x:.1f}", f"{(p - x) / x:+.0%}",
                                                      repeats_cell(p, bench["repeats"][(m, net, w)]), source,
                                                      plan or "-"]
                    for results, bench in benches["per_bench"].items()
                    for m, net, w, p, x, plan, source in sorted(bench["runs"])]))
    inside = [(results, sum(within(p, bench["repeats"][(m, net, w)]) for m, net, w, p, *_ in bench["runs"]),
               len(bench["runs"])) for results, bench in benches["per_bench"].items()]
    print("(repeats: the lowest and highest samples/s of the run's repeats the validation kept, 'in' where the "
          "prediction falls between them: a miss there is within the run's own spread; "
          + "; ".join(f"{n} of {total} runs in" + (f" under {results}" if several else "")
                      for results, n, total in inside) + ")")
    print("(MG-WFBP is predicted with the run's own start-up alpha, beta and the groups it sent (its record); "
          "the last column says whether the predictor's model of that microbenchmark alone chooses the run's "
          "groups, and, where it is so, that the run's alpha, beta give other groups with this profile's "
          "backward times)")
    disturbed = [([results] if several else []) + [m, net, w, f"{x:.1f}", "none" if kept is None else f"{kept:.1f}",
                  f"{len(stolen)} of {n}: " + ", ".join(f"#{i + 1} {share:.0%}" for i, share in stolen)]
                 for results, bench in benches["per_bench"].items()
                 for m, net, w, x, kept, n, stolen in sorted(bench["disturbed"], key=lambda d: d[:3])]
    if disturbed:
        print(f"\nLeft out: repeats whose machine lost at least {metrics.DISTURBED_STEAL_SHARE:.0%} of its cores to "
              "other guests while they were timed (host_steal_cores): they measured a neighbour as much as the "
              "method; a run is predicted against the rest ('measured, kept'), and left out where none is left")
        print(markdown((["bench"] if several else []) + ["method", "network", "workers", "measured, all repeats",
                                                         "measured, kept", "repeats left out (cores stolen)"],
                       disturbed))
    return 0


def print_study() -> None:
    """The study's table against the model: errors, picks and what dominates (section 1)."""
    runs = {intra: study(intra, explain_workers=32 if intra == INTRA_NODES[0] else None) for intra in INTRA_NODES}
    s = runs[INTRA_NODES[0]]
    n = len(s["errors"])
    print(f"Against the study's 100 Gb/s IB table ({n} cells; calibrated on one-worker rows, specs and "
          f"microbenchmarks only), for each calibration of the study node's intra-node link:")
    print(markdown(["intra-node link", "BERT-Large 4-GPU all-reduce", "median APE (target <= 8%)", "mean APE",
                    "fastest right, strict", "fastest right within noise (target >= 80%)",
                    f"published fastest among the predicted ties (within {cli.TIE_REL:.1%})"],
                   [[k, f"{allreduce_check(k) * 1e3:.0f} ms", f"{statistics.median(r['errors'].values()):.1%}",
                     f"{statistics.mean(r['errors'].values()):.1%}",
                     f"{r['hits']}/{len(r['cells'])} = {r['hits'] / len(r['cells']):.0%}",
                     f"{r['hits_noise']}/{len(r['cells'])} = {r['hits_noise'] / len(r['cells']):.0%}",
                     f"{r['hits_ties']}/{len(r['cells'])} = {r['hits_ties'] / len(r['cells']):.0%}"]
                    for k, r in runs.items()]))
    print(f"(The study states {BERT_LARGE_4GPU_ALLREDUCE_S * 1e3:.0f} ms for that all-reduce: it is the default "
          f"calibration's point, so only the alternative is an out-of-sample check of it.)")
    print(f"\nDefault calibration ({INTRA_NODES[0]}), per method (over 3 models x 4 worker counts):")
    rows = [[m, f"{statistics.median(s['per_method'][m]):.1%}", f"{max(s['per_method'][m]):.1%}",
             f"{statistics.mean((s['preds'][k] - v) / v for k, v in s['truth'].items() if k[1] == m):+.1%}",
             f"{statistics.median(runs[INTRA_NODES[1]]['per_method'][m]):.1%}"]
            for m in STUDY_METHODS]
    print(markdown(["method", "median APE", "max APE", "mean signed error", f"median APE ({INTRA_NODES[1]})"], rows))
    print("\nPer model and method (median APE over worker counts):")
    models = sorted({k[0] for k in s["truth"]})
    rows = [[m] + [f"{statistics.median(e for k, e in s['errors'].items() if k[0] == model and k[1] == m):.1%}"
                   for model in models] for m in STUDY_METHODS]
    print(markdown(["method"] + models, rows))
    print("\nPer cell: predicted / published samples/s")
    rows = [[mo, me, w, f"{s['preds'][(mo, me, w)]:.1f}", f"{v:.1f}", f"{(s['preds'][(mo, me, w)] - v) / v:+.1%}"]
            for (mo, me, w), v in sorted(s["truth"].items())]
    print(markdown(["model", "method", "workers", "predicted", "published", "error"], rows))
    print(f"\nFastest method per (model, workers): the pick (cli.fastest_tied: among estimates, the least shortfall "
          f"to the fastest at the model's communication and at {cli.COMM_UNCERTAINTY:g}x it) / published; within "
          "noise = the pick's published throughput is not different from the published fastest's (Welch 95%, n = 5 "
          f"with the published std; analysis/noise.py); predicted ties = the methods within {cli.TIE_REL:.1%} of the "
          f"pick at both, which the model does not rank (the pick first)")
    print(markdown(["model", "workers", "pick", "published fastest", "strict", "within noise", "test",
                    "predicted ties", "among ties"],
                   [[c["model"], c["workers"], c["predicted"], c["measured"], "hit" if c["strict"] else "miss",
                     "hit" if c["within_noise"] else "miss", c["test"], ", ".join(c["predicted_ties"][1:]) or "-",
                     "hit" if c["among_ties"] else "miss"] for c in s["cells"]]))
    print(f"\nThe picks against the communication cost they weigh (cli.COMM_UNCERTAINTY = {cli.COMM_UNCERTAINTY:g}; "
          f"1: the fastest estimate; {INTRA_NODES[0]}):")
    rows = []
    for k in COMM_UNCERTAINTIES:
        r = s if k == cli.COMM_UNCERTAINTY else study(INTRA_NODES[0], explain_workers=None, comm_uncertainty=k)
        n = len(r["cells"])
        rows.append([f"{k:g}", f"{r['hits']}/{n}", f"{r['hits_noise']}/{n}", f"{r['hits_ties']}/{n}",
                     ", ".join(f"{c['model']} x{c['workers']}" for c in r["cells"] if not c["within_noise"]) or "-"])
    print(markdown(["communication x", "strict", "within noise", "among ties", "missed within noise"], rows))
    print("\nWhat dominates each prediction at 32 workers (then the largest exposed communication cost):")
    print(markdown(["method"] + models, [[m] + [s["dominant"][(model, m)] for model in models] for m in STUDY_METHODS]))


def pooled(results: list[str], local_network: str | None) -> dict:
    """`local` over every directory of `results` (one bench each, calibrated from its own
    one-worker runs and profiles), pooled: {"shared", "alone", "others", "relative": {method:
    [...]} over every bench's runs, "per_bench": {results:
    {"shared", "runs", "units"}}}. A bench has one run per method and worker count at each network,
    so its median per method is of 2-4 runs, each as noisy as the machine (two benches of the same
    runs here measured 2-87% apart per method, depending on the method); the pool's median weighs
    the model against every run measured."""
    out = {"shared": defaultdict(list), "alone": defaultdict(list), "relative": defaultdict(list),
           "others": {"profile": defaultdict(list), "spread": defaultdict(list), "unscaled": defaultdict(list)},
           "per_bench": {}}
    for r in results:
        shared, alone, runs, units, others = local(r, local_network)
        for into, got in ((out["shared"], shared), (out["alone"], alone), (out["relative"], relative(runs)),
                          *((out["others"][k], others[k]) for k in out["others"])):
            for m, v in got.items():
                into[m].extend(v)
        out["per_bench"][r] = {"shared": shared, "runs": runs, "units": units, "disturbed": others["disturbed"],
                               "repeats": others["repeats"]}
    return out


def within(predicted: float, lo_hi: tuple[float, float]) -> bool:
    """Whether `predicted` falls within a run's kept repeats' range of samples/s."""
    return lo_hi[0] <= predicted <= lo_hi[1]


def repeats_cell(predicted: float, lo_hi: tuple[float, float]) -> str:
    """A run's kept repeats' range of samples/s, marked 'in' where `predicted` falls within it."""
    return f"{lo_hi[0]:.0f}-{lo_hi[1]:.0f}" + (" in" if within(predicted, lo_hi) else "")


def per_bench_table(per_bench: dict) -> str:
    """One row per method, one column per bench: its median APE over that bench's runs."""
    methods = sorted({m for b in per_bench.values() for m in b["shared"]})
    rows = [[m] + [f"{simulate.mape(b['shared'][m]):.1%}" if b["shared"].get(m) else "-" for b in per_bench.values()]
            for m in methods]
    within = [sum(simulate.mape(v) <= TARGET_APE for v in b["shared"].values()) for b in per_bench.values()]
    rows.append([f"within {TARGET_APE:.0%}"]
                + [f"{n} of {len(b['shared'])}" for n, b in zip(within, per_bench.values())])
    return markdown(["method"] + list(per_bench), rows)


if __name__ == "__main__":
    sys.exit(main())
