"""The one timing driver: every method is measured by this loop, the same way.

It measures as the study's horovod/imagenet_benchmark.py does (a `timeit` over blocks of
batches), with nothing outside the clock:
  * every batch exists before the first iteration: `profile.distinct_batches` per rank, on the
    device, cycled by `data.batch_index` (the study: one batch, reused);
  * `cudnn.benchmark` is on for CUDA, as the study sets it, before set-up and warm-up;
  * per repeat, `warmup_iters` untimed iterations, then one block of `measured_iters` timed as a
    single wall-clock interval: device synchronised once before the block and once after it,
    after `sync.flush()`, so the block ends only when its last communication has landed (a
    method that overlaps communication with the next forward gets no untimed gap to hide it in);
  * after the block, one MAX all-reduce over the workers makes it the slowest rank's time.
Per-iteration times are host stamps without device synchronisation, kept as a diagnostic only
(`iter_times_s`); throughput comes from the block times (`block_time_s`). With tracing on, each
block is a `measure` span in the trace. Each block also records how busy the cores of rank 0's
machine were (`host_busy_cores`: hostcpu.busy_s over the block / its wall time, every process
on the machine counted; on a run that shares one machine, near `host_cores` means the run was
bound by the CPU), how much of those cores the hypervisor gave other guests meanwhile
(`host_steal_cores`: hostcpu.steal_s over the block / its wall time; a virtual machine's block
that lost cores to a neighbour measured the neighbour too) and where this rank's own CPU went (`thread_cpu_ms_per_iter`: per thread
name, the main thread's compute beside the methods' helpers and the backend's threads, read
from /proc before and after the block, `hostcpu.thread_sched_s`; `thread_runq_ms_per_iter`:
the same threads' time runnable but waiting for a core). Formulas: `ddlbench.metrics`.

With `profile.compute_probe_iters` > 0 (the benches set it; 0 by default), every repeat starts
with a compute probe: all the workers at once, after one all-reduce that lines them up, run
that many training steps alone (forward, backward and a momentum-SGD step on a private copy of
the model taken before the method wrapped it: no hook, no communication, the run's parameters
untouched) after one untimed, each step timed by host stamps after a device synchronisation.
It is what one worker's compute takes beside the others, then: on a shared machine that drifts
over minutes, so a profile measured apart from the run mistimes it (`compute_probe_s`: the
workers' mean step per repeat; `compute_probe_iter_s`: rank 0's steps; a `probe` span per
repeat in the trace). Then as many steps again in lock-step: every step starts after a barrier,
as a BSP iteration's compute starts when the last communication has landed, and each counts
from the first worker's start to the last worker's end on each machine, the slowest machine's
(`lockstep_steps_s`; `compute_probe_lockstep_s`: their mean per repeat; beside it, the slowest
worker's own step, from its own start, `compute_probe_lockstep_own_s`). That is what W workers'
compute costs an iteration that waits for all of them: on shared cores a worker slowed by its
neighbours is slow because they ran, so their steps are no independent draws (4 workers on 2
cores: the slowest worker's own step took 0.97-1.25 times the mean free-running step, where the
maximum of 4 draws from a worker's steps gave 1.3-2.0), and a worker that waits for a core
after the barrier starts late, which its own step leaves out (there, the first start to the
last end took 2.1-3.5 ms more than the slowest worker's own step, 1.2-1.35 times it; at 2 workers
0.1-0.5 ms).
Last, half as many steps at each of PROBE_IDLE_S in lock-step after the workers idled that long
together (`compute_probe_idle_s`; each length's whole step and slowest worker's own step as
above, means per repeat, `compute_probe_after_idle_s` and `compute_probe_after_idle_own_s`), as
a BSP iteration's compute starts after every worker waited for its communication: a core left
idle comes back slower (here, tiny-resnet at one thread, two workers: 0-0.5 ms more after 2-8 ms
of idle, 0.9-2.2 ms after 16-32 ms, of a 12-13 ms step).
The predictor's validation calibrates its compute from both; they are no multi-worker result
(nothing communicates but the barrier, outside every timed step) and never enter the throughput.

With `profile.comm_probe_rounds` > 0 and several workers (the benches set it; 0 by default),
every repeat then also starts with a communication probe: that many rounds, each after a
barrier, of the model's gradient shapes all-reduced one tensor each over the run's worker group,
all launched at once, then waited (no training: buffers of ones of the gradients' sizes, in the
order backward makes them), after one untimed round. That is make commbench's fusion burst
(commbench.modes.fusion, `per_tensor`), timed as it times it: each worker's mean round, the
slowest worker's (`comm_probe_s`, per repeat; a `comm probe` span in the trace). What messages
cost the cores that workers share drifts here as their compute does (the burst of tiny-resnet's
29 all-reduces at 4 local workers: 49.5 ms, then 81.6 ms ten minutes later), so the
validation scales the network that make commbench measured at the bench's end by this burst
against commbench's own. It is a microbenchmark beside the run, like the compute probe, and
never enters the throughput.
A PS run's repeats (method.architecture ps) then also time make commbench's PS burst through the
run's own PS path (`_PSProbe`): PS_BURST_KEYS keys of PS_BURST_BYTES[0] each, keys of the probe's
own prepared beside the schedule's messages (`GradSync.probe_numels`), every worker pushing them
back to back and waiting for all, after a barrier, `comm_probe_rounds` rounds after one untimed,
the slowest worker's mean round (`ps_probe_s`, per repeat; a `ps probe` span). It is commbench's
`push_pull_node_burst` (`push_pull_burst` where every worker pushes for itself), timed as it
times it. What a PS message costs the shared cores drifts on its own: commbench's node bursts of
4 local workers cost 0.75-0.79 ms of the machine's CPU per key in some launches and 1.16-1.22 in
others, minutes apart, while the all-reduce burst beside the same server moved otherwise
(26-43 ms); bl55's 4-worker PS runs were predicted 22-25% slow on a network measured in such a
slow spell. The all-reduce probe above does not follow it, so the validation scales a local PS
run's network by this burst against commbench's (predict_validation.ps_scale).
"""
from __future__ import annotations

