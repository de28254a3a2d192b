"""Harness overhead: commbench's reported all-reduce time against a bare loop of the same
torch.distributed call, measured side by side in one job (Gloo, fp32, CPU, 2 workers).

The bare loop times `iters` back-to-back calls as one block (the slowest rank's mean);
commbench times each call with its wait and reports the slowest rank's mean. They alternate
15 times per size and the median of the adjacent pairs' ratios is printed (goal: within 5%).

    python benchmarks/commbench_overhead.py
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

SIZES = [4, 4096, 1 << 20, 16 << 20]
ITERS = 100
PAIRS = 15


def job() -> None:
    import torch
    import torch.distributed as dist

    from ddlbench.commbench.collectives import COLLECTIVES
    from ddlbench.commbench.worker import Torch, measure

    be = Torch({"device": "cpu", "torch_backend": "gloo"})
    torch.set_num_threads(1)
    spec = {"warmup": 5, "iters": ITERS}
    rows = []
    for size in SIZES:
        t = torch.ones(max(1, size // 4))
        ratios, harness, bare = [], [], []
        for _ in range(PAIRS):  # adjacent pairs: slow drift of this shared machine cancels
            h = measure(be, COLLECTIVES["all_reduce"], torch.float32, size, spec)["time_us"]
            for _ in range(5):
                dist.all_reduce(t)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(ITERS):
                dist.all_reduce(t)
            b = torch.tensor([(time.perf_counter() - t0) / ITERS * 1e6])
            dist.all_reduce(b, op=dist.ReduceOp.MAX)  # the slowest rank's mean, as commbench reports
            harness.append(h)
            bare.append(b.item())
            ratios.append(h / b.item())
        rows.append((size, statistics.median(harness), statistics.median(bare), statistics.median(ratios)))
    if be.rank == 0:
        print(f"| size (B) | commbench (us) | bare loop (us) | median of {PAIRS} paired ratios |\n|---|---|---|---|")
        for size, h, b, r in rows:
            print(f"| {size} | {h:.1f} | {b:.1f} | {r:.3f} |")
    be.close()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:] == ["--job"]:
        job()
    else:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
                        "--job"], check=True, env=env, stderr=subprocess.DEVNULL)
