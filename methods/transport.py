"""All-reduce transport over torch.distributed (Gloo for CPU tensors, NCCL for GPU tensors).

Every message is traced as one `comm` event from launch to completion: the end time comes from
the collective's future, so overlap with backward shows in the timeline as it really happened.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


class Handle:
    def __init__(self, work, on_wait=None):
        self._work = work
        self._on_wait = on_wait

    def wait(self) -> None:
        if self._work is not None:
            self._work.wait()
        if self._on_wait is not None:
            self._on_wait()


class AllReduce:
    """Averages a flat tensor in place: pre-divide by the world size, then sum."""

    name = "allreduce"

    def __init__(self, ctx):
        self.ctx = ctx
        self.group = ctx.group
        self.error: BaseException | None = None

    def prepare(self, message_numels: list[int]) -> None:
        pass  # collectives need no plan

    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None) -> Handle:
        """`on_done()` runs on the backend's thread once the average is in `flat`."""
        world = self.ctx.world
        tracer = self.ctx.tracer
        if world == 1:
            if on_done is not None:
                on_done()
            return Handle(None)
        flat.div_(world)
        t0 = tracer.now_us() if tracer.enabled else 0.0
        work = dist.all_reduce(flat, group=self.group, async_op=True)
        if tracer.enabled or on_done is not None:
            args = {"iter": iteration, "bytes": flat.numel() * flat.element_size(), "tensors": tensors,
                    "group": group, **(extra_args or {})}

            def done(fut, t0=t0, args=args):
                try:
                    fut.value()
                except Exception as exc:  # a dead peer: waiters polling `error` fail now
                    self.error = exc
                    raise
                if tracer.enabled:
                    tracer.complete("allreduce", "comm", t0, tracer.now_us(), args, lane="comm")
                if on_done is not None:
                    on_done()
                return fut.value()

            work.get_future().then(done)
        return Handle(work)
