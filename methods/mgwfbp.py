"""MG-WFBP: merged-gradient wait-free backpropagation (Shi, Wang, Chu, Li, INFOCOM 2019).

Notation (gradient-ready order, k = 0 is the last layer, whose gradient backward produces first):
  t_b[k]      backward time of tensor k (from the previous tensor's gradient to this one's)
  ready[k]    = t_b[0] + ... + t_b[k]: when gradient k exists
  t_c(bytes)  = a + b * bytes: the alpha-beta model of one all-reduce
A group's all-reduce starts when its last gradient is ready and the previous all-reduce has
ended: start = max(end_prev, ready[last]); end = start + t_c(group bytes).

The rule: walking from the first-ready tensor on, tensor k+1 joins the group that ends at k when
waiting for it costs less than the start-up time a that one message fewer saves:
    max(0, ready[k+1] - start_if_sent_now) < a.
Each merge ends strictly earlier than the unmerged pair would (the wait is < a, and a is paid
once instead of twice), so the predicted finish never exceeds WFBP's. a = 0 merges nothing;
a larger than the whole backward pass merges everything. This walk is the paper's O(L^2)
re-simulation done in one pass: a merge only changes the start of the group being built.

The study's implementation adds one rule (HKBU-HPML/ddl-benchmarks, mgwfbp/
hv_distributed_optimizer.py, `_generate_groups_mgwfbp`: `if not merged and p[l] < 8192`, where
p[l] is the element count of the group being built): a group of fewer than `min_group_numel`
elements always takes the next tensor, whatever the model says, so every group but the last
holds at least that many. The unit is elements, not bytes, as upstream counts `numel()` (its
fusion threshold for BSP and WFBP, `_generate_groups_with_threshold`, counts elements too).
Shi's own MG-WFBP repository (HKBU-HPML/MG-WFBP, distributed_optimizer.py) has no such rule:
`min_group_numel = 0` is the paper's rule alone. A merge made by this rule may finish later
than WFBP in the model; upstream accepts that to avoid tiny messages.

Inputs, measured at start-up:
- t_b: per-tensor backward times from a few local backward passes, stamped in each gradient's
  post-accumulate hook. On a GPU a host clock in a hook reads the kernel's launch, not its end,
  so there each stamp is a CUDA event on the current stream, read after the pass (DESIGN
  section 6; upstream's `profiling.py` calls `torch.cuda.synchronize()` in every hook instead).
  On a CPU an op has finished when it returns, and host time is the gradient's time.
- a, b: a fit of all-reduce times over message sizes (`fit_alpha_beta`), unless configured.
  The study's own runs fitted nothing: its benchmark scripts pass the profiled layer times to
  the optimizer, which then skips `_benchmark_communication` and takes a, b from a table by
  worker count (`p_alpha_beta_56Gbps` with --rdma, `p_alpha_beta_10Gbps` without; 32 workers:
  a = 4.06e-4 s, b = 4.91e-10 s/byte with --rdma; a = 4.04e-3 s, b = 8.64e-10 s/byte
  without). Setting method.alpha_s and method.beta_s_per_byte reproduces such a choice.
"""
from __future__ import annotations

import functools
import statistics
import sys
import time

import torch
import torch.distributed as dist

from .grouped import GroupedSync

# Fitted alpha under this fraction of the smallest measured all-reduce is "near 0" (see
# `alpha_warning`).
ALPHA_NEAR_ZERO_FRACTION = 0.01


# -- the pure model ---------------------------------------------------------------------------
def merge_groups(tb_s, sizes_bytes, alpha_s: float, beta_s_per_byte: float, numels=None,
                 min_group_numel: int = 0) -> list[list[int]]:
    """MG-WFBP groups (lists of indices in gradient-ready order) for the alpha-beta model; with
    `min_group_numel` > 0 (elements; `numels` gives each tensor's), the study's small-group rule
    too."""
    n = len(tb_s)
    if n != len(sizes_bytes):
        raise ValueError(f"{n} backward times for {len(sizes_bytes)} tensors")
    if min_group_numel < 0:
        raise ValueError(f"min_group_numel={min_group_numel} is invalid; accepted: 0 (off) or a positive element count")
    if min_group_numel and (numels is None or len(numels) != n):
        got = "none" if numels is None else len(numels)
        raise ValueError(f"min_group_numel={min_group_numel} needs {n} element counts (numels); got {got}")
    if n == 0:
        return []
    numels = [0] * n if numels is None else list(numels)
    ready = _cumsum(tb_s)
    groups = [[0]]
    group_bytes, group_numel = sizes_bytes[0], numels[0]
    end_prev = 0.0
    for k in range(n - 1):
        start_now = max(end_prev, ready[k])
        wait = max(0.0, ready[k + 1] - start_now)
        if wait < alpha_s or group_numel < min_group_numel:
            groups[-1].append(k + 1)
            group_bytes += sizes_bytes[k + 1]
            group_numel += numels[k + 1]
        else:
            end_prev = start_now + alpha_s + beta_s_per_byte * group_bytes
            groups.append([k + 1])
            group_bytes, group_numel = sizes_bytes[k + 1], numels[k + 1]
    return groups


