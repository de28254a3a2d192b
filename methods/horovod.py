"""Horovod's own `hvd.DistributedOptimizer` with Horovod's default fusion and cycle: the
reference the Horovod engine's methods are compared with, as DDP is for the torch engine.

Its gradient hooks start one `allreduce_async_` per tensor during backward; Horovod's background
thread fuses what is ready within a cycle. `optimizer.step()` waits for them, then updates.
"""
from __future__ import annotations

from .base import GradSync


class HorovodOptimizer(GradSync):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        from ddlbench.engines import import_horovod

        if ctx.extra.get("engine") != "horovod":
            raise ValueError("method=horovod runs on engine=horovod only")
        self.hvd = import_horovod()

    def setup(self, model) -> None:
        self.model = model
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    def wrap_optimizer(self, opt):
        self.opt = self.hvd.DistributedOptimizer(opt, named_parameters=self.model.named_parameters(),
                                                 op=self.hvd.Average)
        return self.opt

    def synchronize(self) -> None:
        pass  # DistributedOptimizer.step() waits for its all-reduces before it updates

    def describe(self) -> dict:
        import os

        return {"groups": None, "horovod_fusion_threshold": os.environ.get("HOROVOD_FUSION_THRESHOLD", "default"),
                "horovod_cycle_time": os.environ.get("HOROVOD_CYCLE_TIME", "default")}
