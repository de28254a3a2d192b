"""Workloads: a model, its synthetic batches and its loss, built from a `model` config.

Every batch is a pure function of (seed, rank, iteration), so every method, and the
single-process reference in the tests, sees exactly the same data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import data

FAMILIES = ("torchvision", "tiny-resnet", "bert")


@dataclass
class Workload:
    name: str
    model: torch.nn.Module
    local_batch: int
    make_batch: Callable[[int, int, int, torch.device], Any]  # (seed, rank, iteration, device)
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]


def build(model_cfg, local_batch: int, seed: int) -> Workload:
    """Build the workload; parameters are initialised from `seed`, identically on every rank."""
    family = model_cfg.family
    torch.manual_seed(seed)
    if family in ("torchvision", "tiny-resnet"):
        from . import vision

        model = vision.build(model_cfg)
        make_batch = data.image_batches(local_batch, model_cfg.image_size, model_cfg.num_classes)
        loss = vision.loss
    elif family == "bert":
        from . import bert

        model = bert.build(model_cfg)
        make_batch = data.token_batches(local_batch, model_cfg.seq_len, model_cfg.vocab_size)
        loss = bert.loss
    else:
        raise ValueError(f"unknown model family {family!r}; accepted: {', '.join(FAMILIES)}")
    return Workload(model_cfg.name, model, local_batch, make_batch, loss)


def on_meta(name: str) -> Workload:
    """The model of `conf/model/<name>.yaml` built on the meta device: shapes only, no memory
    and no time (BERT-Large included), for counting parameters and operations."""
    from omegaconf import OmegaConf

    from ddlbench.config import conf_dir

    cfg = OmegaConf.load(conf_dir() / "model" / f"{name}.yaml")
    with torch.device("meta"):
        return build(cfg, 1, seed=0)