def comm_timeline(tb_s, sizes_bytes, groups, alpha_s: float, beta_s_per_byte: float):
    """Predicted (start_s, end_s) of each group's all-reduce, with backward starting at 0."""
    ready = _cumsum(tb_s)
    spans = []
    end_prev = 0.0
    for members in groups:
        start = max(end_prev, ready[members[-1]])
        end_prev = start + alpha_s + beta_s_per_byte * sum(sizes_bytes[i] for i in members)
        spans.append((start, end_prev))
    return spans


def fit_alpha_beta(sizes_bytes, times_s) -> tuple[float, float]:
    """Fit t = a + b * bytes by least *relative* squares, sum(((a + b x - t) / t)^2), over
    a, b >= 0: weighted least squares with weights 1 / t^2.

    Why relative: the merge rule turns on a, the start-up time, which only the small messages
    show. Ordinary least squares over 32 KiB to 2 MiB lets the largest messages set the line, and a then absorbs their residuals: it can come out near 0 or
    negative, and MG-WFBP silently becomes WFBP. Relative errors weigh every size alike.
    Upstream (HKBU-HPML/ddl-benchmarks mgwfbp/hv_distributed_optimizer.py,
    `_benchmark_communication`) fits sklearn's LinearRegression (ordinary least squares, no
    clamp) of the mean time against bytes for all-reduces of 8,192 * i fp32 elements,
    i = 1..63 (32 KiB to 2,016 KiB, mgwfbp/profiling.py `CommunicationProfiler`).

    With a constraint active the optimum lies on that edge (the problem is convex): b < 0 gives
    the best constant, a < 0 the best line through the origin."""
    if len(sizes_bytes) != len(times_s) or len(sizes_bytes) < 2:
        raise ValueError(f"fit needs at least 2 (bytes, seconds) pairs; got {len(sizes_bytes)} sizes, {len(times_s)} times")
    if min(times_s) <= 0:
        raise ValueError(f"measured time {min(times_s)!r} s is invalid for a relative fit; accepted: > 0")
    w = [1.0 / t**2 for t in times_s]
    sw = sum(w)
    mx = sum(wi * x for wi, x in zip(w, sizes_bytes)) / sw
    my = sum(wi * t for wi, t in zip(w, times_s)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, sizes_bytes))
    sxy = sum(wi * (x - mx) * (t - my) for wi, x, t in zip(w, sizes_bytes, times_s))
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    if b < 0:
        return my, 0.0
    if a < 0:
        v = [x / t for x, t in zip(sizes_bytes, times_s)]
        return 0.0, sum(v) / sum(vi * vi for vi in v)
    return a, b


def alpha_warning(alpha_s: float, times_s) -> str | None:
    """A warning when a fitted alpha is near 0: under ALPHA_NEAR_ZERO_FRACTION (1%) of the
    smallest measured all-reduce time.

    Why that bound: the rule merges only when the next gradient comes within alpha, so an alpha
    that small merges (nearly) nothing and MG-WFBP runs as WFBP; and a start-up time under 1%
    of the shortest message measured is below what repeated timings of that message resolve
    (their spread is typically several percent), so the fit cannot tell it from 0."""
    smallest = min(times_s)
    if alpha_s < ALPHA_NEAR_ZERO_FRACTION * smallest:
        return (f"MG-WFBP: fitted alpha_s={alpha_s:.3g} is under {ALPHA_NEAR_ZERO_FRACTION:.0%} of the smallest "
                f"measured all-reduce ({smallest:.3g} s), so the merge rule will (nearly) never merge and MG-WFBP "
                f"runs as WFBP; set method.alpha_s to choose the start-up time")
    return None


