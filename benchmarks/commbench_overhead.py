"""Harness overhead: commbench's reported all-reduce time against a bare loop of the same
torch.distributed call, measured side by side in one job (Gloo, fp32, CPU, 2 workers).

The bare loop times `iters` back-to-back calls as one block on rank 0; commbench times each
call (with its wait) and reports the mean of the slowest rank's times. Both run alternately,
five times each, and the ratio of their medians is printed per size (goal: within 5%).

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
        harness, bare = [], []
        for _ in range(5):
            harness.append(measure(be, COLLECTIVES["all_reduce"], torch.float32, size, spec)["time_us"])
            for _ in range(5):
                dist.all_reduce(t)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(ITERS):
                dist.all_reduce(t)
            bare.append((time.perf_counter() - t0) / ITERS * 1e6)
        rows.append((size, statistics.median(harness), statistics.median(bare)))
    if be.rank == 0:
        print("| size (B) | commbench (us) | bare loop (us) | commbench / bare |\n|---|---|---|---|")
        for size, h, b in rows:
            print(f"| {size} | {h:.1f} | {b:.1f} | {h / b:.3f} |")
    be.close()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:] == ["--job"]:
        job()
    else:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
                        "--job"], check=True, env=env, stderr=subprocess.DEVNULL)