import copy
import os
import sys
import time

import torch
import torch.distributed as dist

from . import hostcpu, metrics
from .models import data


def measure(cfg, ctx, workload, sync, progress=None, heartbeat=None) -> dict:
    if ctx.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # the study's setting; autotuning then happens in set-up and warm-up
    probe = _Probe(workload, cfg) if cfg.profile.get("compute_probe_iters", 0) else None  # before any hook
    comm_probe = _CommProbe(workload, cfg, ctx) if cfg.profile.get("comm_probe_rounds", 0) and ctx.world > 1 else None
    ps_probe = _PSProbe(sync, cfg, ctx) if comm_probe is not None and cfg.method.architecture == "ps" else None
    model = sync.wrap(workload.model)
    sync.setup(workload.model)
    opt = sync.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum))
    p = cfg.profile
    tracer = ctx.tracer
    batches = [workload.make_batch(ctx.seed, ctx.rank, b, ctx.device) for b in range(p.distinct_batches)]
    block_times: list[float] = []
    iter_times: list[float] = []
    busy_cores: list[float] = []
    steal_cores: list[float] = []
    thread_ms: list[dict] = []
    runq_ms: list[dict] = []  # per thread name: ms an iteration runnable but waiting for a core
    probe_s: list[float] = []
    probe_iter_s: list[float] = []
    probe_lockstep_s: list[float] = []
    probe_own_s: list[float] = []
    probe_after_idle_s: list[list[float]] = []
    probe_after_idle_own_s: list[list[float]] = []
    comm_probe_s: list[float] = []
    ps_probe_s: list[float] = []
    iteration = 0

    def one() -> None:
        nonlocal iteration
        data.seed_dropout(ctx.seed, ctx.rank, iteration, ctx.device)  # dropout, reproducibly
        step(model, workload, sync, opt, batches[data.batch_index(iteration, p.distinct_batches)], iteration, tracer)
        iteration += 1

    for repeat in range(p.repeats):
        if probe is not None:
            steps, lockstep, own, (after_idle, after_idle_own) = probe.run(ctx, batches, tracer, iteration, repeat)
            probe_after_idle_s.append(after_idle)
            probe_after_idle_own_s.append(after_idle_own)
            probe_iter_s += steps
            probe_s.append(sum(steps) / len(steps))
            probe_lockstep_s.append(sum(lockstep) / len(lockstep))
            probe_own_s.append(sum(own) / len(own))
        if comm_probe is not None:
            comm_probe_s.append(comm_probe.run(ctx, tracer, iteration, repeat))
        if ps_probe is not None:
            ps_probe_s.append(ps_probe.run(ctx, tracer, iteration, repeat))
        last = time.perf_counter()
        for i in range(p.warmup_iters):
            one()
            last = _tick(progress, heartbeat, repeat, i, last)
        first = iteration
        _sync(ctx.device)
        # read outside the block: the clock and its span time the iterations alone
        busy0, steal0 = hostcpu.busy_and_steal_s()
        threads0 = hostcpu.thread_sched_s()
        t0, t0_us = time.perf_counter(), tracer.now_us()
        stamps = [t0]
        for i in range(p.warmup_iters, p.warmup_iters + p.measured_iters):
            one()
            if i == p.warmup_iters + p.measured_iters - 1:
                sync.flush()  # the block ends when its last communication has landed
            stamps.append(_tick(progress, heartbeat, repeat, i, stamps[-1]))
        _sync(ctx.device)
        t1 = time.perf_counter()
        tracer.complete("measure", "measure", t0_us, tracer.now_us(),
                        {"iter": first, "iters": p.measured_iters, "repeat": repeat})
        busy1, steal1 = hostcpu.busy_and_steal_s()
        if busy0 is not None:
            busy_cores.append((busy1 - busy0) / (t1 - t0))
        if steal0 is not None and steal1 is not None:
            steal_cores.append((steal1 - steal0) / (t1 - t0))
        cpu_ms, waited_ms = hostcpu.sched_per_iteration_ms(threads0, hostcpu.thread_sched_s(), p.measured_iters)
        thread_ms.append(cpu_ms)
        runq_ms.append(waited_ms)
        slowest = _slowest_rank([t1 - t0] + [b - a for a, b in zip(stamps, stamps[1:])], ctx)
        block_times.append(slowest[0])
        iter_times += slowest[1:]
    mean, std, per_repeat_sps = metrics.throughput_over_repeats(ctx.world, workload.local_batch, p.measured_iters,
                                                                block_times)
    if progress is not None:
        progress.done(mean, std)
    return {
        "block_time_s": block_times,
        "iter_times_s": iter_times,
        "samples_per_sec": mean,
        "samples_per_sec_std": std,
        "samples_per_sec_per_repeat": per_repeat_sps,
        "iterations_total": iteration,
        "host_cores": hostcpu.cores(),
        "host_busy_cores": busy_cores,
        "host_steal_cores": steal_cores,
        "thread_cpu_ms_per_iter": thread_ms,
        "thread_runq_ms_per_iter": runq_ms,
        **({"compute_probe_s": [t / ctx.world for t in _over_ranks(probe_s, ctx, dist.ReduceOp.SUM)],
            "compute_probe_iter_s": probe_iter_s, "compute_probe_lockstep_s": probe_lockstep_s,
            "compute_probe_lockstep_own_s": probe_own_s, "compute_probe_idle_s": list(PROBE_IDLE_S),
            "compute_probe_after_idle_s": probe_after_idle_s, "compute_probe_after_idle_own_s": probe_after_idle_own_s}
           if probe is not None else {}),
        **({"comm_probe_s": comm_probe_s, "comm_probe_rounds": comm_probe.rounds,
            "comm_probe_tensors": len(comm_probe.grads),
            "comm_probe_bytes": sum(g.numel() * g.element_size() for g in comm_probe.grads)}
           if comm_probe is not None else {}),
        **({"ps_probe_s": ps_probe_s, "ps_probe_keys": len(ps_probe.keys),
            "ps_probe_key_bytes": ps_probe.keys[0].numel() * ps_probe.keys[0].element_size()}
           if ps_probe is not None else {}),
        **numerics(ctx.device),
    }


