"""One small plug-in per collective (as in nccl-tests): buffers of a size, the exact expected
result, and how to run it on torch.distributed and on mpi4py.

`nbytes` is the size nccl-tests reports: the buffer all_reduce/broadcast/reduce work on, the
gathered output of all_gather, the input of reduce_scatter. Values are small integers, exact in
fp16 and bf16, so `wrong` counts real errors: rank r holds (r + 1) + (i mod 3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


def pattern(numel: int, rank: int, dtype, device, offset: int = 0) -> torch.Tensor:
    i = torch.arange(offset, offset + numel, device=device)
    return ((rank + 1) + (i % 3)).to(dtype)


def _sum_over_ranks(numel: int, n: int, dtype, device, offset: int = 0) -> torch.Tensor:
    i = torch.arange(offset, offset + numel, device=device)
    return (n * (n + 1) // 2 + n * (i % 3)).to(dtype)


@dataclass(frozen=True)
class Collective:
    name: str
    setup: Callable  # (numel, n, rank, dtype, device) -> (inp, out, expected or None on this rank)
    torch_op: Callable  # (dist, inp, out, group) -> work or None
    mpi_op: Callable  # (comm, inp, out) -> None (numpy arrays)
    hvd_op: Callable = None  # (hvd, inp, out) -> None; Horovod's out-of-place results are copied into `out`


def _all_reduce_setup(numel, n, rank, dtype, device):
    x = pattern(numel, rank, dtype, device)
    return x, x, _sum_over_ranks(numel, n, dtype, device)


def _broadcast_setup(numel, n, rank, dtype, device):
    x = pattern(numel, rank, dtype, device)
    return x, x, pattern(numel, 0, dtype, device)


def _reduce_setup(numel, n, rank, dtype, device):
    x = pattern(numel, rank, dtype, device)
    return x, x, _sum_over_ranks(numel, n, dtype, device) if rank == 0 else None


def _all_gather_setup(numel, n, rank, dtype, device):
    per = max(1, numel // n)
    out = torch.empty(per * n, dtype=dtype, device=device)
    expected = torch.cat([pattern(per, r, dtype, device) for r in range(n)])
    return pattern(per, rank, dtype, device), out, expected


def _reduce_scatter_setup(numel, n, rank, dtype, device):
    per = max(1, numel // n)
    inp = pattern(per * n, rank, dtype, device)
    return inp, torch.empty(per, dtype=dtype, device=device), _sum_over_ranks(per, n, dtype, device, offset=rank * per)


def _mpi():
    from mpi4py import MPI

    return MPI


def _no_reduce(hvd, i, o):
    raise NotImplementedError("Horovod has no reduce-to-one-rank collective")


COLLECTIVES = {
    c.name: c
    for c in (
        Collective("all_reduce", _all_reduce_setup,
                   lambda d, i, o, g: d.all_reduce(i, group=g, async_op=True),
                   lambda comm, i, o: comm.Allreduce(_mpi().IN_PLACE, i, op=_mpi().SUM),
                   lambda hvd, i, o: hvd.allreduce_(i, op=hvd.Sum, name="commbench.all_reduce")),
        Collective("broadcast", _broadcast_setup,
                   lambda d, i, o, g: d.broadcast(i, src=0, group=g, async_op=True),
                   lambda comm, i, o: comm.Bcast(i, root=0),
                   lambda hvd, i, o: hvd.broadcast_(i, root_rank=0, name="commbench.broadcast")),
        Collective("reduce", _reduce_setup,
                   lambda d, i, o, g: d.reduce(i, dst=0, group=g, async_op=True),
                   lambda comm, i, o: comm.Reduce(_mpi().IN_PLACE if comm.rank == 0 else i, i if comm.rank == 0 else None,
                                                  op=_mpi().SUM, root=0),
                   _no_reduce),
        Collective("all_gather", _all_gather_setup,
                   lambda d, i, o, g: d.all_gather_into_tensor(o, i, group=g, async_op=True),
                   lambda comm, i, o: comm.Allgather(i, o),
                   lambda hvd, i, o: o.copy_(hvd.allgather(i, name="commbench.all_gather"))),
        Collective("reduce_scatter", _reduce_scatter_setup,
                   lambda d, i, o, g: d.reduce_scatter_tensor(o, i, group=g, async_op=True),
                   lambda comm, i, o: comm.Reduce_scatter_block(i, o, op=_mpi().SUM),
                   lambda hvd, i, o: o.copy_(hvd.reducescatter(i, op=hvd.Sum, name="commbench.reduce_scatter"))),
    )
}

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def result_of(coll: Collective, inp, out):
    """The tensor that holds the result on this rank."""
    return out if coll.name in ("all_gather", "reduce_scatter") else inp
