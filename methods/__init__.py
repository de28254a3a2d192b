"""The study's methods, one small plug-in per schedule behind `base.GradSync`.

A method is (architecture) x (schedule): `method` configs name both; the architecture picks the
transport (all-reduce, or push/pull to parameter servers) and the schedule the plug-in.
"""
from __future__ import annotations

from .base import Context, GradSync, control_group

SCHEDULES = {
    "bsp": "ddlbench.methods.bsp:BSP",
    "wfbp": "ddlbench.methods.wfbp:WFBP",
    "mgwfbp": "ddlbench.methods.mgwfbp:MGWFBP",
    "ddp": "ddlbench.methods.ddp:DDP",
    "bytescheduler": "ddlbench.methods.bytescheduler:ByteScheduler",
    "horovod": "ddlbench.methods.horovod:HorovodOptimizer",
}


def build(method_cfg, ctx: Context) -> GradSync:
    import importlib

    if method_cfg.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {method_cfg.schedule!r}; accepted: {', '.join(SCHEDULES)}")
    module, cls = SCHEDULES[method_cfg.schedule].split(":")
    plugin = getattr(importlib.import_module(module), cls)
    if method_cfg.schedule in ("ddp", "horovod"):
        return plugin(method_cfg, ctx)
    return plugin(method_cfg, ctx, make_transport(method_cfg, ctx))


ARCHITECTURES = ("a2a", "ps")


def make_transport(method_cfg, ctx):
    if method_cfg.architecture == "a2a":
        from .transport import AllReduce, HorovodAllReduce

        return HorovodAllReduce(ctx) if ctx.extra.get("engine") == "horovod" else AllReduce(ctx)
    return ps_engine(method_cfg).TRANSPORT(ctx, ctx.extra["workers"], ctx.extra["servers"], int(method_cfg.partition_bytes))


# The PS engine's wire: ZeroMQ by default (chosen by measurement), or Gloo point-to-point.
# Each module has the worker side (TRANSPORT) and the server loop (serve).
PS_ENGINES = {"zmq": "ddlbench.methods.ps_zmq", "gloo": "ddlbench.methods.ps"}


def ps_engine(method_cfg):
    import importlib

    return importlib.import_module(PS_ENGINES[method_cfg.get("transport", "zmq")])
