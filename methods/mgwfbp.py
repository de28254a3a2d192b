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
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .grouped import GroupedSync


# -- the pure model ---------------------------------------------------------------------------
def merge_groups(tb_s, sizes_bytes, alpha_s: float, beta_s_per_byte: float) -> list[list[int]]:
    """MG-WFBP groups (lists of indices in gradient-ready order) for the alpha-beta model."""
    n = len(tb_s)
    if n != len(sizes_bytes):
        raise ValueError(f"{n} backward times for {len(sizes_bytes)} tensors")
    if n == 0:
        return []
    ready = _cumsum(tb_s)
    groups = [[0]]
    group_bytes = sizes_bytes[0]
    end_prev = 0.0
    for k in range(n - 1):
        start_now = max(end_prev, ready[k])
        wait = max(0.0, ready[k + 1] - start_now)
        if wait < alpha_s:
            groups[-1].append(k + 1)
            group_bytes += sizes_bytes[k + 1]
        else:
            end_prev = start_now + alpha_s + beta_s_per_byte * group_bytes
            groups.append([k + 1])
            group_bytes = sizes_bytes[k + 1]
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
    """Least-squares fit of t = a + b * bytes, clamped to non-negative values."""
    n = len(sizes_bytes)
    mx = sum(sizes_bytes) / n
    my = sum(times_s) / n
    sxx = sum((x - mx) ** 2 for x in sizes_bytes)
    b = sum((x - mx) * (y - my) for x, y in zip(sizes_bytes, times_s)) / sxx if sxx else 0.0
    b = max(b, 0.0)
    a = max(my - b * mx, 0.0)
    return a, b


def _cumsum(xs):
    out, total = [], 0.0
    for x in xs:
        total += x
        out.append(total)
    return out


# -- the plug-in ------------------------------------------------------------------------------
class MGWFBP(GroupedSync):
    eager = True

    def choose_groups(self, model):
        cfg = self.cfg
        sizes = [p.numel() * p.element_size() for _, p in self.named]
        order, tb = self._profile_backward(model)
        a, b = cfg.alpha_s, cfg.beta_s_per_byte
        bench = None
        if a is None or b is None:
            bench = self._microbenchmark()
            fit_a, fit_b = fit_alpha_beta([s for s, _ in bench], [t for _, t in bench])
            a = fit_a if a is None else a
            b = fit_b if b is None else b
        # Rank 0 decides, everyone follows: profiles differ slightly across ranks.
        choice = [order, tb, float(a), float(b), bench]
        if self.ctx.world > 1:
            dist.broadcast_object_list(choice, src=0, group=self.ctx.control)
        order, tb, a, b, bench = choice
        self.named = [self.named[i] for i in order]
        sizes = [sizes[i] for i in order]
        self.alpha_s, self.beta_s_per_byte, self.tb_s, self.bench = a, b, tb, bench
        return merge_groups(tb, sizes, a, b)

    def _profile_backward(self, model):
        """Time each gradient's arrival over a few local backward passes (no communication).

        Returns the observed ready order (indices into self.named) and the median per-tensor
        backward time t_b in that order."""
        params = [p for _, p in self.named]
        stamps: dict[int, float] = {}
        handles = [
            p.register_post_accumulate_grad_hook(lambda _p, i=i: stamps.__setitem__(i, stamps.get(i) or time.perf_counter()))
            for i, p in enumerate(params)
        ]
        w = self.ctx.workload
        samples = []
        try:
            for rep in range(1 + int(self.cfg.profile_iters)):
                batch = w.make_batch(self.ctx.seed + 7919, self.ctx.rank, rep, self.ctx.device)
                loss = w.loss(model, batch)
                stamps.clear()
                _sync_device(self.ctx.device)
                t0 = time.perf_counter()
                loss.backward()
                _sync_device(self.ctx.device)
                if rep > 0:  # the first pass warms up allocators and kernels
                    samples.append((t0, dict(stamps)))
        finally:
            for h in handles:
                h.remove()
            for p in params:
                p.grad = None
        t0, first = samples[0]
        order = sorted(first, key=first.get) + [i for i in range(len(params)) if i not in first]
        tb = []
        for pos, i in enumerate(order):
            deltas = []
            for t0, st in samples:
                prev = t0 if pos == 0 else st.get(order[pos - 1], t0)
                deltas.append(max(0.0, st.get(i, prev) - prev))
            tb.append(statistics.median(deltas))
        return order, tb

    def _microbenchmark(self):
        """(bytes, seconds) of a blocking all-reduce for powers of 4 between min and max bytes."""
        cfg = self.cfg
        out = []
        size = int(cfg.bench_min_bytes)
        while size <= int(cfg.bench_max_bytes):
            t = torch.ones(max(1, size // 4), dtype=torch.float32, device=self.ctx.device)
            reps = []
            for rep in range(1 + int(cfg.bench_reps)):
                if self.ctx.world > 1:
                    dist.barrier(group=self.ctx.group)
                _sync_device(self.ctx.device)
                t0 = time.perf_counter()
                if self.ctx.world > 1:
                    self.transport.benchmark(t)
                _sync_device(self.ctx.device)
                if rep > 0:
                    reps.append(time.perf_counter() - t0)
            out.append((t.numel() * 4, statistics.median(reps)))
            size *= 4
        return out

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            alpha_s=self.alpha_s,
            beta_s_per_byte=self.beta_s_per_byte,
            tb_s=self.tb_s,
            tensor_bytes=[p.numel() * p.element_size() for _, p in self.named],
            group_tensors=[[self.named[i][0] for i in m] for m in self.groups],
            microbenchmark=self.bench,
        )
        return d


def _sync_device(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
