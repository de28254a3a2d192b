"""When two measurements differ beyond noise: the one test behind every verdict, table mark,
figure label and benchmark goal. The formulas are in ddlbench.metrics; the decisions are here.

Cells (mean, std and repeats of one method at one worker count, see `tables`) compare so:
- both with at least MIN_REPEATS repeats: Welch's 95% interval of the difference of means
  (metrics.welch_interval); decided when the interval excludes 0;
- either with fewer: it has no usable std, so the difference is decided only if it exceeds the
  largest run-to-run spread seen on that setup, taken relative to the larger of the two means.
  A cell's spread is (max - min) / mean of its repeats; a published cell gives a std over the
  study's five runs instead, and counts the widest range that std allows (metrics.range_bound).
  A setup with no spread measured decides nothing this way.
Speedups of two setups (best cell over the one-worker baseline) compare the same way on the
log of their ratio, every cell's relative variance pooled by Satterthwaite's rule, or by the
larger of the two setups' spreads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ddlbench import metrics

CONFIDENCE = 0.95
MIN_REPEATS = 3
ABOVE, BELOW, WITHIN = 1, -1, 0
MET, MISSED, UNRESOLVED = "met", "missed", "not resolved at this noise"

TEST = (f"Welch's {CONFIDENCE:.0%} interval of the difference of means, over the repeats behind each cell "
        "(the study's figures: n = 5 runs with their published std; its one-worker rows publish none); decided "
        "when it excludes 0. A cell with "
        f"fewer than {MIN_REPEATS} repeats has no usable std: it is decided only if the difference exceeds the "
        "largest run-to-run spread ((max - min) / mean of a cell's repeats; for published cells the widest "
        "range their std allows) seen on that setup. Speedups of two setups: the same test on the log of "
        "their ratio. Otherwise: within noise.")


@dataclass(frozen=True)
class Difference:
    """a against b: sign is ABOVE, BELOW or WITHIN (noise); text shows what decided it."""
    sign: int
    text: str
    lo: float | None = None  # the interval of a - b (a / b for speedups); None: decided by spread
    hi: float | None = None


def usable(cell) -> bool:
    return cell.n is not None and cell.n >= MIN_REPEATS


def spread(cell) -> float | None:
    """Relative run-to-run spread of one cell, or None where it has fewer than 2 runs."""
    if len(cell.repeats) >= 2:
        return (max(cell.repeats) - min(cell.repeats)) / cell.mean
    if cell.n is not None and cell.n >= 2:
        return metrics.range_bound(cell.std, cell.n) / cell.mean
    return None


def setup_spread(cells: dict) -> float | None:
    """The largest relative run-to-run spread among a setup's cells."""
    seen = [s for s in map(spread, cells.values()) if s is not None]
    return max(seen) if seen else None


def places(*values: float) -> int:
    """Decimals that show a difference at the scale of these values."""
    top = max(abs(v) for v in values)
    return 1 if top >= 100 else 2 if top >= 1 else 3


def _by_spread(a: float, b: float, setup_spread_rel: float | None, why: str) -> Difference:
    rel = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else 0.0
    if setup_spread_rel is None:
        return Difference(WITHIN, f"{rel:.1%} apart, no run-to-run spread measured ({why})")
    beyond = rel > setup_spread_rel
    sign = (ABOVE if a > b else BELOW) if beyond else WITHIN
    return Difference(sign, f"{rel:.1%} apart {'>' if beyond else '<='} spread {setup_spread_rel:.1%} ({why})")


def _too_few(*cells) -> str:
    """Why the std is not usable: too few repeats, or a published figure without one."""
    ns = sorted({c.n for c in cells if c.n is not None and not usable(c)})
    why = [f"n={'/'.join(map(str, ns))}"] if ns else []
    return ", ".join(why + (["no published std"] if any(c.n is None for c in cells) else []))


def compare(a, b, setup_spread_rel: float | None) -> Difference:
    """Cell a against cell b of one setup (the test in the module docstring)."""
    if not (usable(a) and usable(b)):
        return _by_spread(a.mean, b.mean, setup_spread_rel, _too_few(a, b))
    diff, lo, hi = metrics.welch_interval(a.mean, a.std, a.n, b.mean, b.std, b.n, CONFIDENCE)
    p = places(a.mean, b.mean)
    sign = ABOVE if lo > 0 else BELOW if hi < 0 else WITHIN
    return Difference(sign, f"{diff:+.{p}f} [{lo:+.{p}f}, {hi:+.{p}f}]", lo, hi)


def compare_speedups(best_a, base_a, spread_a: float | None, best_b, base_b, spread_b: float | None) -> Difference:
    """Speedup best_a / base_a against best_b / base_b (two setups). With every cell usable, the
    interval of log(s_a / s_b) = log a - log base_a - log b + log base_b pools each cell's
    relative variance (std / mean)^2 / n on n - 1 degrees of freedom (delta method,
    metrics.satterthwaite_interval), shown as an interval of the ratio s_a / s_b."""
    cells = (best_a, base_a, best_b, base_b)
    s_a, s_b = best_a.mean / base_a.mean, best_b.mean / base_b.mean
    if not all(map(usable, cells)):
        both = None if spread_a is None or spread_b is None else max(spread_a, spread_b)
        return _by_spread(s_a, s_b, both, _too_few(*cells))
    parts = [((c.std / c.mean) ** 2 / c.n, c.n - 1) for c in cells]
    lo, hi, _ = metrics.satterthwaite_interval(math.log(s_a / s_b), parts, CONFIDENCE)
    sign = ABOVE if lo > 0 else BELOW if hi < 0 else WITHIN
    return Difference(sign, f"ratio {s_a / s_b:.3f} [{math.exp(lo):.3f}, {math.exp(hi):.3f}]", math.exp(lo), math.exp(hi))


def mean_interval(cell) -> tuple[float, float] | None:
    """The t-interval of a cell's mean, or None where its std is not usable."""
    if not usable(cell):
        return None
    lo, hi, _ = metrics.satterthwaite_interval(cell.mean, [(cell.std ** 2 / cell.n, cell.n - 1)], CONFIDENCE)
    return lo, hi


def ties(cells: dict, method: str, workers: int, setup_spread_rel: float | None) -> list[str]:
    """The other methods at this worker count that `method` does not differ from beyond noise."""
    me = cells[(method, workers)]
    return [m for (m, w), c in cells.items()
            if w == workers and m != method and compare(me, c, setup_spread_rel).sign == WITHIN]


def tied_with_all(cells: dict, method: str, workers: int, setup_spread_rel: float | None) -> bool:
    """True where other methods ran at this worker count and none differs from this one beyond noise."""
    others = sum(1 for (m, w) in cells if w == workers and m != method)
    return others > 0 and len(ties(cells, method, workers, setup_spread_rel)) == others


def goal(lo: float, hi: float, lower: float | None = None, upper: float | None = None) -> str:
    """A goal lower <= x <= upper (either bound may be absent) against an interval of x: met
    when the whole interval lies inside, missed when none of it does, else not resolved."""
    lower = -math.inf if lower is None else lower
    upper = math.inf if upper is None else upper
    if lower <= lo and hi <= upper:
        return MET
    if hi < lower or lo > upper:
        return MISSED
    return UNRESOLVED
