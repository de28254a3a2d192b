"""Harness overhead: commbench's reported all-reduce time against a bare loop of the same
torch.distributed call, measured side by side in one job (Gloo, fp32, CPU, 2 workers).

Per size, `ROUNDS` rounds each run three arms of `BLOCK` timed calls, in every order equally
often so that neither arm gains from going first and slow drift of this shared machine cancels:
  - commbench: `ddlbench.commbench.worker.measure`, which stamps the clock after each call's
    wait and reports the slowest rank's mean;
  - bare loop: `BLOCK` back-to-back `dist.all_reduce` calls on the same buffers, timed as one
    block, the slowest rank's mean;
  - the same bare loop again: an A/A control. Its ratio to the bare loop is what this machine
    can resolve; on a 2-core VM that is far wider than 5% at the small sizes.
Printed per size: the medians, and the median of the per-round ratios commbench / bare and
bare / bare, each with a bootstrap 95% interval (ddlbench.metrics.bootstrap_median_interval),
and the goal commbench / bare within 5% as met, missed or not resolved at this noise
(ddlbench.analysis.noise.goal: met when the whole interval lies within, missed when none does).

A second, noise-free figure bounds what the harness itself adds: commbench's timed loop around a
call that does nothing, against a bare loop of that call, in ns per call and as a share of the
fastest all-reduce measured.

    python benchmarks/commbench_overhead.py
"""
from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import time

SIZES = [int(s) for s in os.environ.get("SIZES", "4,4096,65536,1048576,16777216").split(",")]
BLOCK = 25
ROUNDS = 144  # 48 from 4 MiB up, where each round is long and steadier
ORDERS = list(itertools.permutations(["commbench", "bare", "bare again"]))
WARMUP = 5
PIN = os.environ.get("PIN", "1") == "1"
GOAL = (0.95, 1.05)  # commbench / bare within 5%


def instrumentation_ns(calls: int = 200_000) -> float:
    """An upper bound on what commbench's timed loop adds per call: `timed_calls` (stamps, the
    loop, turning stamps into times) around a backend whose call does nothing, against a bare
    loop of that call."""
    import torch

    from ddlbench.commbench.worker import timed_calls

    class Null:
        device = torch.device("cpu")

        def run(self, coll, inp, out):
            return None

    be, best = Null(), float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            be.run(None, None, None)
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        timed_calls(be, None, None, None, calls)
        best = min(best, (time.perf_counter() - t0 - bare) / calls * 1e9)
    return best


def job() -> None:
    import torch
    import torch.distributed as dist

    from ddlbench.analysis import noise
    from ddlbench.commbench.collectives import COLLECTIVES
    from ddlbench.commbench.worker import Torch, measure
    from ddlbench.metrics import bootstrap_median_interval

    if PIN and len(os.sched_getaffinity(0)) >= 2:  # one core per rank: fewer migrations, less noise
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[int(os.environ["LOCAL_RANK"])]})
    be = Torch({"device": "cpu", "torch_backend": "gloo"})
    torch.set_num_threads(1)
    spec = {"warmup": WARMUP, "iters": BLOCK}

    def harness(size):
        return measure(be, COLLECTIVES["all_reduce"], torch.float32, size, spec)["time_us"]

    def bare(size):
        t, _, _ = COLLECTIVES["all_reduce"].setup(max(1, size // 4), be.n, be.rank, torch.float32, be.device)
        for _ in range(WARMUP):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(BLOCK):
            dist.all_reduce(t)
        b = torch.tensor([(time.perf_counter() - t0) / BLOCK * 1e6])
        dist.all_reduce(b, op=dist.ReduceOp.MAX)  # the slowest rank's mean, as commbench reports
        return b.item()

    rows = []
    for size in SIZES:
        arms = {"commbench": [], "bare": [], "bare again": []}
        run = {"commbench": lambda: harness(size), "bare": lambda: bare(size), "bare again": lambda: bare(size)}
        for r in range(ROUNDS if size < 4 << 20 else 48):
            for name in ORDERS[r % len(ORDERS)]:  # every order equally often: drift and position cancel
                arms[name].append(run[name]())
        h, b, b2 = arms["commbench"], arms["bare"], arms["bare again"]
        ratio = [x / y for x, y in zip(h, b)]
        control = [x / y for x, y in zip(b2, b)]
        rows.append((size, statistics.median(h), statistics.median(b),
                     statistics.median(ratio), *bootstrap_median_interval(ratio),
                     statistics.median(control), *bootstrap_median_interval(control)))
    if be.rank == 0:
        ns = instrumentation_ns()
        fastest_us = min(r[1] for r in rows)
        print(f"Gloo all_reduce fp32, 2 workers, {ROUNDS} rounds (48 from 4 MiB) of {BLOCK} timed calls per arm and size, "
              "arms in rotating order\n")
        print("| size (B) | commbench (us) | bare loop (us) | commbench / bare: median ratio [95%] | goal: within 5% "
              "| control, bare / bare: median ratio [95%] |\n|---|---|---|---|---|---|")
        for size, h, b, r, lo, hi, c, clo, chi in rows:
            print(f"| {size} | {h:.1f} | {b:.1f} | {r:.3f} [{lo:.3f}, {hi:.3f}] | {noise.goal(lo, hi, *GOAL)} "
                  f"| {c:.3f} [{clo:.3f}, {chi:.3f}] |")
        print("\nThe control runs the identical bare loop twice: its spread is what this machine can resolve.")
        print(f"Harness bookkeeping per call, upper bound (null call, one process): {ns:.0f} ns = "
              f"{ns / 1e3 / fastest_us * 100:.3f}% of the fastest all-reduce above ({fastest_us:.1f} us)")
    be.close()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:] == ["--job"]:
        job()
    else:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
                        "--job"], check=True, env=env, stderr=subprocess.DEVNULL)
