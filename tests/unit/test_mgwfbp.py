"""The MG-WFBP merge rule and its timing model, on hand-worked cases and properties."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlbench.methods.mgwfbp import comm_timeline, fit_alpha_beta, merge_groups


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