def bench_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """The microbenchmark's message sizes: multiples of `min_bytes` up to `max_bytes`, as
    upstream's evenly spaced grid (8,192 * i fp32 elements, i = 1..63)."""
    if min_bytes < 4 or max_bytes < min_bytes:
        raise ValueError(f"bench_min_bytes={min_bytes}, bench_max_bytes={max_bytes} are invalid; "
                         f"accepted: 4 <= bench_min_bytes <= bench_max_bytes")
    return [min_bytes * i for i in range(1, max_bytes // min_bytes + 1)]


def backward_times(samples, n: int, seconds) -> tuple[list[int], list[float]]:
    """The ready order and per-tensor backward times t_b from profiled backward passes.

    samples: one (start, {tensor index: mark}) per pass, each mark taken when that tensor's
    gradient was accumulated; seconds(a, b): seconds from mark a to mark b. The order is the
    first pass's; t_b[k] is the median over passes of ready[k] - ready[k-1] (ready[-1] = the
    start). A tensor that got no gradient goes last, with t_b = 0."""
    start0, first = samples[0]
    since_start = {i: seconds(start0, m) for i, m in first.items()}
    order = sorted(since_start, key=since_start.get) + [i for i in range(n) if i not in since_start]
    per_pass = []
    for start, marks in samples:
        ready = {i: seconds(start, m) for i, m in marks.items()}
        prev, deltas = 0.0, []
        for i in order:
            t = ready.get(i, prev)
            deltas.append(max(0.0, t - prev))
            prev = max(prev, t)
        per_pass.append(deltas)
    return order, [statistics.median(col) for col in zip(*per_pass)]


def _cumsum(xs):
    out, total = [], 0.0
    for x in xs:
        total += x
        out.append(total)
    return out


# -- profiling the backward pass ---------------------------------------------------------------
class HostClock:
    """perf_counter marks, for CPUs: an op there has finished when it returns."""

    name = "host"

    def mark(self) -> float:
        return time.perf_counter()

    def settle(self) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return end - start


class CudaEventClock:
    """A timing CUDA event per mark, recorded on the current stream: in a gradient hook that is
    the stream autograd ran the gradient's kernels on, so the event's time is when the gradient
    was there, not when its kernel was launched. Marks are read only after `settle()`.

    `event` and `synchronize` default to torch.cuda's; a CPU test passes stand-ins."""

    name = "cuda_events"

    def __init__(self, device, event=None, synchronize=None):
        self.device = device
        self._event = event or functools.partial(torch.cuda.Event, enable_timing=True)
        self._synchronize = synchronize or torch.cuda.synchronize

    def mark(self):
        event = self._event()
        event.record()
        return event

    def settle(self) -> None:
        self._synchronize(self.device)

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def clock_for(device):
    return CudaEventClock(device) if device.type == "cuda" else HostClock()


def profile_backward(params, make_loss, passes: int, clock) -> tuple[list[int], list[float]]:
    """Time each gradient's arrival over `passes` backward passes, after one untimed pass that
    warms up allocators and kernels; no communication. make_loss(i) returns pass i's loss.
    Returns `backward_times`' (order, t_b), order indexing `params`.

    Each hooked pass is followed by a plain one (no hooks; marks at its start and end only), and
    t_b is scaled to sum to the plain passes' median backward. A mark costs host time, which
    on a GPU whose launches only just keep ahead idles it: a measured profile of ResNet-50 at
    batch 64 on an H200, every iteration hooked, iterated at 0.77 of the run's rate
    (predict.profile._measure alternates likewise). The hooks give the shape, the plain passes
    the length, as the run's backward has it (its own hooks only count gradients)."""
    marks: dict[int, object] = {}

    def stamp(i: int) -> None:
        if i not in marks:  # the first accumulation is when the gradient exists
            marks[i] = clock.mark()

    handles: list = []
    samples, plain_s = [], []
    try:
        for rep in range(1 + passes):
            for with_hooks in (True, False):
                if with_hooks:
                    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: stamp(i))
                               for i, p in enumerate(params)]
                loss = make_loss(2 * rep + (not with_hooks))
                marks.clear()
                start = clock.mark()
                loss.backward()
                end = clock.mark()
                clock.settle()
                for h in handles:
                    h.remove()
                handles = []
                if rep > 0 and with_hooks:
                    samples.append((start, dict(marks)))
                elif rep > 0:
                    plain_s.append(clock.seconds(start, end))
    finally:
        for h in handles:
            h.remove()
        for p in params:
            p.grad = None
    order, tb = backward_times(samples, len(params), clock.seconds)
    total = sum(tb)
    k = statistics.median(plain_s) / total if total > 0 else 1.0
    return order, [t * k for t in tb]


