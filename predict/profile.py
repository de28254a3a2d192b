"""Per-layer profiles: what one worker's iteration is made of, for the simulator.

A profile holds, for one model at one local batch on one device:
- the parameters' element counts, in forward order (`named_parameters`) and the order backward
  produces their gradients (`ready_names`),
- `ready_s[i]`: when parameter i's gradient exists, counted from the start of backward,
- `need_s[i]`: when the forward pass first needs parameter i (its module starts), counted from
  the start of forward,
- `forward_s`, `backward_s` and `update_s[i]` (parameter i's SGD step).

Where the times come from (`source`):
- `derived`: the model of `conf/model/<name>.yaml` runs one forward and backward pass on the meta
  device (shapes only) under a dispatch mode that prices every operator by the roofline,
  max(FLOPs / peak, bytes moved / memory bandwidth) (FLOPs from torch.utils.flop_counter's
  formulas, bytes = its tensor inputs and outputs; views are free); the SGD step (momentum) of a
  parameter moves 20 bytes per element. Every time is then scaled by one factor so that
  batch / (forward + backward + update) equals a stated one-worker throughput. Peak and bandwidth
  only set the relative cost of operators (the scale absorbs their absolute values): RTX 2080 Ti,
  13.45 TFLOP/s fp32 and 616 GB/s (NVIDIA's specification).
- `measured` (`PROFILE_FROM=measured`, `--profile-from measured`): one worker on the target
  device, hooks on the wall clock (`measured`); its one-worker throughput is its own, or it is
  rescaled the same way to a stated one.

Assumptions: operators run one after another (one stream, no overlap of kernels); the optimizer
step after communication costs what it cost on one worker; communication kernels do not slow
compute down; W workers' iterations vary independently, each drawn from one worker's measured
iterations (`Profile.sync_factor`; a derived profile has none, so no spread).

The stated one-worker throughput of the study's models comes from the published table's
one-worker rows only (`one_worker_samples_per_sec`): calibration never reads a multi-worker row.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ddlbench import hostcpu

GPU_PEAK_FLOPS = 13.45e12   # RTX 2080 Ti fp32, boost (NVIDIA specification)
GPU_MEM_BPS = 616e9         # RTX 2080 Ti GDDR6 (NVIDIA specification)
SGD_BYTES_PER_ELEMENT = 20  # momentum SGD: read param, grad, buffer; write param, buffer (fp32)

REFERENCE_CSV = Path(__file__).resolve().parents[1] / "results" / "reference" / "shi2020_100gbib_throughput.csv"
CACHE_DIR = Path.home() / ".cache" / "ddlbench" / "profiles"


@dataclass
class Profile:
    model: str
    local_batch: int
    names: list[str]           # forward order
    numels: list[int]          # forward order
    element_size: int
    ready_names: list[str]     # gradient-ready order (as backward produced them)
    ready_s: list[float]       # forward order: gradient of parameter i exists, from backward's start
    need_s: list[float]        # forward order: forward first needs parameter i, from forward's start
    forward_s: float
    backward_s: float
    update_s: list[float]      # forward order: parameter i's optimizer step
    source: str
    samples_per_sec_1: float   # the one-worker throughput the profile is scaled to
    buffer_bytes: list[int] = field(default_factory=list)  # the module's buffers (BatchNorm's running
                               # statistics...), bytes per dtype: what DDP broadcasts before each forward
    iteration_s: list[float] = field(default_factory=list)  # measured profiles: one worker's whole
                               # iterations over the window, as measured (their mean is compute_s);
                               # their spread is what W synchronised workers wait for (sync_factor);
                               # empty in the roofline's
    # packing a fused message's tensors into one buffer, or unpacking it (methods.grouped: one
    # torch.cat, then a copy_ per tensor), each `copy_tensor_s` per tensor and a read and a write
    # of its bytes at `copy_Bps`: the GPU's memory bandwidth by default (the roofline's device);
    # on the CPU, measured (`measure_copy`, named in `source`), where the per-tensor calls cost the most
    copy_tensor_s: float = 0.0
    copy_Bps: float = GPU_MEM_BPS
    # how much longer the compute of an iteration takes after its workers idled: [(idle seconds,
    # extra seconds)], idle ascending, from the run's compute probe (driver.PROBE_IDLE_S); empty:
    # none (`idle_extra_s`)
    after_idle: list = field(default_factory=list)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + sum(self.update_s)

    @property
    def tensor_bytes(self) -> list[int]:
        return [n * self.element_size for n in self.numels]

    def ready_order(self) -> list[int]:
        """Indices (forward order) in the order their gradients exist."""
        index = {n: i for i, n in enumerate(self.names)}
        return [index[n] for n in self.ready_names]

    def tb_s(self) -> list[float]:
        """MG-WFBP's t_b in gradient-ready order: the time from one gradient to the next."""
        out, prev = [], 0.0
        for i in self.ready_order():
            out.append(max(0.0, self.ready_s[i] - prev))
            prev = max(prev, self.ready_s[i])
        return out

    def scaled(self, samples_per_sec_1: float, source: str) -> "Profile":
        """The same profile with every time scaled so one worker runs at `samples_per_sec_1`."""
        if not 0 < samples_per_sec_1 < math.inf:  # nan too
            raise ValueError(f"one-worker throughput {samples_per_sec_1!r} samples/s is invalid; accepted: a finite "
                             f"number > 0")
        k = (self.local_batch / samples_per_sec_1) / self.compute_s
        return replace(self.slower(k), source=source, samples_per_sec_1=samples_per_sec_1)

    def started_late(self, delay_s: float) -> "Profile":
        """The same step begun `delay_s` later: forward that much longer at its start (each
        parameter first needed that much later), backward and its gradients as they were. On
        shared cores the last of W synchronised workers waits that long for a core before its
        step (driver.lockstep_steps_s), and its gradients appear in its own step's time."""
        if not 0 <= delay_s < math.inf:
            raise ValueError(f"start delay {delay_s!r} s is invalid; accepted: a finite number >= 0")
        return replace(self, forward_s=self.forward_s + delay_s, need_s=[t + delay_s for t in self.need_s])

    def slower(self, k: float) -> "Profile":
        """Every time `k` times as long (the stated one-worker throughput is left as it was)."""
        return replace(self, ready_s=[t * k for t in self.ready_s], need_s=[t * k for t in self.need_s],
                       forward_s=self.forward_s * k, backward_s=self.backward_s * k,
                       update_s=[t * k for t in self.update_s], iteration_s=[t * k for t in self.iteration_s])

    def copy_s(self, nbytes: float, tensors: int) -> float:
        """Packing `tensors` tensors of `nbytes` in all into one buffer, or unpacking it; none for
        one tensor (the runtime sends it in place)."""
        return tensors * self.copy_tensor_s + 2 * nbytes / self.copy_Bps if tensors > 1 else 0.0

    def with_copy(self, tensor_s: float, Bps: float, source: str) -> "Profile":
        if not (tensor_s >= 0 and 0 < Bps < math.inf):
            raise ValueError(f"copy cost {tensor_s!r} s per tensor, {Bps!r} B/s is invalid; accepted: >= 0 s and a "
                             f"finite bandwidth > 0")
        return replace(self, copy_tensor_s=tensor_s, copy_Bps=Bps, source=f"{self.source}; copies: {source}")

    def idle_extra_s(self, idle_s: float) -> float:
        """What the compute of an iteration takes beyond its own after the workers idled `idle_s`
        (waiting for their communication): on the line through (0, 0) and the measured points
        (`after_idle`), the last point's beyond them; 0 without points."""
        if not self.after_idle or not idle_s > 0:
            return 0.0
        points = [(0.0, 0.0), *self.after_idle]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if idle_s <= x1:
                return y0 + (y1 - y0) * (idle_s - x0) / (x1 - x0)
        return points[-1][1]

    def with_after_idle(self, points) -> "Profile":
        """The same profile whose compute takes `points` ([(idle s, extra s)], `after_idle`) more
        after its workers idled."""
        points = sorted((float(x), float(y)) for x, y in points)
        if any(not (0 < x < math.inf and 0 <= y < math.inf) for x, y in points) or \
                len({x for x, _ in points}) < len(points):
            raise ValueError(f"after-idle points {points!r} are invalid; accepted: distinct idle seconds > 0, each "
                             f"with an extra >= 0 seconds")
        return replace(self, after_idle=points)

    def sync_factor(self, workers: int) -> float:
        """How much longer `workers` synchronised workers take to compute an iteration than one
        worker on average: each iteration waits for the slowest of them (the all-reduce or the
        servers' sum needs every worker's gradients), E[max of W independent draws] / mean over
        this profile's measured iterations (`iteration_s`, one worker's; `expected_max`). 1 for
        one worker, and for a profile without measured iterations (the roofline's: the study's
        one-GPU rows give no spread)."""
        if workers < 2 or len(self.iteration_s) < 2:
            return 1.0
        return expected_max(self.iteration_s, workers) / statistics.mean(self.iteration_s)


