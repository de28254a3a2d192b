"""BERT pre-training (masked LM + next-sentence prediction) from a transformers config.

Nothing is downloaded: the architecture comes from `BertConfig` with the sizes in the model's
config file, and parameters are initialised from the run's seed.
"""
from __future__ import annotations

import torch
from torch import nn

from .vision import import_torchvision


def build(cfg) -> nn.Module:
    # transformers imports torchvision when it is installed: make that import work first.
    import_torchvision()
    from transformers import BertConfig, BertForPreTraining

    config = BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=max(512, cfg.seq_len),
    )
    return BertForPreTraining(config)


def loss(model: nn.Module, batch) -> torch.Tensor:
    return model(**batch).loss
