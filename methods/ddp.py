"""PyTorch DistributedDataParallel with its default buckets: the baseline users reach for.

DDP all-reduces 25 MiB buckets from autograd hooks and waits for them before backward returns.
With tracing on, a communication hook that does what DDP's default does (divide by the world
size, all-reduce the bucket) is registered so each bucket appears in the timeline; its end is
stamped by the all-reduce transport's completion thread, when the data has landed (an NCCL
future's callback can run at enqueue).
"""
from __future__ import annotations

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .base import GradSync


class DDP(GradSync):
    def wrap(self, model):
        kwargs = {"bucket_cap_mb": self.cfg.bucket_cap_mb, "process_group": self.ctx.group}
        if self.ctx.device.type == "cuda":
            kwargs["device_ids"] = [self.ctx.device.index]
        self._names = {id(p): n for n, p in model.named_parameters()}
        self.ddp = DistributedDataParallel(model, **kwargs)  # broadcasts rank 0's parameters
        if self.ctx.tracer.enabled:
            from .transport import AllReduce

            self._landing = AllReduce(self.ctx)
            self.ddp.register_comm_hook(None, self._traced_allreduce)
        return self.ddp

    def setup(self, model) -> None:
        pass

    def _traced_allreduce(self, state, bucket):
        tracer = self.ctx.tracer
        buf = bucket.buffer().div_(self.ctx.world)
        args = {
            "iter": self.iteration,
            "bytes": buf.numel() * buf.element_size(),
            "tensors": [self._names.get(id(p), "?") for p in bucket.parameters()],
            "group": bucket.index(),
        }
        t0 = tracer.now_us()
        work = dist.all_reduce(buf, group=self.ctx.group, async_op=True)
        self._landing.track(work, t0, args)
        return work.get_future().then(lambda fut: fut.value()[0])

    def synchronize(self) -> None:
        pass  # DDP's reducer has already averaged every gradient when backward returns

    def close(self) -> None:
        landing = getattr(self, "_landing", None)
        if landing is not None:
            landing.close()

    def describe(self) -> dict:
        # The reducer's current buckets: DDP rebuilds them after the first iteration in the
        # order gradients arrived (its logging data keeps the first, single-bucket layout).
        buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
        groups = [b.buffer().numel() * b.buffer().element_size() for b in buckets] or None
        return {"groups": groups, "bucket_cap_mb": self.cfg.bucket_cap_mb}
