"""Synthetic data, deterministic per (seed, rank, iteration).

The study feeds synthetic inputs (224x224x3 images; 64-token sentences) so that data loading
never enters the measurement; we do the same. The driver generates `profile.distinct_batches`
batches per rank before it measures anything and cycles through them (`batch_index`); the study
(horovod/imagenet_benchmark.py) builds one batch on the GPU and reuses it.
"""
from __future__ import annotations

import torch

_MIX = 1_000_003  # keeps (seed, rank, iteration) streams apart


def stream_seed(seed: int, rank: int, iteration: int) -> int:
    """One RNG seed per (seed, rank, iteration); also seeds dropout for that micro-batch."""
    return ((seed * _MIX + rank) * _MIX + iteration + (1 << 20)) % (2**63 - 1)


def seed_dropout(seed: int, rank: int, iteration: int, device: torch.device) -> None:
    """Seed the generators that dropout draws from for this micro-batch (`stream_seed`): the
    CPU's, and on a GPU its device's. What torch.manual_seed would do for the run, without the
    rest of it: it also seeds every backend not yet initialised (CUDA, XPU, MPS) by queueing a
    call with a formatted Python stack for each: 0.33 ms per iteration inside a worker, whose
    stack is deep, 6% of a tiny-resnet step on this project's CPU, which the runs paid and the
    driver's compute probe did not."""
    s = stream_seed(seed, rank, iteration)
    torch.default_generator.manual_seed(s)
    if device.type == "cuda":
        if not torch.cuda.is_initialized():  # its generators exist once CUDA is (a run's model is on it by now)
            torch.cuda.init()
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(s)


def batch_index(iteration: int, distinct_batches: int) -> int:
    """Which of the `distinct_batches` pre-generated batches iteration `iteration` trains on.

    The one mapping the driver and the single-process reference (tests/helpers.py) share: with
    one batch every iteration reuses it (the study); with one per iteration of a repeat, every
    iteration of a repeat sees its own data."""
    if distinct_batches < 1:
        raise ValueError(f"distinct_batches={distinct_batches!r} is invalid; accepted: an integer >= 1")
    return iteration % distinct_batches


def _generator(seed: int, rank: int, iteration: int) -> torch.Generator:
    return torch.Generator().manual_seed(stream_seed(seed, rank, iteration))


def image_batches(batch: int, image_size: int, num_classes: int):
    def make(seed: int, rank: int, iteration: int, device: torch.device):
        g = _generator(seed, rank, iteration)
        x = torch.randn(batch, 3, image_size, image_size, generator=g)
        y = torch.randint(0, num_classes, (batch,), generator=g)
        return x.to(device), y.to(device)

    return make


def token_batches(batch: int, seq_len: int, vocab_size: int, mask_fraction: float = 0.15):
    """BERT pre-training batches: tokens, masked-LM labels (-100 = not masked), NSP labels."""

    def make(seed: int, rank: int, iteration: int, device: torch.device):
        g = _generator(seed, rank, iteration)
        ids = torch.randint(5, vocab_size, (batch, seq_len), generator=g)
        types = torch.zeros(batch, seq_len, dtype=torch.long)
        types[:, seq_len // 2 :] = 1
        masked = torch.rand(batch, seq_len, generator=g) < mask_fraction
        masked[:, 0] = True  # at least one masked token per sentence
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        ids = torch.where(masked, torch.full_like(ids, 4), ids)  # 4 stands for [MASK]
        nsp = torch.randint(0, 2, (batch,), generator=g)
        out = dict(input_ids=ids, token_type_ids=types, labels=labels, next_sentence_label=nsp)
        return {k: v.to(device) for k, v in out.items()}

    return make
