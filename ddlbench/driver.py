"""The one timing driver: every method is measured by this loop, the same way.

Per repeat: `warmup_iters` iterations, then `measured_iters` iterations timed one by one from
the start of forward to the end of the optimizer step (device synchronised on GPU). Batches are
generated before the clock starts (the study assumes data loading overlaps computation). Each
iteration's time is the slowest rank's, gathered after the repeat so the loop itself carries no
extra collective. Formulas: `ddlbench.metrics`.
"""
from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

from . import metrics
from .models import data


def measure(cfg, ctx, workload, sync, progress=None, heartbeat=None) -> dict:
    model = sync.wrap(workload.model)
    sync.setup(workload.model)
    opt = sync.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum))
    p = cfg.profile
    tracer = ctx.tracer
    per_repeat: list[list[float]] = []
    iteration = 0
    for repeat in range(p.repeats):
        times = []
        for i in range(p.warmup_iters + p.measured_iters):
            batch = workload.make_batch(ctx.seed, ctx.rank, iteration, ctx.device)
            torch.manual_seed(data.stream_seed(ctx.seed, ctx.rank, iteration))  # dropout, reproducibly
            _sync(ctx.device)
            t0 = time.perf_counter()
            step(model, workload, sync, opt, batch, iteration, tracer)
            if i == p.warmup_iters + p.measured_iters - 1:
                sync.flush()  # a repeat ends when its last communication has landed
            _sync(ctx.device)
            dt = time.perf_counter() - t0
            if i >= p.warmup_iters:
                times.append(dt)
            if progress is not None:
                progress.update(repeat, i, dt)
            if heartbeat is not None:
                heartbeat()
            iteration += 1
        per_repeat.append(_slowest_rank(times, ctx))
    mean, std, per_repeat_sps = metrics.throughput_over_repeats(ctx.world * workload.local_batch, per_repeat)
    if progress is not None:
        progress.done(mean, std)
    return {
        "iter_times_s": [t for ts in per_repeat for t in ts],
        "samples_per_sec": mean,
        "samples_per_sec_std": std,
        "samples_per_sec_per_repeat": per_repeat_sps,
        "iterations_total": iteration,
    }


def step(model, workload, sync, opt, batch, iteration: int, tracer) -> None:
    """One BSP iteration: forward, backward (methods may communicate from hooks), synchronise,
    update."""
    sync.begin_iteration(iteration)
    args = {"iter": iteration}
    with tracer.span("forward", "forward", args):
        loss = workload.loss(model, batch)
    sync.before_backward()
    with tracer.span("backward", "backward", args):
        loss.backward()
    sync.synchronize()
    if sync.owns_update:
        return  # updated parameter by parameter as their communication completes
    with tracer.span("optimizer", "optimizer", args):
        opt.step()
        opt.zero_grad()  # set_to_none by default (Horovod's wrapper takes no arguments)


def _slowest_rank(times: list[float], ctx) -> list[float]:
    if ctx.world == 1:
        return times
    t = torch.tensor(times, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.group)
    return t.cpu().tolist()


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fingerprint(model) -> dict:
    """float64 sum and sum of squares of all parameters: a cheap identity of the final state."""
    with torch.no_grad():
        s = sum(p.detach().double().sum().item() for p in model.parameters())
        sq = sum(p.detach().double().pow(2).sum().item() for p in model.parameters())
    return {"sum": s, "sumsq": sq}


def heartbeat(path, every_s: float = 1.0):
    """A callable that touches `path` at most once a second: the launcher's sign of life."""
    last = [0.0]

    def beat() -> None:
        now = time.monotonic()
        if now - last[0] >= every_s:
            last[0] = now
            os.utime(path)

    return beat


class Progress:
    """One line of progress from rank 0: iteration, samples/s so far, time left.

    On a terminal the line rewrites itself; in a log (CI, Slurm) a line is printed about every
    15 s instead, so logs stay readable."""

    def __init__(self, label: str, cfg, global_batch: int, stream=sys.stderr):
        self.label = label
        self.p = cfg.profile
        self.per_repeat = self.p.warmup_iters + self.p.measured_iters
        self.total = self.p.repeats * self.per_repeat
        self.global_batch = global_batch
        self.stream = stream
        self.tty = stream.isatty()
        self.done_iters = 0
        self.elapsed = 0.0
        self.last_print = 0.0
        self.measured: list[float] = []

    def update(self, repeat: int, i: int, dt: float) -> None:
        self.done_iters += 1
        self.elapsed += dt
        if i >= self.p.warmup_iters:
            self.measured.append(dt)
        now = time.monotonic()
        if not self.tty and now - self.last_print < 15 and self.done_iters < self.total:
            return
        self.last_print = now
        sps = self.global_batch * len(self.measured) / sum(self.measured) if self.measured else float("nan")
        left = self.elapsed / self.done_iters * (self.total - self.done_iters)
        phase = "warm-up" if i < self.p.warmup_iters else "measure"
        line = (f"[{self.label}] repeat {repeat + 1}/{self.p.repeats} {phase} iter {i + 1}/{self.per_repeat} "
                f"{sps:8.1f} samples/s  ~{left:5.0f} s left")
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def done(self, mean: float, std: float) -> None:
        end = "\n" if self.tty else ""
        self.stream.write(f"{end}[{self.label}] {mean:.2f} ± {std:.2f} samples/s\n")
        self.stream.flush()
