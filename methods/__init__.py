"""The study's methods, one small plug-in per schedule behind `base.GradSync`.

A method is (architecture) x (schedule): `method` configs name both; the architecture picks the
transport (all-reduce, or push/pull to parameter servers) and the schedule the plug-in.
"""
from __future__ import annotations

# What the launcher's own process checks (config.py: every value before anything starts) needs no
# torch: torch's import costs every launch about 2 s of CPU, so the names that need it load on use.
_FROM_BASE = ("Context", "GradSync", "control_group")  # control_group: for launch.worker
TOPOLOGIES = ("per-machine", "per-gpu")  # a PS method's ps_topology (see ps_node)


def __getattr__(name: str):
    if name in _FROM_BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SCHEDULES = {
    "bsp": "ddlbench.methods.bsp:BSP",
    "wfbp": "ddlbench.methods.wfbp:WFBP",
    "mgwfbp": "ddlbench.methods.mgwfbp:MGWFBP",
    "ddp": "ddlbench.methods.ddp:DDP",
    "bytescheduler": "ddlbench.methods.bytescheduler:ByteScheduler",
    "horovod": "ddlbench.methods.horovod:HorovodOptimizer",
}


def plugin_class(schedule: str):
    import importlib

    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; accepted: {', '.join(SCHEDULES)}")
    module, cls = SCHEDULES[schedule].split(":")
    return getattr(importlib.import_module(module), cls)


def schedule_of(method_cfg) -> str:
    """The plug-in that runs: the config's schedule, except for the study's ByteScheduler-PS
    (`scheduler: byteps`), which was BytePS with `BYTEPS_SERVER_ENABLE_SCHEDULE=1` and BytePS's
    own optimizer: one push/pull per tensor from its gradient hook, every one waited for before
    the step, no worker-side queue (the study set no BYTEPS_SCHEDULING_CREDIT), the servers
    scheduling their engine queues. That is WFBP over PS, with scheduling servers."""
    if method_cfg.schedule == "bytescheduler" and method_cfg.get("scheduler") == "byteps":
        return "wfbp"
    return method_cfg.schedule


def build(method_cfg, ctx: "Context") -> "GradSync":
    plugin = plugin_class(schedule_of(method_cfg))
    if method_cfg.schedule in ("ddp", "horovod"):
        return plugin(method_cfg, ctx)
    return plugin(method_cfg, ctx, make_transport(method_cfg, ctx))


ARCHITECTURES = ("a2a", "ps")


def make_transport(method_cfg, ctx):
    if method_cfg.architecture == "a2a":
        from .transport import AllReduce, HorovodAllReduce

        return HorovodAllReduce(ctx) if ctx.extra.get("engine") == "horovod" else AllReduce(ctx)
    from . import ps_node

    layout = ctx.extra["ps"]  # ps_node.setup's Layout, made on every rank at start-up
    wire = ps_engine(method_cfg).TRANSPORT(ctx, layout, int(method_cfg.partition_bytes))
    return ps_node.wrap(ctx, wire, layout)


def ps_setup(method_cfg, workers: int, servers: int, workers_per_node: int, comm_timeout_s: float,
             startup_timeout_s: float, setup_group):
    """The PS engine's set-up on every rank of the job, servers included (see ps_node.setup)."""
    from . import ps_node

    return ps_node.setup(method_cfg, workers, servers, workers_per_node, comm_timeout_s, startup_timeout_s, setup_group)


# The PS engine's wire: ZeroMQ by default (chosen by measurement), or Gloo point-to-point.
# Each module has the worker side (TRANSPORT) and the server loop (serve(rank, layout, tracer)).
PS_ENGINES = {"zmq": "ddlbench.methods.ps_zmq", "gloo": "ddlbench.methods.ps_gloo"}


def ps_engine(method_cfg):
    import importlib

    return importlib.import_module(PS_ENGINES[method_cfg.get("transport", "zmq")])
