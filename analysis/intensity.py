"""Model intensity I = C / D and the C2C ratio, as the study defines them (see `metrics`).

C is counted, not estimated by hand: one forward and backward pass of one sample under
`torch.utils.flop_counter.FlopCounterMode`, on the meta device (shapes only: BERT-Large costs no
memory and no time). FlopCounterMode counts a multiply-add as two floating-point operations;
the study counts it as one operation (its I = 470 for ResNet-50 matches multiply-adds), so
C = counted FLOPs / 2. The traffic factor of the C2C ratio is ring all-reduce's
f(N) = 2 (N - 1) / N parameters moved per parameter.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ddlbench import metrics


def ring_allreduce_factor(workers: int) -> float:
    return 2 * (workers - 1) / workers


@lru_cache(maxsize=None)
def count(model: str) -> dict:
    """Parameters D, operations per sample C (multiply-adds of forward + backward) and I."""
    from torch.utils.flop_counter import FlopCounterMode

    from ddlbench import models

    w = models.on_meta(model)
    with torch.device("meta"):
        batch = w.make_batch(0, 0, 0, torch.device("meta"))
        params = sum(p.numel() for p in w.model.parameters())
        with FlopCounterMode(display=False) as fc:
            w.loss(w.model, batch).backward()
    ops = fc.get_total_flops() / 2
    return {"params": params, "ops_per_sample": ops, "intensity": metrics.model_intensity(ops, params)}


def c2c(model: str, local_batch: int, workers: int) -> float:
    facts = count(model)
    return metrics.c2c_ratio(ring_allreduce_factor(workers), workers * local_batch, facts["intensity"])
