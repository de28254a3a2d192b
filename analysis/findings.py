"""The study's Table 2 findings, checked on whatever data is present.

Each check reads the cells of one source and network (models with their own batches) and
answers "holds", "does not hold", "within noise" or "no data", with the numbers it compared and
the interval that decided each comparison (the test is `noise.TEST`: Welch's 95% interval of
the difference of means, or the setup's run-to-run spread where a cell has fewer than 3
repeats). A finding over several cells ("in all cases", "in most cases") counts only the cells
that were decided and says how many were within noise; when none was decided it is "within
noise". Statements made "at 32 workers" are checked at 32 where recorded, else at the largest
worker count recorded for the methods involved (the evidence names it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import noise
from .reference import STUDY_MODELS
from .tables import Cells, baseline_cell

HOLDS, FAILS, WITHIN_NOISE, NO_DATA = "holds", "does not hold", "within noise", "no data"


@dataclass
class Verdict:
    finding: str
    verdict: str
    evidence: str


Models = dict  # {model: Cells}, one source and network


def _scale(cells: Cells, methods: tuple[str, ...]) -> int | None:
    """32 if every method has it, else the largest worker count (> 1) they all have."""
    common = set.intersection(*({w for (m, w) in cells if m == meth and w > 1} for meth in methods))
    if not common:
        return None
    return 32 if 32 in common else max(common)


def _vs(cells: Cells, a: str, b: str, n: int) -> tuple[noise.Difference, str]:
    """a against b at n workers, and the evidence: both means, then what decided it."""
    x, y = cells[(a, n)], cells[(b, n)]
    d = noise.compare(x, y, noise.setup_spread(cells))
    p = noise.places(x.mean, y.mean)
    return d, f"{x.mean:.{p}f} vs {y.mean:.{p}f}: {d.text}"


def _fastest_of(cells: Cells, winner: str, rivals: tuple[str, ...], model: str) -> tuple[str, str]:
    """Holds when the winner is above every rival beyond noise; does not hold when a rival is
    above it beyond noise; else within noise."""
    present = tuple(m for m in rivals if any(k[0] == m for k in cells))
    if winner not in present or len(present) < 2:
        return NO_DATA, f"{model}: needs {winner} and another of {', '.join(rivals)}"
    n = _scale(cells, present)
    if n is None:
        return NO_DATA, f"{model}: no common worker count"
    ranked = sorted((m for m in present if m != winner), key=lambda m: -cells[(m, n)].mean)
    signs, ev = [], []
    for m in ranked:
        d, text = _vs(cells, winner, m, n)
        signs.append(d.sign)
        ev.append(f"vs {m}: {text}")
    verdict = (FAILS if noise.BELOW in signs else HOLDS if all(s == noise.ABOVE for s in signs) else WITHIN_NOISE)
    return verdict, f"{model} at {n} workers, {winner} " + "; ".join(ev)


def _a_beats_b(models: Models, a: str, b: str, only: tuple[str, ...] = (), at_scale: bool = False,
               rule: str = "all") -> tuple[str, str]:
    """a's throughput above b's beyond noise in every decided cell (rule="all") or in more than
    half of them ("most"); at_scale: only at the 32-worker (or largest) count of each model."""
    signs, ev = [], []
    for model, cells in models.items():
        if only and model not in only:
            continue
        counts = sorted({w for (m, w) in cells if m == a and w > 1} & {w for (m, w) in cells if m == b})
        if at_scale:
            n = _scale(cells, (a, b))
            counts = [n] if n else []
        for n in counts:
            d, text = _vs(cells, a, b, n)
            signs.append(d.sign)
            ev.append(f"{model}@{n}: {text}")
    if not signs:
        return NO_DATA, f"no cell has both {a} and {b}"
    return tally(signs, rule, f"{a} > {b}", ev)


def tally(signs: list[int], rule: str, claim: str, evidence: list[str]) -> tuple[str, str]:
    """A finding over several cells: only decided cells count, and the within-noise ones are
    named. "all": no decided cell against the claim; "most": more than half the decided for it."""
    wins, losses = signs.count(noise.ABOVE), signs.count(noise.BELOW)
    decided, within = wins + losses, signs.count(noise.WITHIN)
    if decided == 0:
        verdict = WITHIN_NOISE
    elif rule == "all":
        verdict = HOLDS if losses == 0 else FAILS
    else:
        verdict = HOLDS if wins > decided / 2 else FAILS
    head = f"{claim} in {wins}/{decided} decided, {within} within noise"
    return verdict, head + ": " + "; ".join(evidence)


def _best(cells: Cells, n: int) -> tuple[str, object] | None:
    at_n = [(m, c) for (m, w), c in cells.items() if w == n]
    return max(at_n, key=lambda mc: mc[1].mean) if at_n else None


def _easier_to_scale(models: Models, easier: str, harder: str, why: str) -> tuple[str, str]:
    if easier not in models or harder not in models:
        return NO_DATA, f"needs {easier} and {harder}"
    e, h = models[easier], models[harder]
    base_e, base_h = baseline_cell(e), baseline_cell(h)
    common = sorted({w for (_, w) in e if w > 1} & {w for (_, w) in h if w > 1})
    if base_e is None or base_h is None or not common:
        return NO_DATA, f"needs one-worker runs and a common worker count of {easier} and {harder}"
    n = common[-1]
    (me, be), (mh, bh) = _best(e, n), _best(h, n)
    d = noise.compare_speedups(be, base_e, noise.setup_spread(e), bh, base_h, noise.setup_spread(h))
    verdict = {noise.ABOVE: HOLDS, noise.BELOW: FAILS, noise.WITHIN: WITHIN_NOISE}[d.sign]
    return verdict, (f"best speedup at {n} workers: {easier} {be.mean / base_e.mean:.2f}x ({me}) vs {harder} "
                     f"{bh.mean / base_h.mean:.2f}x ({mh}): {d.text} ({why})")


def _wfbp_beats_bsp(models: Models) -> tuple[str, str]:
    """Both architectures must hold; either failing fails it; otherwise within noise."""
    parts = [(_a_beats_b(models, "wfbp-a2a", "bsp-a2a", rule="most"), "A2A"),
             (_a_beats_b(models, "wfbp-ps", "bsp-ps", rule="most"), "PS")]
    known = [(v, e, arch) for (v, e), arch in parts if v != NO_DATA]
    if not known:
        return NO_DATA, "no cell has WFBP and BSP of one architecture"
    verdicts = [v for v, _, _ in known]
    verdict = FAILS if FAILS in verdicts else HOLDS if all(v == HOLDS for v in verdicts) else WITHIN_NOISE
    return verdict, " | ".join(f"{arch} ({v}): {e}" for v, e, arch in known)


def _si(model: str) -> str:
    return f"I={STUDY_MODELS[model]['intensity']}, batch {STUDY_MODELS[model]['local_batch']}" if model in STUDY_MODELS else ""


A2A = ("bsp-a2a", "wfbp-a2a", "mg-wfbp", "bytescheduler-a2a")

CHECKS: list[tuple[str, Callable[[Models], tuple[str, str]]]] = [
    ("1) Higher model intensity is easier to parallelise: ResNet-50 reaches a higher best speedup than BERT-Base",
     lambda m: _easier_to_scale(m, "resnet50", "bert-base", f"{_si('resnet50')} vs {_si('bert-base')}")),
    ("2) A larger local batch is easier to parallelise: BERT-Base reaches a higher best speedup than BERT-Large",
     lambda m: _easier_to_scale(m, "bert-base", "bert-large", f"{_si('bert-base')} vs {_si('bert-large')}")),
    ("3) Without pipelining, BSP-A2A outperforms BSP-PS in all cases",
     lambda m: _a_beats_b(m, "bsp-a2a", "bsp-ps")),
    ("4) WFBP beats BSP on both architectures (in most cases)", _wfbp_beats_bsp),
    ("3) With WFBP, PS outperforms A2A at 32 workers (WFBP-PS > WFBP-A2A)",
     lambda m: _a_beats_b(m, "wfbp-ps", "wfbp-a2a", at_scale=True)),
    ("5) MG-WFBP is the fastest A2A method for BERT-Large at 32 workers",
     lambda m: _fastest_of(m.get("bert-large", {}), "mg-wfbp", A2A, "bert-large")),
    ("5) MG-WFBP is the fastest A2A method for BERT-Base at 32 workers",
     lambda m: _fastest_of(m.get("bert-base", {}), "mg-wfbp", A2A, "bert-base")),
    ("5) Tensor fusion fixes WFBP-A2A's start-up cost: MG-WFBP beats WFBP-A2A at 32 workers",
     lambda m: _a_beats_b(m, "mg-wfbp", "wfbp-a2a", at_scale=True)),
    ("6) Tensor partition suits PS: ByteScheduler-PS beats WFBP-PS on ResNet-50 at 32 workers",
     lambda m: _a_beats_b(m, "bytescheduler-ps", "wfbp-ps", only=("resnet50",), at_scale=True)),
    ("6) ...but not A2A: ByteScheduler-A2A is slower than MG-WFBP in all cases",
     lambda m: _a_beats_b(m, "mg-wfbp", "bytescheduler-a2a")),
    ("3) No single winner: ByteScheduler-PS edges out MG-WFBP on ResNet-50 at 32 workers",
     lambda m: _a_beats_b(m, "bytescheduler-ps", "mg-wfbp", only=("resnet50",), at_scale=True)),
]


def check(models: Models) -> list[Verdict]:
    return [Verdict(text, *fn(models)) for text, fn in CHECKS]
