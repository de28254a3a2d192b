"""Side-by-side benchmark ratios (`make bench`) from interleaved rounds, each with an interval,
and goals read as "met", "missed" or "not resolved at this noise".

In a round every method runs once, back to back, so slow drift of a shared machine hits the
round's runs alike. A method's ratio in one round is its iteration time over the reference's
in that round: the reference's samples/s over the method's (same global batch), each from its
record's `samples_per_sec_per_repeat`. Printed: the median of the per-round ratios and its
percentile-bootstrap 95% interval (metrics.bootstrap_median_interval, as
benchmarks/commbench_overhead.py does). A goal on a ratio is decided by that interval
(noise.goal), and only from metrics.rounds_to_resolve() rounds up (6 at 95%): with fewer, even
rounds that all fall on one side of the goal could be chance.

Rounds live one per directory (its records), `round-01/`, `round-02/...`, under one results folder.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ddlbench import metrics

from . import noise
from .records import load


@dataclass(frozen=True)
class Goal:
    """ratio of `method` to the reference on `model` within [lower, upper] (either may be None)."""
    model: str
    method: str
    upper: float | None = None
    lower: float | None = None

    def text(self, reference: str) -> str:
        bounds = [f">= {self.lower:.2f}"] if self.lower is not None else []
        bounds += [f"<= {self.upper:.2f}"] if self.upper is not None else []
        return f"{self.method} / {reference} {' and '.join(bounds)} on {self.model}"


@dataclass(frozen=True)
class Ratio:
    per_round: tuple[float, ...]
    median: float
    lo: float
    hi: float
    samples_per_sec: float  # the method's median over rounds


def round_dir(results: Path, r: int) -> Path:
    return results / f"round-{r + 1:02d}"


def load_rounds(results: Path) -> list[list[dict]]:
    """Each round's ok records, in round order."""
    return [[rec for rec in load([d]).records if rec.get("status") == "ok"]
            for d in sorted(results.glob("round-*"))]


def _throughput(rnd: list[dict], model: str, method: str) -> float | None:
    """The method's samples/s in this round: the mean over its repeats."""
    runs = [x for r in rnd if r["model"] == model and r["method"] == method for x in r["samples_per_sec_per_repeat"]]
    return metrics.mean_std(runs)[0] if runs else None


def ratio(rounds: list[list[dict]], model: str, method: str, reference: str) -> Ratio | None:
    """Iteration time of `method` over the reference's, per round where both ran."""
    pairs = [(_throughput(rnd, model, reference), _throughput(rnd, model, method)) for rnd in rounds]
    pairs = [(ref, own) for ref, own in pairs if ref and own]
    if not pairs:
        return None
    per_round = tuple(ref / own for ref, own in pairs)
    lo, hi = metrics.bootstrap_median_interval(per_round, noise.CONFIDENCE)
    return Ratio(per_round, statistics.median(per_round), lo, hi, statistics.median(own for _, own in pairs))


def goal_verdict(r: Ratio, goal: Goal) -> str:
    needed = metrics.rounds_to_resolve(noise.CONFIDENCE)
    if len(r.per_round) < needed:
        return f"{noise.UNRESOLVED} ({len(r.per_round)} rounds; a median needs {needed})"
    return noise.goal(r.lo, r.hi, goal.lower, goal.upper)


def table(rounds: list[list[dict]], models: list[str], methods: list[str], reference: str,
          goals: tuple[Goal, ...] = ()) -> str:
    """Markdown: per model, each method's median ratio [95%] and its median samples/s; then
    every goal with its verdict."""
    lines = [f"| model | {' | '.join(methods)} |", "|---|" + "---|" * len(methods)]
    found = {}
    for model in models:
        cells = []
        for m in methods:
            r = found[(model, m)] = ratio(rounds, model, m, reference)
            cells.append("-" if r is None else f"{r.median:.2f} [{r.lo:.2f}, {r.hi:.2f}] ({r.samples_per_sec:.2f}/s)")
        lines.append(f"| {model} | {' | '.join(cells)} |")
    for g in goals:
        if g.model in models:
            r = found.get((g.model, g.method))
            lines.append(f"goal {g.text(reference)}: " + ("no data" if r is None else
                         f"{r.median:.2f} [{r.lo:.2f}, {r.hi:.2f}]: {goal_verdict(r, g)}"))
    return "\n".join(lines)
