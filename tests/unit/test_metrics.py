import math

import pytest

from ddlbench import metrics


def test_samples_per_sec_is_global_batch_over_mean_iteration_time():
    assert metrics.samples_per_sec(2 * 64, 0.5) == 256.0
    with pytest.raises(ValueError):
        metrics.samples_per_sec(64, 0.0)


def test_block_throughput_is_workers_times_batch_times_iterations_over_the_slowest_block():
    # 4 workers x 64 samples x 100 iterations in a 12.8 s block (the study's ResNet-50 protocol)
    assert metrics.block_samples_per_sec(4, 64, 100, 12.8) == pytest.approx(2000.0)
    with pytest.raises(ValueError, match="positive"):
        metrics.block_samples_per_sec(4, 64, 100, 0.0)


def test_throughput_over_repeats_uses_sample_std():
    # 2 workers x 25 samples x 2 iterations: blocks of 1 s and 0.5 s
    mean, std, per = metrics.throughput_over_repeats(2, 25, 2, [1.0, 0.5])
    assert per == [100.0, 200.0]
    assert mean == 150.0
    assert std == pytest.approx(math.sqrt(((100 - 150) ** 2 + (200 - 150) ** 2) / 1))
    assert metrics.mean_std([3.0]) == (3.0, 0.0)


def test_bandwidth_formulas_follow_nccl_tests():
    assert metrics.algbw_GBps(2_000_000_000, 2.0) == 1.0
    assert metrics.busbw_GBps("all_reduce", 2_000_000_000, 2.0, 4) == 1.5
    assert metrics.busbw_GBps("all_gather", 2_000_000_000, 2.0, 4) == 0.75
    assert metrics.busbw_GBps("reduce_scatter", 2_000_000_000, 2.0, 2) == 0.5
    assert metrics.busbw_GBps("broadcast", 1_000_000_000, 1.0, 8) == 1.0
    assert metrics.busbw_GBps("push_pull", 1_000_000_000, 1.0, 2) == 2.0
    with pytest.raises(ValueError, match="accepted"):
        metrics.busbw_GBps("alltoall", 1, 1.0, 2)


def test_speedup_efficiency_and_the_studys_formulas():
    assert metrics.speedup(7126.52, 253.1) == pytest.approx(28.157, rel=1e-4)
    assert metrics.scaling_efficiency(28.0, 32) == 0.875
    assert metrics.model_intensity(470 * 25_557_032, 25_557_032) == 470
    assert metrics.c2c_ratio(2.0, 64, 470) == pytest.approx(2.0 / (64 * 470))
    # t_s = 8, t_m = 1, N = 4: 8 / (2 + 1)
    assert metrics.speedup_without_overlap(8.0, 1.0, 4) == pytest.approx(8 / 3)
