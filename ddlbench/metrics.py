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


# A run whose timed blocks lost this share of its machine's cores to the hypervisor's other guests
# (driver: host_steal_cores) measured them as much as its method: a local 2-worker BSP-A2A run at
# 100 Mbit/s, its blocks 8-14% stolen, read 208 samples/s where the same run had read 265.
DISTURBED_STEAL_SHARE = 0.10


def disturbed(steal_share: float | None) -> bool:
    """Whether a run (or a block, a job) that lost this share of its machine's cores to other
    guests measured them as much as itself: at DISTURBED_STEAL_SHARE or more; never where the
    share is unknown (None)."""
    return steal_share is not None and steal_share >= DISTURBED_STEAL_SHARE


def disturbed_repeats(host_steal_cores: Sequence[float] | None, host_cores: int | None,
                      repeats: int) -> list[tuple[int, float]]:
    """(index, stolen share) of each of a run's `repeats` timed blocks (driver: one steal figure
    per repeat) that lost DISTURBED_STEAL_SHARE of the machine's cores or more; none where steal
    is unknown or not one figure per repeat. Steal comes in bursts: a run's mean can stay under
    the share while one block lost a fifth of the cores (seen: an emulated 4-worker MG-WFBP run's
    last two repeats, 18% and 19% stolen, read 209 and 205 samples/s beside 251-268, a mean of 9%)."""
    if not host_steal_cores or not host_cores or len(host_steal_cores) != repeats:
        return []
    return [(i, s / host_cores) for i, s in enumerate(host_steal_cores) if disturbed(s / host_cores)]


def undisturbed(samples_per_sec_per_repeat: Sequence[float], host_steal_cores: Sequence[float] | None,
                host_cores: int | None) -> list[float]:
    """The samples/s of the repeats that no neighbour disturbed (`disturbed_repeats`); all of them
    where steal is unknown; empty where every one was."""
    out = {i for i, _ in disturbed_repeats(host_steal_cores, host_cores, len(samples_per_sec_per_repeat))}
    return [x for i, x in enumerate(samples_per_sec_per_repeat) if i not in out]


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


# Noise: the intervals behind every verdict that compares two measurements (analysis/noise.py
# decides with them). Written out here because the project carries no statistics library.

def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b), by its continued fraction evaluated with the
    modified Lentz method (Numerical Recipes, 3rd ed., section 6.4); the fraction converges
    fast for x < (a + 1) / (a + b + 2), and I_x(a, b) = 1 - I_{1-x}(b, a) covers the rest."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (df real and positive, as Welch's
    df is). With x = df / (df + t^2), P(|T| > |t|) = I_x(df/2, 1/2) (Abramowitz and Stegun
    26.7.1 with 26.5.27), so P(T <= t) = 1 - I_x(df/2, 1/2) / 2 for t >= 0, by symmetry below."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection on student_t_cdf (monotone); df = inf gives the
    normal quantile. t(0.975, 1) = 12.706, t(0.975, 4) = 2.776, t(0.975, inf) = 1.960."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    if math.isinf(df):
        from statistics import NormalDist
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


def satterthwaite_interval(estimate: float, components: Sequence[tuple[float, float]],
                           confidence: float = 0.95) -> tuple[float, float, float]:
    """Two-sided `confidence` interval of an estimate that is a sum of independent terms, each
    with an estimated variance v_i on df_i degrees of freedom: (lo, hi, df).

    The estimate's variance is V = sum v_i. Its estimate is approximately a scaled chi-square
    with df = V^2 / sum(v_i^2 / df_i) (Satterthwaite, Biometrics Bulletin 2, 1946), so
        estimate +- t(1 - (1 - confidence)/2, df) * sqrt(V).
    One term (v = s^2 / n, df = n - 1) is the t-interval of a mean; two terms of opposite sign
    are Welch's interval of a difference of means (welch_interval). V = 0 gives a point."""
    total = sum(v for v, _ in components)
    if total <= 0.0:
        return estimate, estimate, math.inf
    df = total ** 2 / sum(v * v / d for v, d in components if v > 0)
    half = student_t_quantile(1.0 - (1.0 - confidence) / 2, df) * math.sqrt(total)
    return estimate - half, estimate + half, df


def welch_interval(mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int,
                   confidence: float = 0.95) -> tuple[float, float, float]:
    """(a - b, lo, hi): Welch's interval of the difference of two means, each from n runs with
    sample standard deviation std (Welch, Biometrika 34, 1947). Unequal variances allowed:
        a - b +- t(df) * sqrt(s_a^2/n_a + s_b^2/n_b),
        df = (s_a^2/n_a + s_b^2/n_b)^2 / ((s_a^2/n_a)^2/(n_a - 1) + (s_b^2/n_b)^2/(n_b - 1)).
    The difference is resolved at this confidence when the interval excludes 0 (the same as
    Welch's two-sided t-test rejecting equal means at 1 - confidence)."""
    if n_a < 2 or n_b < 2:
        raise ValueError(f"Welch's interval needs at least 2 runs on each side, got {n_a} and {n_b}")
    diff = mean_a - mean_b
    lo, hi, _ = satterthwaite_interval(diff, [(std_a ** 2 / n_a, n_a - 1), (std_b ** 2 / n_b, n_b - 1)], confidence)
    return diff, lo, hi


def range_bound(std: float, n: int) -> float:
    """The largest range (max - min) that n values with sample standard deviation std can
    have: std * sqrt(2 (n - 1)). Values spanning R have a sum of squared deviations of at
    least R^2 / 2 (two at the ends, the rest at their midpoint), so (n - 1) std^2 >= R^2 / 2.
    Published figures give a std, not the runs: this is the widest run-to-run spread they allow."""
    return std * math.sqrt(2 * (n - 1))


def bootstrap_median_interval(xs: Sequence[float], confidence: float = 0.95, reps: int = 2000,
                              seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (Efron and Tibshirani, An Introduction to the
    Bootstrap, 1993, ch. 13): the median of `reps` resamples of xs drawn with replacement, cut at
    (1 - confidence)/2 from each end. Seeded, so a report prints the same interval twice. With
    few values it cannot be narrower than the values' own spread allows (with 3, it is their
    range); see rounds_to_resolve."""
    import random
    import statistics

    if not xs:
        raise ValueError("bootstrap_median_interval of no values")
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(reps))
    cut = (1.0 - confidence) / 2
    return meds[round(cut * reps)], meds[round((1.0 - cut) * reps) - 1]


def rounds_to_resolve(confidence: float = 0.95) -> int:
    """Fewest paired rounds whose median can be told from a bound at this confidence without
    assuming a distribution: if the true median sits on the bound, each round falls on either
    side with probability 1/2, so all n on one side happens with probability 2^-n, which must
    be at most (1 - confidence)/2 (sign test). 95% needs 6 rounds (1/64 = 0.016; 5 give 0.031)."""
    return math.ceil(math.log2(2 / (1.0 - confidence)) - 1e-12)