# -- the plug-in ------------------------------------------------------------------------------
class MGWFBP(GroupedSync):
    eager = True

    def choose_groups(self, model):
        cfg, ctx = self.cfg, self.ctx
        params = [p for _, p in self.named]
        w = ctx.workload
        clock = clock_for(ctx.device)

        def make_loss(rep):
            return w.loss(model, w.make_batch(ctx.seed + 7919, ctx.rank, rep, ctx.device))

        order, tb = profile_backward(params, make_loss, int(cfg.profile_iters), clock)
        a, b = cfg.alpha_s, cfg.beta_s_per_byte
        bench, warnings = None, []
        if a is None or b is None:
            bench = self._microbenchmark()
            fit_a, fit_b = fit_alpha_beta([s for s, _ in bench], [t for _, t in bench])
            if a is None:
                a = fit_a
                near_zero = alpha_warning(a, [t for _, t in bench])
                warnings = [near_zero] if near_zero else []
            b = fit_b if b is None else b
        # Rank 0 decides, everyone follows: profiles differ slightly across ranks.
        choice = [order, tb, float(a), float(b), bench, warnings]
        if ctx.world > 1:
            dist.broadcast_object_list(choice, src=0, group=ctx.control)
        order, tb, a, b, bench, warnings = choice
        if ctx.rank == 0:
            for m in warnings:
                print(f"ddlbench: warning: {m}", file=sys.stderr, flush=True)
        self.named = [self.named[i] for i in order]
        self.alpha_s, self.beta_s_per_byte, self.tb_s, self.bench = a, b, tb, bench
        self.warnings, self.profile_clock = warnings, clock.name
        self.min_group_numel = int(cfg.min_group_numel)
        return merge_groups(tb, self._tensor_bytes(), a, b, self._tensor_numels(), self.min_group_numel)

    def _tensor_bytes(self) -> list[int]:
        return [p.numel() * p.element_size() for _, p in self.named]

    def _tensor_numels(self) -> list[int]:
        return [p.numel() for _, p in self.named]

    def _microbenchmark(self):
        """(bytes, seconds) of a blocking fp32 all-reduce for each of `bench_sizes`: the median
        of `bench_reps` timed calls after one untimed, each started together after a barrier."""
        cfg = self.cfg
        out = []
        for size in bench_sizes(int(cfg.bench_min_bytes), int(cfg.bench_max_bytes)):
            t = torch.ones(max(1, size // 4), dtype=torch.float32, device=self.ctx.device)
            reps = []
            for rep in range(1 + int(cfg.bench_reps)):
                if self.ctx.world > 1:
                    dist.barrier(group=self.ctx.group)
                _sync_device(self.ctx.device)
                t0 = time.perf_counter()
                if self.ctx.world > 1:
                    self.transport.benchmark(t)
                _sync_device(self.ctx.device)  # completion, not launch: host time is then right
                if rep > 0:
                    reps.append(time.perf_counter() - t0)
            out.append((t.numel() * 4, statistics.median(reps)))
        return out

    def describe(self) -> dict:
        """Everything the groups were derived from, so a reader can re-derive them with
        `merge_groups(tb_s, tensor_bytes, alpha_s, beta_s_per_byte, tensor_numels,
        min_group_numel)`: all lists in gradient-ready order."""
        d = super().describe()
        d.update(
            alpha_s=self.alpha_s,
            beta_s_per_byte=self.beta_s_per_byte,
            tb_s=self.tb_s,
            profile_clock=self.profile_clock,
            tensor_bytes=self._tensor_bytes(),
            tensor_numels=self._tensor_numels(),
            min_group_numel=self.min_group_numel,
            group_tensors=[[self.named[i][0] for i in m] for m in self.groups],
            microbenchmark=self.bench,
            warnings=self.warnings,
        )
        return d


def _sync_device(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