# The compute probe's idle lengths (seconds), each with half `compute_probe_iters` lock-step steps begun
# after it: the time a BSP iteration's workers wait for communication, on fast and slow links alike
# (tiny-resnet here: 2-4 ms at 1 Gbit/s, 16-60 ms at 100 Mbit/s).
PROBE_IDLE_S = (0.004, 0.016, 0.048)


class _Probe:
    """The compute probe (module docstring): a copy of the model as the workload built it, before
    the method wraps it, with an optimizer of the run's settings."""

    def __init__(self, workload, cfg):
        self.workload, self.iters = workload, int(cfg.profile.compute_probe_iters)
        self.model = copy.deepcopy(workload.model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum)

    def run(self, ctx, batches: list, tracer, iteration: int, repeat: int) -> tuple[list, list, list, tuple]:
        """One probe: the seconds of each free-running step (this worker's), of each lock-step
        step, whole and its slowest worker's own (`lockstep_steps_s`: the same for every worker),
        and per idle length of PROBE_IDLE_S the means of its lock-step steps, whole and own, each
        step begun after every worker idled that long."""
        _slowest_rank([0.0], ctx)  # every worker starts it together: each is timed beside the others
        t0_us = tracer.now_us()
        stamps = []  # (the run's own iterations seed their dropout each, as `one` does)
        for i in range(self.iters + 1):  # the first untimed
            self._step(ctx, batches[i % len(batches)])
            stamps.append(time.perf_counter())
        spans = self._lockstep(ctx, batches, self.iters)
        n = max(1, self.iters // 2)  # half as many after each idle: each waits its idle too
        idle_spans = [span for idle_s in PROBE_IDLE_S for span in self._lockstep(ctx, batches, n, idle_s)]
        mine = (hostcpu.clock_key(), spans, idle_spans)
        everyone = [mine]
        if ctx.world > 1:  # one collective, after the steps
            everyone = [None] * ctx.world
            dist.all_gather_object(everyone, mine, group=ctx.group)
        lockstep, own = lockstep_steps_s([(key, s) for key, s, _ in everyone])
        after_idle = lockstep_steps_s([(key, s) for key, _, s in everyone])
        tracer.complete("compute probe", "probe", t0_us, tracer.now_us(),
                        {"iter": iteration, "iters": self.iters, "repeat": repeat})
        return ([b - a for a, b in zip(stamps, stamps[1:])], lockstep, own,
                tuple([sum(steps[k * n:(k + 1) * n]) / n for k in range(len(PROBE_IDLE_S))] for steps in after_idle))

    def _lockstep(self, ctx, batches: list, n: int, idle_s: float = 0.0) -> list[tuple[float, float]]:
        """n steps, each begun when every worker's last one is done (a barrier) and, with
        `idle_s`, after every worker then idled that long, as while its communication runs:
        this worker's (start, end) of each, on its own clock."""
        spans = []
        for i in range(n):
            _slowest_rank([0.0], ctx)
            if idle_s:
                time.sleep(idle_s)
            t0 = time.perf_counter()
            self._step(ctx, batches[i % len(batches)])
            spans.append((t0, time.perf_counter()))
        return spans

    def _step(self, ctx, batch) -> None:
        loss = self.workload.loss(self.model, batch)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        _sync(ctx.device)


class _CommProbe:
    """The communication probe (module docstring): the model's gradient shapes, fp32, on the
    run's device, all-reduced one tensor each over the run's worker group."""

    def __init__(self, workload, cfg, ctx):
        self.rounds = int(cfg.profile.comm_probe_rounds)
        # in the order backward makes them, as commbench.modes.gradient_numels
        self.grads = [torch.ones(p.numel(), dtype=torch.float32, device=ctx.device)
                      for p in workload.model.parameters() if p.requires_grad][::-1]

    def run(self, ctx, tracer, iteration: int, repeat: int) -> float:
        """One probe: the slowest worker's mean round, in seconds (every worker returns it)."""
        t0_us = tracer.now_us()
        slowest = _probe_rounds_s(ctx, self.rounds, lambda: [dist.all_reduce(g, group=ctx.group, async_op=True)
                                                             for g in self.grads])
        tracer.complete("comm probe", "probe", t0_us, tracer.now_us(),
                        {"iter": iteration, "rounds": self.rounds, "repeat": repeat, "tensors": len(self.grads)},
                        lane="comm")
        return slowest


class _PSProbe:
    """The PS communication probe (module docstring): make commbench's PS burst through the
    run's own transport (the per-machine layer and the wire), past the schedule's queue, on
    keys of its own that `sync` prepares with its messages (so it is made before `setup`)."""

    def __init__(self, sync, cfg, ctx):
        from ddlbench.commbench.modes import PS_BURST_BYTES, PS_BURST_KEYS

        self.sync, self.rounds = sync, int(cfg.profile.comm_probe_rounds)
        self.keys = [torch.ones(PS_BURST_BYTES[0] // 4, dtype=torch.float32, device=ctx.device)
                     for _ in range(PS_BURST_KEYS)]
        sync.probe_numels = tuple(x.numel() for x in self.keys)
        self.round = 0  # the probe keys' own rounds, apart from training's iterations

    def run(self, ctx, tracer, iteration: int, repeat: int) -> float:
        """One probe: the slowest worker's mean round, in seconds (every worker returns it)."""
        t0_us = tracer.now_us()
        slowest = _probe_rounds_s(ctx, self.rounds, self._push_all)
        tracer.complete("ps probe", "probe", t0_us, tracer.now_us(),
                        {"iter": iteration, "rounds": self.rounds, "repeat": repeat, "keys": len(self.keys)},
                        lane="comm")
        return slowest


    def _push_all(self) -> list:
        """One round: every probe key pushed, back to back; their handles."""
        handles = [self.sync.probe_async(k, x, self.round) for k, x in enumerate(self.keys)]
        self.round += 1
        return handles


def _probe_rounds_s(ctx, rounds: int, launch) -> float:
    """The communication probes' timing, as commbench times its bursts: `rounds` rounds after one
    untimed, each after a barrier (every worker starts it together), `launch()` sending the
    round's messages and giving their handles, all waited; the slowest worker's mean round, in
    seconds (every worker returns it)."""
    times = []
    for i in range(rounds + 1):
        _slowest_rank([0.0], ctx)
        t0 = time.perf_counter()
        for h in launch():
            h.wait()
        _sync(ctx.device)  # on a GPU the wait orders the stream; the clock needs the kernels done
        if i:
            times.append(time.perf_counter() - t0)
    return _slowest_rank([sum(times) / len(times)], ctx)[0]


def lockstep_steps_s(everyone: list) -> tuple[list[float], list[float]]:
    """Each lock-step step's seconds from every worker's (clock key, [(start, end)] per step), as
    the probe gathers them: on each machine, from its first worker's start to its last worker's
    end (its workers read one clock, `hostcpu.clock_key`), the slowest machine's; and the slowest
    worker's own step, from its own start. A worker's own start leaves out what it waited for a
    core after the barrier let it go: where W workers share fewer cores, half of them start when
    the others' steps are done (4 workers on 2 cores, tiny-resnet, two benches: 12.3-15.4 ms from
    the first start to the last end, where the slowest worker's own step took 9.8-12.0). The
    difference is a late start, not a longer step: the last worker's gradients appear in its own
    step's time."""
    machines: dict = {}
    for key, spans in everyone:
        machines.setdefault(key, []).append(spans)
    steps = min(len(spans) for _, spans in everyone)
    whole = [max(max(s[i][1] for s in ranks) - min(s[i][0] for s in ranks) for ranks in machines.values())
             for i in range(steps)]
    own = [max(spans[i][1] - spans[i][0] for _, spans in everyone) for i in range(steps)]
    return whole, own


def _tick(progress, heartbeat, repeat: int, i: int, since: float) -> float:
    """After an iteration: report progress and a sign of life; return the host stamp."""
    now = time.perf_counter()
    if progress is not None:
        progress.update(repeat, i, now - since)
    if heartbeat is not None:
        heartbeat()
    return now


def numerics(device) -> dict:
    """What decides a CUDA run's arithmetic and kernels, for the record: cuDNN autotuning, and
    whether TF32 was on (Ampere and later run fp32 matmuls and convolutions in TF32 where these
    allow it; NVIDIA_TF32_OVERRIDE=0 forbids it whatever the flags say). The study's RTX 2080 Ti
    had no TF32."""
    flags = {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE"),
    }
    capable = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
    on = capable and flags["NVIDIA_TF32_OVERRIDE"] != "0" and (flags["matmul_allow_tf32"] or flags["cudnn_allow_tf32"])
    return {"cudnn_benchmark": bool(torch.backends.cudnn.benchmark), "tf32": {**flags, "on": bool(on)}}


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
    """Element-wise maximum over the workers: one collective, after the block."""
    return _over_ranks(times, ctx, dist.ReduceOp.MAX)


def _over_ranks(values: list[float], ctx, op) -> list[float]:
    """`values` reduced element-wise over the workers by `op`: one collective."""
    if ctx.world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=op, group=ctx.group)
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
        # during the first warm-up nothing is measured yet: say so rather than print nan
        rate = f"{self.global_batch * len(self.measured) / sum(self.measured):8.1f} samples/s" if self.measured \
            else "    (not measured yet)"
        left = self.elapsed / self.done_iters * (self.total - self.done_iters)
        phase = "warm-up" if i < self.p.warmup_iters else "measure"
        line = (f"[{self.label}] repeat {repeat + 1}/{self.p.repeats} {phase} iter {i + 1}/{self.per_repeat} "
                f"{rate}  ~{left:5.0f} s left")
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def done(self, mean: float, std: float) -> None:
        end = "\n" if self.tty else ""
        self.stream.write(f"{end}[{self.label}] {mean:.2f} ± {std:.2f} samples/s\n")
        self.stream.flush()