def expected_max(samples: list[float], n: int) -> float:
    """E[max of n independent draws from `samples`] (each equally likely), exactly: the k-th
    smallest of m samples is the maximum with probability (k/m)^n - ((k-1)/m)^n."""
    xs, m = sorted(samples), len(samples)
    return sum(x * ((k / m) ** n - ((k - 1) / m) ** n) for k, x in enumerate(xs, 1))


# -- the roofline pass on the meta device ------------------------------------------------------
def roofline(model: str, local_batch: int) -> Profile:
    """Unscaled roofline times (seconds on the specified GPU) of one iteration of `model`."""
    import torch
    from omegaconf import OmegaConf
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    from ddlbench import models
    from ddlbench.config import conf_dir

    class Clock(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.now_s = 0.0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not func.is_view:
                packet = func._overloadpacket
                flops = flop_registry[packet](*args, **kwargs, out_val=out) if packet in flop_registry else 0
                nbytes = sum(t.numel() * t.element_size() for t in tree_flatten((args, kwargs, out))[0]
                             if isinstance(t, torch.Tensor))
                self.now_s += max(flops / GPU_PEAK_FLOPS, nbytes / GPU_MEM_BPS)
            return out

    cfg = OmegaConf.load(conf_dir() / "model" / f"{model}.yaml")
    with torch.device("meta"):
        w = models.build(cfg, local_batch, seed=0)
        batch = w.make_batch(0, 0, 0, torch.device("meta"))
    clock = Clock()
    with torch.device("meta"), clock:
        p = _hooked_pass(model, w, batch, lambda: clock.now_s)
    p.buffer_bytes = buffer_buckets(w.model)
    p.update_s = [SGD_BYTES_PER_ELEMENT * n * p.element_size / 4 / GPU_MEM_BPS for n in p.numels]
    return p


def _hooked_pass(model: str, w, batch, now) -> "Profile":
    """One forward and backward pass of workload `w` with hooks that read `now()`: when each
    module first needs its parameters (forward pre-hook) and when each gradient is accumulated
    (post-accumulate-grad hook), in the order backward produced them."""
    with _Hooked(w, now) as hooked:
        return hooked.profile(model, hooked.run(batch), lambda start, end: end - start)


@dataclass
class _Marks:
    """One hooked pass's marks (host times, or CUDA events read later): forward start, backward
    start, backward end, each parameter's first need and gradient, and the gradients' order."""

    forward: object
    backward: object
    end: object
    need: list
    ready: dict
    order: list


class _Hooked:
    """`w`'s model with hooks that take `mark()` (registered on entry and by `attach`, removed by
    `detach` and on exit): `run(batch)` is one forward and backward pass and returns its marks,
    none of them read; `run_plain(batch)` is one without hooks and marks."""

    def __init__(self, w, mark):
        self.w, self.mark = w, mark
        self.named = [(n, p) for n, p in w.model.named_parameters() if p.requires_grad]
        index = {id(p): i for i, (_, p) in enumerate(self.named)}
        self.marks: _Marks | None = None
        self.handles = []

        def pre_hook(module, args):
            m = self.marks
            for p in module.parameters(recurse=False):
                i = index.get(id(p))
                if i is not None and m.need[i] is None:
                    m.need[i] = mark()

        def grad_hook(i):
            def hook(_p):
                m = self.marks
                if i not in m.ready:
                    m.ready[i] = mark()
                    m.order.append(i)
            return hook

        self._pre_hook, self._grad_hooks = pre_hook, [grad_hook(i) for i in range(len(self.named))]
        self.attach()

    def attach(self) -> None:
        if not self.handles:
            self.handles = [mod.register_forward_pre_hook(self._pre_hook) for mod in self.w.model.modules()]
            self.handles += [p.register_post_accumulate_grad_hook(h) for (_, p), h in zip(self.named, self._grad_hooks)]

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def run(self, batch) -> _Marks:
        if not self.handles:
            raise RuntimeError("a hooked pass with its hooks detached")
        mark = self.mark
        m = self.marks = _Marks(None, None, None, [None] * len(self.named), {}, [])
        m.forward = mark()
        loss = self.w.loss(self.w.model, batch)
        m.backward = mark()
        loss.backward()
        m.end = mark()
        return m

    def run_plain(self, batch) -> None:
        if self.handles:
            raise RuntimeError("a plain pass with its hooks attached")
        self.w.loss(self.w.model, batch).backward()

    def profile(self, model: str, m: _Marks, seconds) -> "Profile":
        """The profile of one pass's marks, `seconds(start, end)` apart."""
        named = self.named
        missing = [named[i][0] for i in range(len(named)) if i not in m.ready]
        if missing:
            raise ValueError(f"model {model!r}: parameters without a gradient: {missing[:3]}")
        forward_s = seconds(m.forward, m.backward)
        # a parameter no module hook saw: needed last
        need = [forward_s if t is None else seconds(m.forward, t) for t in m.need]
        return Profile(model, self.w.local_batch, [n for n, _ in named], [p.numel() for _, p in named],
                       named[0][1].element_size(), [named[i][0] for i in m.order],
                       [seconds(m.backward, m.ready[i]) for i in range(len(named))], need, forward_s,
                       seconds(m.backward, m.end), [0.0] * len(named), "roofline", 0.0)


def buffer_buckets(module) -> list[int]:
    """Bytes of each bucket DDP broadcasts of `module`'s buffers before every forward
    (broadcast_buffers, now forward_sync_buffers, on by default: `_sync_buffers` -> c10d's
    broadcast_coalesced over all named buffers, persistent or not, in buckets of one dtype):
    one per dtype, in first-seen order; [] for a model without buffers. (A bucket also ends at
    250 MiB, which no model here comes near: ResNet-50's buffers are 213 KB.)"""
    out: dict = {}
    for b in module.buffers():
        out[b.dtype] = out.get(b.dtype, 0) + b.numel() * b.element_size()
    return list(out.values())


# How a GPU profile is timed, in its source; a cached GPU profile without it was timed otherwise
# (a synchronisation in every hook, then a batch made in every iteration, then scaled to the
# hooked iterations) and is measured again.
CUDA_HOOKS = "hooks (CUDA events read after the window, batches made first, scaled to iterations without hooks)"
PROFILE_BATCHES = 2        # a measured profile cycles this many batches, made before it is timed
WINDOW_S = 3.0             # a measured profile covers at least this long (hundreds of scheduler slices)
NEIGHBOUR_START_S = 300.0  # a neighbour builds its model and runs two steps within this, or the measurement fails


def measured(model: str, local_batch: int, device: str = "cpu", iters: int = 5, warmup: int = 2,
             cache: bool = True, threads: int | None = None, sharers: int = 1,
             cache_dir: Path | None = None, repeats: int = 1) -> Profile:
    """The profile measured on `device` by one worker (PROFILE_FROM=measured): forward and backward
    per layer from the hooks of `_Hooked` (host times on the CPU; on a GPU CUDA events read
    after the window, never a synchronisation in a hook: `_measure`), the medians over at least `iters`
    hooked passes after `warmup`, scaled to the mean whole iteration of as many plain ones (no
    hooks: what hooks cost is not the model's), alternating over at least WINDOW_S seconds (a
    throughput is a mean: on a shared machine an iteration is either untouched or waits out
    others' time slices); the momentum-SGD step timed whole and shared by parameter size; every
    plain iteration's wall time kept (`iteration_s`: their spread is what synchronised workers
    wait for, `Profile.sync_factor`). Its one-worker throughput is its own (batch /
    compute). On the CPU, `threads`: the intra-op threads one worker of the predicted run will
    have (the launchers share the cores out, config.threads_for), else this process's;
    `sharers`: the workers of that run on this machine's cores (CLUSTER=local and emulated: all
    of them), so `sharers - 1` other processes run the same training step at the same threads
    while this one measures: the device one worker of that run gets (tiny-resnet here: 9 ms per
    step alone at one thread, 10-12 ms beside a second copy, 22-25 ms beside three on two cores).
    No communication runs: it is a one-worker profile on a shared machine, not a multi-worker
    result. Both are named in the source. `repeats` > 1: measured that many times, one after
    another, and the one of median compute kept (a window that something else on the machine
    disturbed, 10-40% slower here, is then outvoted). Cached per model, batch, device, threads,
    sharers, window and repeats, in `cache_dir` (default CACHE_DIR)."""
    import torch

    dev = torch.device(device)
    if sharers < 1 or (sharers > 1 and dev.type != "cpu"):
        raise ValueError(f"sharers={sharers!r} is invalid for device {device!r}; accepted: >= 1 on the cpu, 1 on a "
                         f"GPU (a GPU worker has its own device)")
    if iters < 1 or warmup < 0 or repeats < 1:
        raise ValueError(f"iters={iters}, warmup={warmup}, repeats={repeats} are invalid; accepted: iters >= 1, "
                         f"warmup >= 0, repeats >= 1")
    threads = (threads or torch.get_num_threads()) if dev.type == "cpu" else None
    key = f"{f'-t{threads}' if threads else ''}{f'-s{sharers}' if sharers > 1 else ''}-w{WINDOW_S:g}" \
          f"{f'-r{repeats}' if repeats > 1 else ''}"
    path = Path(cache_dir or CACHE_DIR) / f"{model}-b{local_batch}-{device.replace(':', '')}{key}-measured.json"
    cached = _read_cached(path) if cache else None
    if cached is not None:
        return cached
    hostcpu.refuse_if_others_measuring(f"{model}'s profile")
    tries = []
    with torch_threads(threads), _neighbours(model, local_batch, threads, sharers - 1) as check:  # once for every repeat
        for _ in range(repeats):
            out, whole = _measure(model, local_batch, dev, iters, warmup, WINDOW_S)
            check()
            tries.append(replace(out.scaled(local_batch / statistics.mean(whole), ""), iteration_s=whole))
    out = sorted(tries, key=lambda p: p.compute_s)[len(tries) // 2]
    beside = f", beside {sharers - 1} more worker(s) running the same step on this machine's cores" if sharers > 1 else ""
    hooks = CUDA_HOOKS if dev.type == "cuda" else "hooks"
    of = (f"; the median compute of {repeats} measurements ("
          + ", ".join(f"{p.compute_s * 1e3:.1f}" for p in tries) + " ms)") if repeats > 1 else ""
    out.source = f"measured: one worker on {device}{f' at {threads} threads' if threads else ''}{beside}, {hooks}, " \
                 f"per-layer medians of >= {iters} hooked iterations scaled to the mean of >= {iters} plain ones " \
                 f"(alternating, over >= {WINDOW_S:g} s){of}"
    if cache:
        _write_cached(path, out)
    return out


# measure_launch: alternating rounds of plain, WFBP and bare iterations, timed iterations per
# round (after one untimed), and how long its process may take, start-up included
LAUNCH_ROUNDS = 9
LAUNCH_ITERS = 20
LAUNCH_TIMEOUT_S = 300.0


def measure_launch(model: str, local_batch: int, threads: int | None = None, rounds: int = LAUNCH_ROUNDS,
                   iters: int = LAUNCH_ITERS, cache_dir: Path | None = None) -> tuple[float, str]:
    """(seconds, source): what an eager method's launch of an all-reduce costs the worker's own
    thread beyond the bare launch and wait that make commbench's per-tensor bursts make (whose
    CPU `HostCpu.allreduce_s` holds), per message, on the CPU at `threads` intra-op threads (else
    this process's). The runtime's own code: `methods.wfbp.WFBP` training `model` (its gradient
    hooks, `AllReduce.reduce_async`'s division and Gloo launch, its waits after backward), in a
    process of its own, over a Gloo group of one rank that the method takes for a world of two
    (so it launches; a world of one sends nothing). Rounds of `iters` timed iterations rotate
    through plain ones (forward, backward, one momentum-SGD step), WFBP's, and plain ones whose
    gradients then go out as commbench's bursts send them (`dist.all_reduce(async_op=True)` each,
    then every wait); on the thread's CPU (time.thread_time), (median WFBP iteration - median
    bare one) per message, at least 0. A one-worker microbenchmark, nothing sent. With
    `cache_dir`, kept there per model, batch, threads and rounds and read back after, as
    `measure_copy`'s timing is."""
    import multiprocessing as mp

    import torch

    if rounds < 3 or iters < 1:
        raise ValueError(f"rounds={rounds!r}, iters={iters!r} are invalid; accepted: rounds >= 3 (plain, WFBP and "
                         f"bare rotate), iters >= 1")
    threads = threads or torch.get_num_threads()
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{model}-b{local_batch}-cpu-t{threads}-r{rounds}x{iters}-launch.json"
        kept = _read_json(path)
        if isinstance(kept, dict) and isinstance(kept.get("launch_s"), (int, float)) and kept["launch_s"] >= 0 \
                and isinstance(kept.get("source"), str):
            return kept["launch_s"], kept["source"]
    hostcpu.refuse_if_others_measuring(f"an all-reduce's launch in {model}")
    spawn = mp.get_context("spawn")  # a process group of its own, whatever this process has
    got = spawn.SimpleQueue()
    proc = spawn.Process(target=_launch_rounds, args=(model, local_batch, threads, rounds, iters, got), daemon=True)
    proc.start()
    proc.join(LAUNCH_TIMEOUT_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise RuntimeError(f"measure_launch took over {LAUNCH_TIMEOUT_S:g} s; its process was killed")
    if proc.exitcode != 0 or got.empty():
        raise RuntimeError(f"measure_launch's process exited with {proc.exitcode} and no result")
    plain_s, wfbp_s, bare_s, messages = got.get()
    per_message = max(0.0, wfbp_s - bare_s) / messages
    source = (f"measured on the cpu at {threads} threads: the runtime's WFBP training {model} at batch {local_batch} "
              f"over a Gloo group of one rank (methods.wfbp, methods.transport.AllReduce), {messages} messages an "
              f"iteration; the thread's CPU {wfbp_s * 1e3:.2f} ms an iteration, {bare_s * 1e3:.2f} with commbench's "
              f"bare launches, {plain_s * 1e3:.2f} plain (medians, {rounds} rotating rounds of {iters}): "
              f"{per_message * 1e6:.1f} us a message beyond the bare launch")
    if path is not None:
        _write_json(path, {"launch_s": per_message, "source": source})
    return per_message, source


def _launch_rounds(model: str, local_batch: int, threads: int, rounds: int, iters: int, got) -> None:
    """`measure_launch`'s process: puts the median thread CPU of a plain, a WFBP and a bare
    iteration, and the messages of a WFBP iteration."""
    import time

    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf

    from ddlbench.config import conf_dir
    from ddlbench.driver import step
    from ddlbench.methods import plugin_class
    from ddlbench.methods.base import Context
    from ddlbench.trace import NullTracer

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cpu = torch.device("cpu")
        plain, plain_opt = _workload(model, local_batch, cpu)
        eager, eager_opt = _workload(model, local_batch, cpu)
        tracer = NullTracer()
        ctx = Context(rank=0, world=2, device=cpu, tracer=tracer, workload=eager, group=dist.group.WORLD,
                      control=dist.group.WORLD)
        sync = plugin_class("wfbp")(OmegaConf.load(conf_dir() / "method" / "wfbp-a2a.yaml"), ctx)
        sync.setup(eager.model)
        eager_opt = sync.wrap_optimizer(eager_opt)
        batches = [plain.make_batch(0, 0, b, cpu) for b in range(PROFILE_BATCHES)]
        params = [p for p in plain.model.parameters() if p.requires_grad]

        def bare_launches() -> None:  # as make commbench's per-tensor bursts launch and wait
            for work in [dist.all_reduce(p.grad, async_op=True) for p in reversed(params)]:
                work.wait()

        def plain_step(it: int) -> None:
            _plain_step(plain, plain_opt, batches[it % PROFILE_BATCHES])

        def bare_step(it: int) -> None:
            _plain_step(plain, plain_opt, batches[it % PROFILE_BATCHES], bare_launches)

        def eager_step(it: int) -> None:
            step(eager.model, eager, sync, eager_opt, batches[it % PROFILE_BATCHES], it, tracer)

        kinds = (plain_step, eager_step, bare_step)
        cpu_s: dict = {one: [] for one in kinds}
        it = 0
        for r in range(rounds):
            one = kinds[r % len(kinds)]
            for k in range(1 + iters):  # the first untimed
                t0 = time.thread_time()
                one(it)
                if k:
                    cpu_s[one].append(time.thread_time() - t0)
                it += 1
        messages = len(sync.groups)
        sync.close()
    finally:
        dist.destroy_process_group()
    got.put(tuple(statistics.median(cpu_s[one]) for one in kinds) + (messages,))


# measure_copy's two layouts of a fused message, (tensors, fp32 elements each): many small ones
# (the per-tensor cost) and a few large ones, larger than a CPU's caches (the bandwidth)
COPY_LAYOUTS = ((64, 16), (4, 1 << 21))
COPY_REPEATS = 15


def measure_copy(device: str = "cpu", threads: int | None = None, repeats: int = COPY_REPEATS,
                 cache_dir: Path | None = None) -> tuple[float, float, str]:
    """(seconds per tensor, bytes per second, source) of packing a fused message or unpacking it
    on `device` (the CPU; at `threads` intra-op threads, else this process's), timed with the
    runtime's own code (methods.grouped.pack and unpack) on one worker: the median of `repeats`
    packs and unpacks of each of COPY_LAYOUTS, half of one pack and one unpack each, solved for
    t = tensors x per-tensor + 2 bytes / bandwidth through both layouts. A microbenchmark of one
    worker, no communication. With `cache_dir`, kept there per device, threads and repeats and
    read back after (a bench's calibration, measured as it finishes: what its runs' machine
    gave then, and the same every time its runs are validated again); without, measured now."""
    import time

    import torch

    from ddlbench.methods.grouped import pack, unpack

    if device != "cpu":
        raise ValueError(f"device {device!r} is not measured for copies; accepted: cpu (a GPU's are its memory "
                         f"bandwidth)")
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"copy-{device}-t{threads or torch.get_num_threads()}-r{repeats}.json"
        kept = _read_json(path)
        if isinstance(kept, dict) and {"tensor_s", "Bps", "source"} <= kept.keys() and \
                isinstance(kept["tensor_s"], (int, float)) and kept["tensor_s"] >= 0 and \
                isinstance(kept["Bps"], (int, float)) and kept["Bps"] > 0:
            return kept["tensor_s"], kept["Bps"], kept["source"]
    hostcpu.refuse_if_others_measuring("a fused message's copies")
    times = []
    with torch_threads(threads):
        for k, n in COPY_LAYOUTS:
            tensors = [torch.ones(n) for _ in range(k)]
            buf = torch.empty(k * n)
            laps = []
            for _ in range(repeats + 1):  # the first untimed
                t0 = time.perf_counter()
                pack(tensors, buf)
                unpack(buf, tensors)
                laps.append((time.perf_counter() - t0) / 2)
            times.append(statistics.median(laps[1:]))
    per_tensor, bps = fit_copy(COPY_LAYOUTS, times)
    (k1, n1), (k2, n2) = COPY_LAYOUTS
    source = (f"measured on the {device}{f' at {threads} threads' if threads else ''}: the runtime's pack and unpack "
              f"(methods.grouped), medians of {repeats}, {k1} x {4 * n1} B {times[0] * 1e6:.1f} us and {k2} x "
              f"{4 * n2} B {times[1] * 1e6:.0f} us: {per_tensor * 1e6:.2f} us per tensor, {bps / 1e9:.2f} GB/s")
    if path is not None:
        _write_json(path, {"tensor_s": per_tensor, "Bps": bps, "source": source})
    return per_tensor, bps, source


def fit_copy(layouts, times_s: list[float]) -> tuple[float, float]:
    """(seconds per tensor, bytes per second) through two layouts' times, (tensors, fp32 elements
    each) each: t = tensors x per-tensor + 2 bytes / bandwidth (a read and a write), neither
    below zero."""
    (k1, n1), (k2, n2) = layouts
    b1, b2 = 4 * k1 * n1, 4 * k2 * n2
    det = k1 * 2 * b2 - k2 * 2 * b1
    per_byte = max(1e-15, (k1 * times_s[1] - k2 * times_s[0]) / det)
    per_tensor = max(0.0, (times_s[0] * 2 * b2 - times_s[1] * 2 * b1) / det)
    return per_tensor, 1 / per_byte


@contextmanager
def torch_threads(threads: int | None):
    """This process at `threads` intra-op threads (None or 0: as it is) for the block, as it was
    after."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def _neighbours(model: str, local_batch: int, threads: int | None, n: int, mode=None):
    """`n` processes, each training `model` at `threads` threads in a loop, from the moment each
    has run two steps (warm) until the block ends; none when n = 0. Yields a check that raises
    if one of them is no longer running (a measurement beside fewer is not the one asked for).
    `mode` (a shared integer of the spawn context, `machinery_s`): each step is a plain one
    while it is 0, a step of ByteScheduler at one worker (`_Queued`) while it is 1."""
    if n < 1:
        yield lambda: None
        return
    import multiprocessing as mp
    import time

    ctx = mp.get_context("spawn")
    ready, stop = ctx.Semaphore(0), ctx.Event()
    procs = []

    def dead() -> list:
        return [p.exitcode for p in procs if p.exitcode is not None]

    def check() -> None:
        if dead():
            raise RuntimeError(f"profile: a neighbour worker of {model} exited with {dead()} during the "
                               f"measurement; accepted: all {n} running throughout (run it again)")

    try:
        for _ in range(n):
            proc = ctx.Process(target=_neighbour, args=(model, local_batch, threads, ready, stop, mode), daemon=True)
            proc.start()
            procs.append(proc)  # once started: joining one that never started would hide why
        deadline, started = time.monotonic() + NEIGHBOUR_START_S, 0
        while started < n:
            if ready.acquire(timeout=0.5):
                started += 1
                continue
            if dead() or time.monotonic() > deadline:
                raise RuntimeError(f"profile: {n - started} of {n} neighbour worker(s) of {model} not running "
                                   f"({f'exited with {dead()}' if dead() else f'after {NEIGHBOUR_START_S:.0f} s'})")
        yield check
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _neighbour(model: str, local_batch: int, threads: int | None, ready, stop, mode=None) -> None:
    import torch

    from ddlbench.launch.pids import die_with_parent

    # a measurer ended by SIGTERM (timeout, a CI cancel) never sets `stop`: without this, its
    # neighbours, training in a loop, outlived it for good
    die_with_parent()

    if threads:
        torch.set_num_threads(threads)
    w, opt = _workload(model, local_batch, torch.device("cpu"))
    queued = None if mode is None else _Queued(model, local_batch)
    it = 0
    try:
        while not stop.is_set():
            batch = w.make_batch(0, 0, it, torch.device("cpu"))
            if queued is not None and mode.value:
                queued.step(batch, it)
            else:
                opt.zero_grad(set_to_none=True)
                w.loss(w.model, batch).backward()
                opt.step()
            it += 1
            if it == 2:
                ready.release()
    finally:
        if queued is not None:
            queued.close()


def _plain_step(w, opt, batch, after_backward=None) -> None:
    """One plain iteration of workload `w`: forward, backward, `after_backward()` where given,
    one step of `opt`."""
    opt.zero_grad(set_to_none=True)
    w.loss(w.model, batch).backward()
    if after_backward is not None:
        after_backward()
    opt.step()


def _workload(model: str, local_batch: int, dev):
    """The model of conf/model/<model>.yaml on `dev` and its momentum-SGD optimizer."""
    import torch
    from omegaconf import OmegaConf

    from ddlbench import models
    from ddlbench.config import conf_dir

    w = models.build(OmegaConf.load(conf_dir() / "model" / f"{model}.yaml"), local_batch, seed=0)
    w.model.to(dev)
    return w, torch.optim.SGD(w.model.parameters(), lr=0.01, momentum=0.9)


class _Landing:
    """`machinery_s`' transport: a world of one whose every partition lands on a completion
    thread of its own, in launch order, where the update it completes then runs, as every
    ByteScheduler partition does at two workers or more (`transport.AllReduce`'s completion
    thread; the PS transports' receiving threads). One worker of the real transport completes
    each at once on the dispatcher's thread instead (`_alone`): 1-2 ms less per tiny-resnet
    iteration beside other workers, a thread fewer wanting the GIL."""

    error = None

    def __init__(self):
        import queue

        from ddlbench.methods.base import start_thread

        self._landing = queue.SimpleQueue()
        self._thread = start_thread(self._complete, "landing")

    def prepare(self, message_numels: list[int]) -> None:
        pass

    def reduce_async(self, flat, *, on_done=None, on_pushed=None, **_):
        for then in (on_pushed, on_done):
            if then is not None:
                self._landing.put(then)

    def _complete(self) -> None:
        while (then := self._landing.get()) is not None:
            then()

    def close(self) -> None:
        self._landing.put(None)
        self._thread.join(timeout=30)


class _Queued:
    """A worker of `model` whose steps run the real `methods.bytescheduler.ByteScheduler` at one
    worker, on the CPU, its partitions landing on `_Landing`'s thread: the step `machinery_s`
    times, and its neighbours take in ByteScheduler's rounds."""

    def __init__(self, model: str, local_batch: int):
        import torch
        from omegaconf import OmegaConf

        from ddlbench.config import conf_dir
        from ddlbench.methods import plugin_class
        from ddlbench.methods.base import Context
        from ddlbench.trace import NullTracer

        self.w, _ = _workload(model, local_batch, torch.device("cpu"))
        self.tracer = NullTracer()
        ctx = Context(rank=0, world=1, device=torch.device("cpu"), tracer=self.tracer,
                      extra={"optimizer": OmegaConf.create({"lr": 0.01, "momentum": 0.9})})  # `_workload`'s SGD
        self.sync = plugin_class("bytescheduler")(OmegaConf.load(conf_dir() / "method" / "bytescheduler-a2a.yaml"),
                                                  ctx, _Landing())
        self.sync.setup(self.w.model)

    def step(self, batch, iteration: int) -> None:
        from ddlbench.driver import step

        step(self.w.model, self.w, self.sync, None, batch, iteration, self.tracer)

    def close(self) -> None:
        self.sync.close()


MACHINERY_ROUNDS = 6   # `machinery_s`: alternating rounds of plain and ByteScheduler iterations
MACHINERY_ITERS = 40   # timed iterations per round (tiny-resnet here: about 1 s per pair of rounds)
MACHINERY_SETTLE = 2   # iterations of each round untimed: the neighbours switch at their next step


def machinery_s(model: str, local_batch: int, threads: int | None = None, sharers: int = 1, cache: bool = True,
                cache_dir: Path | None = None, rounds: int = MACHINERY_ROUNDS, iters: int = MACHINERY_ITERS) -> dict:
    """ByteScheduler's own machinery in this runtime, per iteration of one worker on the CPU
    (`simulate.Options.bytescheduler_cpu_s`): the mean iteration of the real
    `methods.bytescheduler.ByteScheduler` at one worker (`_Queued`: its dispatcher thread,
    queue, per-parameter updates and forward pre-hooks, all under one GIL; nothing is sent, but
    every partition lands on a completion thread, `_Landing`, as it does at two workers or more)
    less the mean plain iteration (forward, backward, one momentum-SGD step), in `rounds`
    alternating rounds of `iters` timed iterations each, so that the machine's drift falls on
    both alike. `threads` and `sharers` as in `measured`: where a run's workers share this
    machine's cores, `sharers - 1` neighbours run beside it, each doing what it does (plain
    steps in the plain rounds, ByteScheduler's in its rounds), as the run's other workers would:
    the scheduler shares the cores out by thread, so beside plain neighbours the machinery's
    threads would take their time rather than their own worker's (tiny-resnet at one thread,
    beside three: 9.5 ms beside plain neighbours, 16-17 ms beside its like; 8.7-8.9 ms either way
    beside one). Both models start alike and take the
    same batches, so their parameters must end alike (else it raises: what was timed was not
    ByteScheduler training). A pair of rounds that lost metrics.DISTURBED_STEAL_SHARE of the
    cores or more to the hypervisor's other guests is left out while another is left (and the
    source says so): the difference would time the neighbour. A one-worker microbenchmark, no
    multi-worker result. Returns {"machinery_s" (>= 0), "plain_s", "bytescheduler_s", "rounds"
    (each pair's means and stolen share), "source"}; cached per model, batch,
    threads, sharers and rounds, in `cache_dir` (default CACHE_DIR)."""
    import multiprocessing as mp
    import time

    import torch

    from ddlbench import metrics

    if sharers < 1 or rounds < 1 or iters < 1:
        raise ValueError(f"sharers={sharers!r}, rounds={rounds!r}, iters={iters!r} are invalid; accepted: each >= 1")
    threads = threads or torch.get_num_threads()
    path = Path(cache_dir or CACHE_DIR) / f"{model}-b{local_batch}-cpu-t{threads}-s{sharers}-r{rounds}x{iters}-machinery.json"
    kept = _read_json(path) if cache else None
    if kept is not None:
        return kept
    hostcpu.refuse_if_others_measuring(f"ByteScheduler's machinery in {model}")
    cpu = torch.device("cpu")
    queued = None
    mode = mp.get_context("spawn").Value("i", 0)
    try:
        with torch_threads(threads), _neighbours(model, local_batch, threads, sharers - 1, mode) as check:
            plain, opt = _workload(model, local_batch, cpu)
            queued = _Queued(model, local_batch)
            batches = [plain.make_batch(0, 0, b, cpu) for b in range(PROFILE_BATCHES)]

            def plain_step(it: int) -> None:
                _plain_step(plain, opt, batches[it % PROFILE_BATCHES])

            def queued_step(it: int) -> None:
                queued.step(batches[it % PROFILE_BATCHES], it)

            def round_s(one, neighbours: int, first: int, n: int) -> list[float]:
                mode.value = neighbours
                out = []
                for it in range(first, first + n):
                    t0 = time.perf_counter()
                    one(it)
                    out.append(time.perf_counter() - t0)
                return out

            pairs = []  # (plain steps, ByteScheduler's steps, cores stolen meanwhile) per pair of rounds
            done = 0  # both models' iterations so far: the same batches in the same order
            for _ in range(rounds):
                mark = hostcpu.steal_mark()
                plain_round = round_s(plain_step, 0, done, MACHINERY_SETTLE + iters)[MACHINERY_SETTLE:]
                pairs.append((plain_round, round_s(queued_step, 1, done, MACHINERY_SETTLE + iters)[MACHINERY_SETTLE:],
                              hostcpu.stolen_share(mark)))
                done += MACHINERY_SETTLE + iters
            check()
            queued.sync.flush()
            # the same steps on the same batches: ByteScheduler's parameters are plain SGD's
            same = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6)
                       for a, b in zip(plain.model.parameters(), queued.w.model.parameters()))
    finally:
        if queued is not None:
            queued.close()
    if not same:
        raise RuntimeError(f"profile: ByteScheduler's iterations of {model} did not train as plain SGD's did "
                           f"(a world of one must update every parameter as SGD does); its timing is not kept")
    beside = f", beside {sharers - 1} more worker(s) doing the same on this machine's cores" if sharers > 1 else ""
    # a pair of rounds during which the hypervisor gave other guests DISTURBED_STEAL_SHARE of the
    # cores or more timed them too (steal comes in bursts, so one round can take it all): left
    # out while any other pair is left
    kept = [p for p in pairs if not metrics.disturbed(p[2])] or pairs
    plain_s = [t for p in kept for t in p[0]]
    queued_s = [t for p in kept for t in p[1]]
    left_out = len(pairs) - len(kept)
    out = {"machinery_s": max(0.0, statistics.mean(queued_s) - statistics.mean(plain_s)),
           "plain_s": statistics.mean(plain_s), "bytescheduler_s": statistics.mean(queued_s),
           "rounds": [{"plain_s": statistics.mean(a), "bytescheduler_s": statistics.mean(b), "steal_share": st}
                      for a, b, st in pairs],
           "source": f"measured: ByteScheduler at one worker on the cpu at {threads} threads{beside}, against plain "
                     f"iterations, {rounds} alternating rounds of {iters}"
                     + (f" ({left_out} pair(s) of rounds left out: the hypervisor gave other guests at least "
                        f"{metrics.DISTURBED_STEAL_SHARE:.0%} of the cores meanwhile)" if left_out else "")}
    if cache:
        _write_json(path, out)
    return out


def _measure(model: str, local_batch: int, dev, iters: int, warmup: int, min_window_s: float = 0.0,
             clock=None):
    """(profile of per-layer medians, every plain iteration's wall time) over at least `iters`
    hooked and `iters` plain iterations, alternating, after `warmup` and at least `min_window_s`
    seconds. Every time comes from
    `clock` (methods.mgwfbp.clock_for, as MG-WFBP profiles: the host's on a CPU; on a GPU a CUDA
    event per mark, recorded on the stream the kernels run on and read after the window, so the
    hooks never wait for the device and the iterations keep the overlap of kernel launches with
    the device's work that a run has. Synchronising in every hook instead measured ResNet-50 at
    batch 64 on an H100 at 1,036 samples/s, against 1,650 for ddlbench's one worker). The hooks
    are registered before a hooked iteration's first mark and removed before a plain one's."""
    import time

    import torch

    from ddlbench.methods.mgwfbp import clock_for

    clock = clock or clock_for(dev)
    on_gpu = nullcontext()
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as the run sets it (driver)
        on_gpu = torch.cuda.device(dev)  # the events go to this GPU's streams (cuda:N too), not cuda:0's
    w, opt = _workload(model, local_batch, dev)
    # batches made before the clock, as the run makes them (driver): making one (ResNet-50 at 64:
    # 38 MB drawn on the host, then copied) inside the loop starves the GPU at every iteration start
    batches = [w.make_batch(0, 0, b, dev) for b in range(PROFILE_BATCHES)]
    # Iterations alternate: hooked ones give each layer's times, plain ones (no hooks, no marks
    # but the iteration's own) the whole iteration. Hooks cost host time, a mark each: on a GPU
    # whose launches keep only just ahead, that time idles it. ResNet-50 at batch 64 on an H200,
    # every iteration hooked, iterated at 0.77 of the run's rate (1,506 against 1,949 samples/s);
    # alternating, the plain iterations read 32.0-32.3 ms, and the hooked ones' layers summed to
    # 32.6 ms, the launches kept ahead by the plain iterations' slack.
    timed = []  # per measured hooked iteration: (its pass's marks, step start, step end)
    plain = []  # per measured plain iteration: (iteration start, step start, iteration end)
    it, since = 0, None
    with on_gpu, _Hooked(w, clock.mark) as hooked:
        while (it < warmup or min(len(timed), len(plain)) < iters
               or time.perf_counter() - since < min_window_s):
            batch = batches[it % PROFILE_BATCHES]
            if it == warmup:
                since = time.perf_counter()
            with_hooks = it % 2 == 0
            if with_hooks:  # (un)registering is host work before the iteration's first mark
                hooked.attach()
            else:
                hooked.detach()
            start = clock.mark()
            opt.zero_grad(set_to_none=True)
            marks = hooked.run(batch) if with_hooks else hooked.run_plain(batch)
            t = clock.mark()
            opt.step()
            end = clock.mark()
            if it >= warmup and with_hooks:
                timed.append((marks, t, end))
            elif it >= warmup:
                plain.append((start, t, end))
            it += 1
        clock.settle()
    runs = [hooked.profile(model, marks, clock.seconds) for marks, _, _ in timed]
    steps = [clock.seconds(t, end) for _, t, end in timed + plain]
    whole = [clock.seconds(start, end) for start, _, end in plain]
    mid = statistics.median
    first, total = runs[0], sum(runs[0].numels)
    step_s = mid(steps)
    out = Profile(model, local_batch, first.names, first.numels, first.element_size, first.ready_names,
                  [mid([r.ready_s[i] for r in runs]) for i in range(len(first.names))],
                  [mid([r.need_s[i] for r in runs]) for i in range(len(first.names))],
                  mid([r.forward_s for r in runs]), mid([r.backward_s for r in runs]),
                  [step_s * n / total for n in first.numels], "measured", 0.0, buffer_buckets(w.model))
    out.samples_per_sec_1 = local_batch / out.compute_s
    return out, whole


def derived(model: str, local_batch: int, samples_per_sec_1: float, cache: bool = True) -> Profile:
    """The roofline profile scaled to a stated one-worker throughput (cached per model, batch)."""
    path = CACHE_DIR / f"{model}-b{local_batch}.json"
    raw = _read_cached(path) if cache else None
    if raw is None:
        raw = roofline(model, local_batch)
        if cache:
            _write_cached(path, raw)
    return raw.scaled(samples_per_sec_1, f"derived: roofline per operator, scaled to {samples_per_sec_1:g} samples/s on one worker")


def _read_json(path: Path) -> dict | None:
    """A cached file's fields, or None where there is none or it does not parse (then it is made
    again)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_cached(path: Path) -> Profile | None:
    """A cached profile, or None where there is none or it does not parse (then it is made again)."""
    fields = _read_json(path)
    if fields is None:
        return None
    try:
        # a profile cached before its buffers (or, measured, its iterations) were recorded is made
        # again, not read as having none
        source = fields.get("source", "")
        if "buffer_bytes" not in fields or (source.startswith("measured") and "iteration_s" not in fields):
            return None
        if source.startswith("measured: one worker on cuda") and CUDA_HOOKS not in source:
            return None  # timed otherwise (a synchronisation in every hook, a batch made in every iteration)
        return Profile(**fields)
    except (ValueError, TypeError):
        return None


def _write_cached(path: Path, prof: Profile) -> None:
    _write_json(path, asdict(prof))


def _write_json(path: Path, fields: dict) -> None:
    """Written whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields))
    tmp.replace(path)


# -- calibration: the one-worker rows of the published table, and nothing else --------------------
def one_worker_rows(path: Path = REFERENCE_CSV):
    """The published table's single-worker rows: the only rows calibration may read. Every
    multi-worker row is validation data and is dropped here, before anything parses its numbers."""
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["workers"].strip() != "1":
                continue
            yield row


def one_worker_samples_per_sec(model: str, local_batch: int, path: Path = REFERENCE_CSV) -> float:
    """The study's one-GPU throughput of `model` at `local_batch` (RTX 2080 Ti)."""
    values = {float(r["samples_per_sec"]) for r in one_worker_rows(path)
              if r["model"].replace("_", "-") == model and int(r["local_batch"]) == local_batch}
    if not values:
        known = sorted({(r["model"].replace("_", "-"), int(r["local_batch"])) for r in one_worker_rows(path)})
        raise ValueError(f"no published one-worker throughput for model={model!r} at local batch {local_batch}; "
                         f"accepted: {', '.join(f'{m} at {b}' for m, b in known)}, or state one (--one-worker; ONE_WORKER=<samples/s> with make)")
    if len(values) > 1:
        raise ValueError(f"published one-worker rows disagree for {model} at {local_batch}: {sorted(values)}")
    return values.pop()
