"""The study's methods, one small plug-in per schedule behind `base.GradSync`.

`method` configs name a schedule and an architecture; this registry maps them to plug-ins.
"""
from __future__ import annotations

from .base import Context, GradSync

SCHEDULES = {
    "bsp": "ddlbench.methods.bsp:BSP",
    "wfbp": "ddlbench.methods.wfbp:WFBP",
    "mgwfbp": "ddlbench.methods.mgwfbp:MGWFBP",
    "ddp": "ddlbench.methods.ddp:DDP",
}


def build(method_cfg, ctx: Context) -> GradSync:
    import importlib

    if method_cfg.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {method_cfg.schedule!r}; accepted: {', '.join(SCHEDULES)}")
    module, cls = SCHEDULES[method_cfg.schedule].split(":")
    return getattr(importlib.import_module(module), cls)(method_cfg, ctx)
