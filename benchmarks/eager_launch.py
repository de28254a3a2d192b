"""What an eager method's launches cost the worker's own thread, per message, on the CPU: the
runtime's WFBP (methods.wfbp: its gradient hooks, `AllReduce.reduce_async`'s division and Gloo
launch, the waits after backward) training a model over a Gloo group of one rank that the
method takes for a world of two (so it launches; a world of one sends nothing), against plain
iterations of the same model and batch (forward, backward, one momentum-SGD step), in
alternating rounds. Printed per repeat: both iterations' median thread CPU (time.thread_time)
and their difference per message. A one-worker microbenchmark, nothing sent.

Why it exists (issue 14, 2026-11-29): 2-worker local WFBP-A2A runs of tiny-resnet on 2 cores
came out 19-26% slower than predicted. Their records' per-thread CPU says the iteration is the
rank's whole CPU (main thread plus Gloo's loop threads), and the main thread took 2.5-4.75 ms an
iteration more than BSP-A2A's. This measures 120-160 us a message (29 messages: 3.5-4.6 ms).
The predictor does not charge it: added to a starved backward it brought local WFBP-A2A to
3-9% but 2-worker emulated runs, accurate without it, to -12..-22% (the emulated networks'
fitted all-reduce times already hold part of a launch). Charging it needs commbench to tell a
burst's launches from its lanes.

    python benchmarks/eager_launch.py [--model tiny-resnet] [--batch 4] [--threads 1] [--repeats 2]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time

ROUNDS = 6        # alternating rounds of plain and WFBP iterations
ITERS = 15        # timed iterations per round, after one untimed
TIMEOUT_S = 300.0  # one repeat's process, start-up included


def launch_rounds(model: str, batch: int, threads: int, rounds: int, iters: int, got) -> None:
    """One repeat, in a process of its own: puts (median plain iteration's thread CPU, median
    WFBP one's, messages per WFBP iteration)."""
    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf

    from ddlbench.config import conf_dir
    from ddlbench.driver import step
    from ddlbench.methods import plugin_class
    from ddlbench.methods.base import Context
    from ddlbench.predict.profile import PROFILE_BATCHES, _workload
    from ddlbench.trace import NullTracer

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cpu = torch.device("cpu")
        plain, plain_opt = _workload(model, batch, cpu)
        eager, eager_opt = _workload(model, batch, cpu)
        tracer = NullTracer()
        ctx = Context(rank=0, world=2, device=cpu, tracer=tracer, workload=eager, group=dist.group.WORLD,
                      control=dist.group.WORLD)
        sync = plugin_class("wfbp")(OmegaConf.load(conf_dir() / "method" / "wfbp-a2a.yaml"), ctx)
        sync.setup(eager.model)
        eager_opt = sync.wrap_optimizer(eager_opt)
        batches = [plain.make_batch(0, 0, b, cpu) for b in range(PROFILE_BATCHES)]

        def plain_step(it: int) -> None:
            plain_opt.zero_grad(set_to_none=True)
            plain.loss(plain.model, batches[it % PROFILE_BATCHES]).backward()
            plain_opt.step()

        def eager_step(it: int) -> None:
            step(eager.model, eager, sync, eager_opt, batches[it % PROFILE_BATCHES], it, tracer)

        cpu_s: dict = {plain_step: [], eager_step: []}
        it = 0
        for r in range(rounds):
            one = plain_step if r % 2 == 0 else eager_step
            for k in range(1 + iters):
                t0 = time.thread_time()
                one(it)
                if k:
                    cpu_s[one].append(time.thread_time() - t0)
                it += 1
        messages = len(sync.groups)
        sync.close()
    finally:
        dist.destroy_process_group()
    got.put((statistics.median(cpu_s[plain_step]), statistics.median(cpu_s[eager_step]), messages))


def measure(model: str, batch: int, threads: int, rounds: int = ROUNDS, iters: int = ITERS) -> tuple[float, float, int]:
    spawn = mp.get_context("spawn")  # a process group of its own
    got = spawn.SimpleQueue()
    proc = spawn.Process(target=launch_rounds, args=(model, batch, threads, rounds, iters, got), daemon=True)
    proc.start()
    proc.join(TIMEOUT_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise SystemExit(f"eager_launch: a repeat took over {TIMEOUT_S:g} s; its process was killed")
    if proc.exitcode != 0 or got.empty():
        raise SystemExit(f"eager_launch: a repeat's process exited with {proc.exitcode} and no result")
    return got.get()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-resnet")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args(argv)
    for name, v in (("--batch", a.batch), ("--threads", a.threads), ("--repeats", a.repeats)):
        if v < 1:
            print(f"eager_launch: {name}={v} is invalid; accepted: >= 1", file=sys.stderr)
            return 2
    for r in range(a.repeats):
        plain_s, wfbp_s, messages = measure(a.model, a.batch, a.threads)
        print(f"repeat {r}: {a.model} at batch {a.batch}, {a.threads} thread(s): thread CPU {wfbp_s * 1e3:.2f} ms an "
              f"iteration with WFBP ({messages} messages), {plain_s * 1e3:.2f} plain: "
              f"{max(0.0, wfbp_s - plain_s) / messages * 1e6:.1f} us a message", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
