"""The MG-WFBP merge rule, its timing model, the alpha-beta fit and the backward profile, on
hand-worked cases and properties."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlbench.methods.mgwfbp import (CudaEventClock, HostClock, alpha_warning, bench_sizes, clock_for, comm_timeline,
                                     fit_alpha_beta, merge_groups, profile_backward)


def flat(groups):
    return [i for g in groups for i in g]


def test_alpha_zero_merges_nothing_even_when_communication_backs_up():
    tb = [1e-3] * 6
    sizes = [4_000_000] * 6
    # b makes each message take far longer than a layer's backward: the queue backs up, yet a
    # merge saves nothing when a = 0, so none happens.
    assert merge_groups(tb, sizes, 0.0, 1e-6) == [[i] for i in range(6)]


def test_huge_alpha_merges_everything():
    tb = [3e-3, 1e-4, 5e-3, 2e-3, 1e-3]
    assert merge_groups(tb, [100, 4, 1000, 10, 4], 10.0, 1e-9) == [[0, 1, 2, 3, 4]]


def test_hand_worked_three_layers():
    # ready = [1, 2, 3]; a = 0.5, b = 1 per byte, one byte each.
    # k=0: send-now start = 1, waiting for tensor 1 costs 1 >= 0.5 -> close [0]; ends 1 + 0.5 + 1 = 2.5
    # k=1: send-now start = max(2.5, 2) = 2.5, waiting costs 3 - 2.5 = 0.5, not < 0.5 -> close [1]
    assert merge_groups([1, 1, 1], [1, 1, 1], 0.5, 1.0) == [[0], [1], [2]]
    # a = 0.6: k=0 closes (1 >= 0.6), ends 2.6; k=1 waits 0.4 < 0.6 -> merge 1 and 2
    assert merge_groups([1, 1, 1], [1, 1, 1], 0.6, 1.0) == [[0], [1, 2]]


def spans(timeline):
    return [t for span in timeline for t in span]


def test_timing_model_by_hand():
    tb, sizes, a, b = [1, 1, 1], [1, 1, 1], 0.6, 1.0
    # WFBP: [0] 1 -> 2.6; [1] max(2.6, 2) = 2.6 -> 4.2; [2] max(4.2, 3) = 4.2 -> 5.8
    wfbp = comm_timeline(tb, sizes, [[0], [1], [2]], a, b)
    assert spans(wfbp) == pytest.approx([1, 2.6, 2.6, 4.2, 4.2, 5.8])
    # MG-WFBP: [0] 1 -> 2.6; [1, 2] starts when 2 is ready, max(2.6, 3) = 3 -> 3 + 0.6 + 2 = 5.6
    mg = comm_timeline(tb, sizes, merge_groups(tb, sizes, a, b), a, b)
    assert spans(mg) == pytest.approx([1, 2.6, 3, 5.6])
    # BSP: one message after backward (t = 3): 3 + 0.6 + 3 = 6.6
    assert spans(comm_timeline(tb, sizes, [[0, 1, 2]], a, b)) == pytest.approx([3, 6.6])


def test_fit_alpha_beta_recovers_a_line():
    sizes = [4096 * 4**k for k in range(7)]
    a, b = fit_alpha_beta(sizes, [2e-5 + 3e-10 * s for s in sizes])
    assert a == pytest.approx(2e-5, rel=1e-6)
    assert b == pytest.approx(3e-10, rel=1e-6)


def test_fit_minimises_relative_not_absolute_error():
    # x = 1, 3, 5 bytes; t = 1, 2, 4 s. Relative least squares is ordinary least squares of 1 on
    # u = 1/t = (1, 1/2, 1/4) and v = x/t = (1, 3/2, 5/4), no intercept. Times 16, the normal
    # equations are [21 33; 33 77] (a, b) = (28, 60): det = 528, a = 176/528 = 1/3,
    # b = 336/528 = 7/11.
    a, b = fit_alpha_beta([1, 3, 5], [1, 2, 4])
    assert (a, b) == pytest.approx((1 / 3, 7 / 11))
    # Ordinary least squares on the same points: mean x = 3, mean t = 7/3, Sxy = 6, Sxx = 8,
    # so b = 3/4 and a = 7/3 - 9/4 = 1/12: the large point pulls the intercept to a quarter.
    assert (a, b) != pytest.approx((1 / 12, 3 / 4))


def test_fit_with_a_negative_intercept_refits_the_slope_through_the_origin():
    # (1, 1) and (2, 3) lie on t = -1 + 2x. With a = 0, minimise sum((b x/t - 1)^2):
    # x/t = (1, 2/3), so b = (1 + 2/3) / (1 + 4/9) = 15/13, not the unconstrained 2.
    assert fit_alpha_beta([1, 2], [1, 3]) == pytest.approx((0.0, 15 / 13))


def test_fit_with_a_negative_slope_is_the_best_constant():
    # (1, 2) and (2, 1) lie on t = 3 - x. With b = 0, minimise sum((a/t - 1)^2):
    # a = (1/2 + 1) / (1/4 + 1) = 6/5 (the plain mean would be 3/2).
    assert fit_alpha_beta([1, 2], [2, 1]) == pytest.approx((6 / 5, 0.0))


def test_fit_rejects_what_it_cannot_weigh():
    with pytest.raises(ValueError, match="at least 2"):
        fit_alpha_beta([4], [1e-5])
    with pytest.raises(ValueError, match="measured time 0.0 s is invalid"):
        fit_alpha_beta([4, 8], [0.0, 1e-5])


def test_alpha_near_zero_warns_below_one_percent_of_the_smallest_time():
    sizes = [1000, 2000]
    # t = 5 + x: alpha is 5 / 1005 = 0.5% of the smallest time -> warned, naming the value.
    times = [5 + s for s in sizes]
    a, _ = fit_alpha_beta(sizes, times)
    msg = alpha_warning(a, times)
    assert msg is not None and "alpha_s=5 " in msg and "runs as WFBP" in msg
    # t = 20 + x: 20 / 1020 = 2% -> no warning.
    times = [20 + s for s in sizes]
    assert alpha_warning(fit_alpha_beta(sizes, times)[0], times) is None
    # A clamped alpha (the fit wanted it negative) is 0: warned.
    assert alpha_warning(fit_alpha_beta([1, 2], [1, 3])[0], [1, 3]) is not None


def test_bench_sizes_are_upstreams_grid():
    sizes = bench_sizes(32768, 2064384)
    assert len(sizes) == 63 and sizes[:2] == [32768, 65536] and sizes[-1] == 63 * 8192 * 4
    with pytest.raises(ValueError, match="bench_min_bytes=8, bench_max_bytes=4 are invalid"):
        bench_sizes(8, 4)


def test_small_groups_always_take_the_next_tensor():
    # Every gradient is 1 s after the last and a = 0.1: the alpha-beta rule alone merges nothing.
    tb, sizes, a, b = [1, 1, 1], [4, 4, 4], 0.1, 1e-3
    assert merge_groups(tb, sizes, a, b) == [[0], [1], [2]]
    # The study's rule in elements: 100 < 8192 takes tensor 1; 8100 < 8192 takes tensor 2.
    assert merge_groups(tb, sizes, a, b, [100, 8000, 200], 8192) == [[0, 1, 2]]
    # 100 + 8092 = 8192 is not under 8192: that group is closed; the last group may be small.
    assert merge_groups(tb, sizes, a, b, [100, 8092, 5], 8192) == [[0, 1], [2]]
    # Counted in elements, not bytes: 4-byte elements of 4,000 tensors are 16,000 bytes.
    assert merge_groups(tb, [16_000] * 3, a, b, [4000, 4000, 4000], 8192) == [[0, 1, 2]]


def test_small_group_rule_needs_element_counts():
    with pytest.raises(ValueError, match="min_group_numel=8192 needs 3 element counts"):
        merge_groups([1, 1, 1], [4, 4, 4], 0.1, 0.0, None, 8192)
    with pytest.raises(ValueError, match="min_group_numel=-1 is invalid"):
        merge_groups([1], [4], 0.1, 0.0, [1], -1)


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="3 backward times for 2 tensors"):
        merge_groups([1, 2, 3], [1, 2], 0.1, 0.1)


layers = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 5e-3), min_size=n, max_size=n),
        st.lists(st.integers(4, 50_000_000), min_size=n, max_size=n),
    )
)


@settings(max_examples=300, deadline=None)
@given(layers, st.floats(0, 1e-2), st.floats(0, 1e-8))
def test_groups_partition_in_order_and_never_finish_later_than_wfbp(layer_data, a, b):
    tb, sizes = layer_data
    groups = merge_groups(tb, sizes, a, b)
    assert flat(groups) == list(range(len(tb)))  # contiguous, in ready order, each tensor once
    mg_end = comm_timeline(tb, sizes, groups, a, b)[-1][1]
    wfbp_end = comm_timeline(tb, sizes, [[i] for i in range(len(tb))], a, b)[-1][1]
    assert mg_end <= wfbp_end + 1e-12


@settings(max_examples=300, deadline=None)
@given(layers, st.floats(0, 1e-2), st.floats(0, 1e-8), st.integers(0, 20_000))
def test_with_the_small_group_rule_every_group_but_the_last_is_large_enough(layer_data, a, b, min_numel):
    tb, sizes = layer_data
    numels = [s // 4 + 1 for s in sizes]
    groups = merge_groups(tb, sizes, a, b, numels, min_numel)
    assert flat(groups) == list(range(len(tb)))
    assert all(sum(numels[i] for i in g) >= min_numel for g in groups[:-1])


# -- the backward profile ----------------------------------------------------------------------
class _Slow(torch.autograd.Function):
    """x * p whose backward advances a simulated GPU clock by a known cost."""

    @staticmethod
    def forward(ctx, x, p, gpu):
        ctx.save_for_backward(x, p)
        ctx.gpu = gpu
        return x * p

    @staticmethod
    def backward(ctx, g):
        x, p = ctx.saved_tensors
        ctx.gpu.advance()
        return g * p, g * x, None


class _SimulatedGPU:
    """Stands in for the device: backward ops advance its clock (ms) by their cost times the
    current pass's scale; its events take the clock's time when recorded and, as CUDA events,
    can be read only after a synchronize."""

    def __init__(self, costs_ms):
        self.costs_ms = costs_ms
        self.now_ms, self.scale, self.step = 0.0, 1.0, 0
        self.pending, self.syncs = [], 0
        gpu = self

        class Event:
            def record(self):
                self.t_ms, self.done = gpu.now_ms, False
                gpu.pending.append(self)

            def elapsed_time(self, end):
                if not (self.done and end.done):
                    raise RuntimeError("event read before it completed")
                return end.t_ms - self.t_ms

        self.Event = Event

    def advance(self):
        # backward meets the layers last to first
        self.now_ms += self.scale * self.costs_ms[len(self.costs_ms) - 1 - self.step % len(self.costs_ms)]
        self.step += 1

    def synchronize(self, device):
        self.syncs += 1
        for e in self.pending:
            e.done = True
        self.pending = []


def _chain(n, gpu, scales):
    params = [torch.nn.Parameter(torch.tensor(1.0 + i)) for i in range(n)]

    def make_loss(rep):
        gpu.scale = scales[rep]
        x = torch.tensor(2.0)
        for p in params:
            x = _Slow.apply(x, p, gpu)
        return x

    return params, make_loss


def test_event_clock_turns_event_times_into_backward_times():
    costs_ms = [2.0, 0.5, 4.0, 1.0]  # backward cost of layer 0..3; layer 3's gradient comes first
    gpu = _SimulatedGPU(costs_ms)
    # Passes alternate hooked and plain. The first two warm up (100x, must be dropped); the
    # timed ones run at 1x, 3x, 2x: median 2x.
    params, make_loss = _chain(4, gpu, scales=[100, 100, 1, 1, 3, 3, 2, 2])
    clock = CudaEventClock(torch.device("cpu"), event=gpu.Event, synchronize=gpu.synchronize)
    order, tb_s = profile_backward(params, make_loss, 3, clock)
    assert order == [3, 2, 1, 0]
    assert tb_s == pytest.approx([2 * costs_ms[i] / 1e3 for i in order])  # ms -> s
    assert gpu.syncs == 8  # once per pass, before any event is read
    assert all(p.grad is None for p in params)


def test_backward_times_are_scaled_to_the_plain_passes_length():
    """A hooked pass pays for its marks, a plain one in between does not: the hooked passes give
    each gradient's share, the plain passes' median backward the total. Stand-in: hooked passes
    3x as long as plain ones (1x, 2x, 1x, median 1x)."""
    costs_ms = [2.0, 0.5, 4.0, 1.0]
    gpu = _SimulatedGPU(costs_ms)
    params, make_loss = _chain(4, gpu, scales=[100, 100, 3, 1, 3, 2, 3, 1])
    clock = CudaEventClock(torch.device("cpu"), event=gpu.Event, synchronize=gpu.synchronize)
    order, tb_s = profile_backward(params, make_loss, 3, clock)
    assert tb_s == pytest.approx([costs_ms[i] / 1e3 for i in order])
    assert sum(tb_s) == pytest.approx(sum(costs_ms) / 1e3)


class _TwoOps:
    """Two chained ops whose backward costs `costs_ms` (layer 0, layer 1) through `wait(seconds)`;
    backward meets layer 1 first."""

    def __init__(self, costs_ms, wait):
        self.costs_ms, self.wait, self.step = costs_ms, wait, 0

    def advance(self):
        self.wait(self.costs_ms[1 - self.step % 2] / 1e3)
        self.step += 1


def test_host_clock_gives_each_gradient_its_ops_share(monkeypatch):
    """The host clock's arithmetic, on a clock that only the ops move (30 ms, then 5 ms)."""
    import ddlbench.methods.mgwfbp as mg

    now = [0.0]
    monkeypatch.setattr(mg.time, "perf_counter", lambda: now[0])

    def tick(s):
        now[0] += s

    params, make_loss = _chain(2, _TwoOps([30.0, 5.0], tick), scales=[1] * 8)
    order, tb_s = profile_backward(params, make_loss, 3, HostClock())
    assert order == [1, 0]
    assert tb_s == pytest.approx([5e-3, 30e-3])  # order's: the last layer's 5 ms first


def test_host_clock_on_cpu_sees_real_backward_time():
    """Real sleeps on a shared machine: they never return early, but may return late by
    milliseconds, so only what late returns cannot undo is asserted (the exact shares are the
    test above's)."""
    import time

    params, make_loss = _chain(2, _TwoOps([60.0, 5.0], time.sleep), scales=[1] * 8)
    order, tb_s = profile_backward(params, make_loss, 3, HostClock())
    assert order == [1, 0]
    # the plain passes waited for both sleeps at least; the long op's gradient the larger share
    assert sum(tb_s) >= 65e-3 and tb_s[1] > tb_s[0]


def test_clock_follows_the_device():
    assert clock_for(torch.device("cpu")).name == "host"
    assert clock_for(torch.device("cuda", 0)).name == "cuda_events"  # built without touching CUDA
