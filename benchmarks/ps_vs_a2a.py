"""Parameter-server methods against BSP-A2A, and the PS transport against all-reduce.

1. Interleaved rounds (benchmarks/interleaved.py) of BSP-A2A and each PS method (2 workers,
   1 server) on tiny-resnet and resnet50; prints each PS method's iteration time divided by
   BSP-A2A's in the same round, median over rounds with a bootstrap 95% interval
   (ddlbench.analysis.ratios).
2. Bus bandwidth of one message of 1 MB to 100 MB, 2 workers (+1 server), in one torchrun job:
   Gloo all-reduce, and push/pull through ddlbench's PS engine over each of its wires, Gloo
   point-to-point (`methods.ps_gloo`) and ZeroMQ (`methods.ps_zmq`, what BytePS's ps-lite uses):
   how the engine's default wire was chosen. Formulas: ddlbench.metrics.

    python benchmarks/ps_vs_a2a.py [--models tiny-resnet,resnet50] [--rounds 6] [--skip-methods]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 100 << 20]
PS_METHODS = ("bsp-ps", "wfbp-ps", "bytescheduler-ps")
REPS = 5


def methods(args) -> None:
    from interleaved import run_rounds

    from ddlbench.analysis import ratios

    results = Path(args.results) / time.strftime("ps-%Y%m%dT%H%M%S")
    order = ["bsp-a2a", *PS_METHODS]
    models = args.models.split(",")
    rounds = run_rounds(results, models, order, args.rounds, ["workers=2", "profile.warmup_iters=2",
                                                              f"profile.measured_iters={args.iters}"])
    print(f"\niteration time / BSP-A2A's: median over {args.rounds} interleaved rounds [bootstrap 95%] "
          "(median samples/s), 2 workers (+1 server for PS)")
    print(ratios.table(rounds, models, order, "bsp-a2a"))


def bandwidth_job() -> None:
    """Runs under torchrun with 3 processes: ranks 0, 1 are workers, rank 2 the server."""
    import torch
    import torch.distributed as dist

    from ddlbench import metrics

    dist.init_process_group("gloo")
    rank, W = dist.get_rank(), 2
    workers = dist.new_group([0, 1])
    torch.set_num_threads(1)
    rows = []
    if rank < W:  # 1. all-reduce among the workers
        for size in SIZES:
            t = torch.ones(size // 4)
            times = []
            for rep in range(REPS + 1):
                dist.barrier(group=workers)
                t0 = time.perf_counter()
                dist.all_reduce(t, group=workers)
                if rep:
                    times.append(time.perf_counter() - t0)
            rows.append(("gloo all-reduce", size, statistics.median(times)))
    # 2. push/pull through the PS engine, over each of its wires
    from ddlbench.methods import ps_gloo, ps_zmq

    rows += pushpull(ps_gloo, "push/pull, Gloo p2p", rank, W, workers)
    rows += pushpull(ps_zmq, "push/pull, ZeroMQ (the default)", rank, W, workers)
    if rank == 0:
        print("\n| transport | " + " | ".join(f"{s >> 20} MB" for s in SIZES) + " |\n|---|" + "---|" * len(SIZES))
        for name in dict.fromkeys(r[0] for r in rows):
            coll = "all_reduce" if "all-reduce" in name else "push_pull"
            cells = [f"{metrics.busbw_GBps(coll, s, t, W):.2f}" for n, s, t in rows if n == name]
            print(f"| {name} busbw GB/s | " + " | ".join(cells) + " |")
    dist.barrier()
    os._exit(0)


def pushpull(engine, label: str, rank: int, W: int, workers) -> list:
    """One message per size through a PS engine (`methods.ps_gloo` or `methods.ps_zmq`): partitions
    of 4,096,000 bytes, one server summing W pushes per partition and answering every pull."""
    import torch
    import torch.distributed as dist

    from ddlbench.methods import Context, ps_node
    from ddlbench.trace import NullTracer

    layout = ps_node.per_gpu(W, 1, comm_timeout_s=60)  # every worker pushes, as on one machine per worker
    if rank >= W:
        engine.serve(rank, layout, NullTracer())
        return []
    ctx = Context(rank=rank, world=W, device=torch.device("cpu"), tracer=NullTracer(), group=workers,
                  extra={"comm_timeout_s": 60})
    pp = engine.TRANSPORT(ctx, layout, 4_096_000)
    pp.prepare([s // 4 for s in SIZES])
    rows = []
    for m, size in enumerate(SIZES):
        t = torch.ones(size // 4)
        times = []
        for rep in range(REPS + 1):
            dist.barrier(group=workers)
            t0 = time.perf_counter()
            pp.reduce_async(t, iteration=rep, tensors=["x"], group=m).wait()
            if rep:
                times.append(time.perf_counter() - t0)
        rows.append((label, size, statistics.median(times)))
    pp.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-resnet,resnet50")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--results", default="results/bench")
    ap.add_argument("--skip-methods", action="store_true")
    ap.add_argument("--bandwidth-job", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bandwidth_job:
        bandwidth_job()
        return 0
    t0 = time.monotonic()
    if not args.skip_methods:
        methods(args)
    print("\nbus bandwidth of one message, 2 workers (+1 server), loopback, median of 5")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                    __file__, "--bandwidth-job"], check=True, env=env, stderr=subprocess.DEVNULL)
    print(f"(wall {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
