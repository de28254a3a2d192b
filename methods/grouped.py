"""Gradient groups over a transport: the mechanism under BSP, WFBP and MG-WFBP.

A schedule is (groups, when they leave). Parameters are listed in gradient-ready order (the
order backward produces them: last layer first); a group is a run of consecutive parameters
sent as one message. With `eager` the group leaves from the gradient hook of its last member
(wait-free backpropagation); otherwise all groups leave after backward, in order (BSP).
"""
from __future__ import annotations

import torch
from torch import nn

from .base import GradSync
from .transport import AllReduce


def ready_order(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Trainable parameters, last registered first: the usual gradient-ready order."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return named[::-1]


def fuse_by_threshold(sizes: list[int], threshold: int) -> list[list[int]]:
    """Consecutive groups, each closed by the tensor that brings its total to `threshold` or
    more: the rule of the study's `_generate_groups_with_threshold` (HKBU-HPML/ddl-benchmarks,
    mgwfbp/hv_distributed_optimizer.py, which counts elements) and of DDP's bucket assignment
    (which counts bytes). Threshold 0 means one tensor per group."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        current.append(i)
        total += size
        if total >= threshold:
            groups.append(current)
            current, total = [], 0
    if current:
        groups.append(current)
    return groups


class GroupedSync(GradSync):
    eager = True  # launch each group from the hook that completes it

    def __init__(self, cfg, ctx, transport=None):
        super().__init__(cfg, ctx)
        self.transport = transport or AllReduce(ctx)
        self.named: list[tuple[str, nn.Parameter]] = []
        self.groups: list[list[int]] = []

    # -- subclasses choose the groups -------------------------------------------------------
    def choose_groups(self, model: nn.Module) -> list[list[int]]:
        raise NotImplementedError

    # -- mechanism --------------------------------------------------------------------------
    def setup(self, model: nn.Module) -> None:
        self.named = ready_order(model)
        broadcast_parameters([p for _, p in self.named], self.ctx)
        self.groups = self.choose_groups(model)
        self._group_of = {}
        for g, members in enumerate(self.groups):
            for i in members:
                self._group_of[i] = g
        self._numels = [sum(self.named[i][1].numel() for i in m) for m in self.groups]
        self._buffers = [self._buffer(g) for g in range(len(self.groups))]
        self.transport.prepare(self.with_probe(self._numels))
        self._pending = [len(m) for m in self.groups]
        self._handles: dict[int, object] = {}
        for i, (_, p) in enumerate(self.named):
            p.register_post_accumulate_grad_hook(self._hook(i))

    def _buffer(self, g: int):
        if len(self.groups[g]) == 1:
            return None  # a single tensor is reduced in place, no copy
        p0 = self.named[self.groups[g][0]][1]
        return torch.empty(self._numels[g], dtype=p0.dtype, device=p0.device)

    def _hook(self, index: int):
        def hook(param: torch.Tensor) -> None:
            g = self._group_of[index]
            self._pending[g] -= 1
            if self.eager and self._pending[g] == 0:
                self._launch(g)

        return hook

    def _launch(self, g: int) -> None:
        members = self.groups[g]
        buf = self._buffers[g]
        grads = [self._grad(i) for i in members]
        flat = grads[0].view(-1) if buf is None else pack(grads, buf)
        names = [self.named[i][0] for i in members]
        self._handles[g] = self.transport.reduce_async(flat, iteration=self.iteration, tensors=names, group=g)

    def _grad(self, index: int) -> torch.Tensor:
        p = self.named[index][1]
        if p.grad is None:  # a parameter this batch did not use: it contributes zeros
            p.grad = torch.zeros_like(p)
        return p.grad

    def synchronize(self) -> None:
        # Anything not launched yet leaves now, in group order: all of BSP, and for WFBP any
        # group whose parameters received no gradient this iteration.
        for g in range(len(self.groups)):
            if g not in self._handles:
                self._launch(g)
        for g in range(len(self.groups)):
            self._handles[g].wait()
            buf = self._buffers[g]
            if buf is not None:
                unpack(buf, [self.named[i][1].grad for i in self.groups[g]])
        self._handles.clear()
        self._pending = [len(m) for m in self.groups]

    def group_bytes(self) -> list[int]:
        return [n * self.named[m[0]][1].element_size() for n, m in zip(self._numels, self.groups)]

    def describe(self) -> dict:
        return {"groups": self.group_bytes()}


def pack(tensors: list[torch.Tensor], buf: torch.Tensor) -> torch.Tensor:
    """A fused message: `tensors` one after another in the flat `buf` (one torch.cat)."""
    torch.cat([t.reshape(-1) for t in tensors], out=buf)
    return buf


def unpack(buf: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """The reduced message back into its `tensors` (a copy per tensor)."""
    offset = 0
    for t in tensors:
        t.copy_(buf[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def broadcast_parameters(params, ctx) -> None:
    """Start every worker from rank 0's parameters (they are seeded alike; this makes sure)."""
    if ctx.world == 1:
        return
    if ctx.extra.get("engine") == "horovod":
        from ddlbench.engines import import_horovod

        hvd = import_horovod()
        with torch.no_grad():
            for i, p in enumerate(params):
                hvd.broadcast_(p.data, root_rank=0, name=f"ddlbench.broadcast.{i}")
        return
    import torch.distributed as dist

    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0, group=ctx.group)
