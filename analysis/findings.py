"""The study's Table 2 findings, checked on whatever data is present.

Each check reads the cells of one source and network (models with their own batches) and
answers "holds", "does not hold" or "no data", with the numbers it compared. Statements made
"at 32 workers" are checked at 32 where recorded, else at the largest worker count recorded for
the methods involved (the evidence names it). Throughputs compare as means.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ddlbench import metrics

from .reference import STUDY_MODELS
from .tables import Cells, baseline

HOLDS, FAILS, NO_DATA = "holds", "does not hold", "no data"


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


def _fastest_of(cells: Cells, winner: str, rivals: tuple[str, ...], model: str) -> tuple[str, str]:
    present = tuple(m for m in rivals if any(k[0] == m for k in cells))
    if winner not in present or len(present) < 2:
        return NO_DATA, f"{model}: needs {winner} and another of {', '.join(rivals)}"
    n = _scale(cells, present)
    if n is None:
        return NO_DATA, f"{model}: no common worker count"
    ranked = sorted(present, key=lambda m: -cells[(m, n)].mean)
    ev = f"{model} at {n} workers: " + ", ".join(f"{m} {cells[(m, n)].mean:.1f}" for m in ranked)
    return (HOLDS if ranked[0] == winner else FAILS), ev


def _a_beats_b(models: Models, a: str, b: str, only: tuple[str, ...] = (), at_scale: bool = False,
               rule: str = "all") -> tuple[str, str]:
    """a's throughput above b's in every cell (rule="all") or in more than half ("most");
    at_scale: only at the 32-worker (or largest) count of each model."""
    wins, total, ev = 0, 0, []
    for model, cells in models.items():
        if only and model not in only:
            continue
        counts = sorted({w for (m, w) in cells if m == a and w > 1} & {w for (m, w) in cells if m == b})
        if at_scale:
            n = _scale(cells, (a, b))
            counts = [n] if n else []
        for n in counts:
            x, y = cells[(a, n)].mean, cells[(b, n)].mean
            wins += x > y
            total += 1
            ev.append(f"{model}@{n}: {x:.1f} vs {y:.1f}")
    if total == 0:
        return NO_DATA, f"no cell has both {a} and {b}"
    ok = wins == total if rule == "all" else wins > total / 2
    return (HOLDS if ok else FAILS), f"{a} > {b} in {wins}/{total}: " + "; ".join(ev)


def _best_speedup(cells: Cells, n: int) -> float | None:
    base = baseline(cells)
    at_n = [c.mean for (m, w), c in cells.items() if w == n]
    return metrics.speedup(max(at_n), base) if base and at_n else None


def _easier_to_scale(models: Models, easier: str, harder: str, why: str) -> tuple[str, str]:
    if easier not in models or harder not in models:
        return NO_DATA, f"needs {easier} and {harder}"
    common = ({w for (_, w) in models[easier] if w > 1} & {w for (_, w) in models[harder] if w > 1})
    speedups = [(n, _best_speedup(models[easier], n), _best_speedup(models[harder], n)) for n in sorted(common)]
    speedups = [s for s in speedups if s[1] is not None and s[2] is not None]
    if not speedups:
        return NO_DATA, f"needs one-worker runs and a common worker count of {easier} and {harder}"
    n, se, sh = speedups[-1]
    return (HOLDS if se > sh else FAILS), f"best speedup at {n} workers: {easier} {se:.2f}x vs {harder} {sh:.2f}x ({why})"


def _wfbp_beats_bsp(models: Models) -> tuple[str, str]:
    parts = [(_a_beats_b(models, "wfbp-a2a", "bsp-a2a", rule="most"), "A2A"),
             (_a_beats_b(models, "wfbp-ps", "bsp-ps", rule="most"), "PS")]
    known = [(v, e, arch) for (v, e), arch in parts if v != NO_DATA]
    if not known:
        return NO_DATA, "no cell has WFBP and BSP of one architecture"
    verdict = HOLDS if all(v == HOLDS for v, _, _ in known) else FAILS
    return verdict, " | ".join(f"{arch}: {e}" for _, e, arch in known)


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
