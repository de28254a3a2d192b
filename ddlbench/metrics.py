"""Every metric formula, once, with units in the names.

Throughput (the study's measure, horovod/imagenet_benchmark.py: batch x batches / block time).
With N workers of local batch B each, a repeat measures one block of k iterations as a single
wall-clock interval: from a device synchronisation before its first iteration to one after its
last, once the last iteration's communication has landed. T is the slowest rank's block time
(seconds), so the block ends when every worker has finished:
    samples_per_sec = N * B * k / T
Per-iteration times are host stamps without device synchronisation (diagnostics only, never
averaged into throughput). A run repeats warm-up + measurement R times (in one process, or as R
launches where the study relaunched); its throughput is the mean over repeats and its error the
sample standard deviation over repeats (the study: five runs, mean and std).

Speedup against one worker and scaling efficiency:
    speedup(N) = samples_per_sec(N) / samples_per_sec(1)
    scaling_efficiency(N) = speedup(N) / N

Model intensity and the communication-to-computation ratio (the study's section on scaling).
With C operations per sample per iteration and D parameters:
    I = C / D                              (operations per sample per parameter)
    C2C = D * f(N) / (M * C) = f(N) / (M * I)
where M is the global batch and f(N) the traffic factor of the communication scheme (D*f(N)
parameters moved per iteration).

Bandwidth of one collective (nccl-tests' definitions, GB = 1e9 bytes). A message of S bytes
that takes t seconds has algorithm bandwidth algbw = S / t. Bus bandwidth scales it by the
traffic each rank's link carries relative to S, so that it is comparable to link speed:
    all-reduce over n ranks:          busbw = algbw * 2 (n - 1) / n
    all-gather, reduce-scatter:       busbw = algbw * (n - 1) / n
    broadcast, reduce:                busbw = algbw
    push + pull to servers (BytePS):  busbw = algbw * 2   (each worker sends S and receives S)

Speedup with no overlap of computation and communication, t_s the single-worker computation
time of the global batch and t_m the communication time per iteration:
    speedup = t_s / (t_s / N + t_m)
"""
from __future__ import annotations

import math
from typing import Sequence


def samples_per_sec(global_batch: int, mean_iter_time_s: float) -> float:
    if mean_iter_time_s <= 0:
        raise ValueError(f"iteration time must be positive, got {mean_iter_time_s}")
    return global_batch / mean_iter_time_s


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_std of no values")
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def block_samples_per_sec(workers: int, local_batch: int, iters: int, block_time_s: float) -> float:
    """N * B * k / T: a measured block of `iters` iterations that took `block_time_s` on the
    slowest rank."""
    if block_time_s <= 0:
        raise ValueError(f"block time must be positive, got {block_time_s}")
    return workers * local_batch * iters / block_time_s


def throughput_over_repeats(workers: int, local_batch: int, iters: int,
                            block_times_s: Sequence[float]) -> tuple[float, float, list[float]]:
    """(mean samples/s, std samples/s, samples/s of each repeat), one block time per repeat."""
    per_repeat = [block_samples_per_sec(workers, local_batch, iters, t) for t in block_times_s]
    mean, std = mean_std(per_repeat)
    return mean, std, per_repeat


BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "push_pull": lambda n: 2.0,
}


def algbw_GBps(nbytes: int, time_s: float) -> float:
    return nbytes / time_s / 1e9


def busbw_GBps(collective: str, nbytes: int, time_s: float, ranks: int) -> float:
    if collective not in BUS_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; accepted: {', '.join(BUS_FACTORS)}")
    return algbw_GBps(nbytes, time_s) * BUS_FACTORS[collective](ranks)


def speedup(samples_per_sec_n: float, samples_per_sec_1: float) -> float:
    return samples_per_sec_n / samples_per_sec_1


def scaling_efficiency(speedup_n: float, workers: int) -> float:
    return speedup_n / workers


def model_intensity(flops_per_sample: float, params: int) -> float:
    return flops_per_sample / params


def c2c_ratio(traffic_factor: float, global_batch: int, intensity: float) -> float:
    return traffic_factor / (global_batch * intensity)


def speedup_without_overlap(compute_time_s: float, comm_time_s: float, workers: int) -> float:
    return compute_time_s / (compute_time_s / workers + comm_time_s)
