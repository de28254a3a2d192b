"""Engines: the libraries that move the workers' gradients.

* `torch`: torch.distributed (Gloo for CPU tensors, NCCL for GPU tensors). The default.
* `horovod`: Horovod's collectives (`allreduce_async_`), started by horovodrun or mpirun. The
  study ran its all-reduce methods on Horovod with Horovod's own fusion switched off, so the
  method alone decides what is sent when; `engine.fusion_threshold_bytes` etc. set that up.

Whatever the engine, the ranks also share a torch.distributed Gloo group for control messages
(rank 0's decisions, the end-of-run gather); on Horovod it is bootstrapped through Horovod.
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

ENGINES = ("torch", "horovod")
INSTALL_HOROVOD = "install it with `make horovod` (launch/install/horovod.sh builds horovod 0.28.1 against this torch)"


class EngineUnavailable(RuntimeError):
    pass


def import_horovod():
    """`horovod.torch`, or a one-line error saying how to install it."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise EngineUnavailable(f"engine=horovod: Horovod is not installed for {sys.executable} ({exc}); "
                                f"{INSTALL_HOROVOD}") from None
    return hvd


def horovod_available() -> tuple[bool, str]:
    try:
        import_horovod()
    except EngineUnavailable as exc:
        return False, str(exc)
    return True, ""


def horovod_env(engine_cfg, method_cfg) -> dict:
    """Horovod's knobs for this run: its fusion and cycle off when the method does the
    scheduling (the study's setting), Horovod's defaults for the `horovod` reference method."""
    if method_cfg.schedule == "horovod":
        return {}
    return unfused_env(engine_cfg.fusion_threshold_bytes, engine_cfg.cycle_time_ms, engine_cfg.cache_capacity)


def unfused_env(fusion_threshold_bytes=0, cycle_time_ms=0, cache_capacity=0) -> dict:
    """Horovod sends each call as it comes: no fusion buffer, no cycle wait, no response cache."""
    return {
        "HOROVOD_FUSION_THRESHOLD": str(int(fusion_threshold_bytes)),
        "HOROVOD_CYCLE_TIME": str(cycle_time_ms),
        "HOROVOD_CACHE_CAPACITY": str(int(cache_capacity)),
    }


def init_process_group(backend: str, rank: int, world: int, startup_timeout_s: float, comm_timeout_s: float,
                       init_method: str = "env://") -> None:
    """torch.distributed's default group, met under the start-up bound, then working under the
    communication bound. The ranks first meet on the rendezvous store, waiting there for the
    slowest to import torch and arrive (on a busy machine that takes longer than a short
    `comm_timeout_s`); only then is the group made, under `comm_timeout_s`, which Gloo keeps for
    its point-to-point waits (`_set_pg_timeout` changes only the collectives'), so a lost peer
    still fails a `recv` within it."""
    import torch.distributed as dist

    store, rank, world = next(dist.rendezvous(init_method, rank=rank, world_size=world,
                                              timeout=timedelta(seconds=startup_timeout_s)))
    store.set(f"ddlbench/arrived/{rank}", "1")
    try:
        store.wait([f"ddlbench/arrived/{r}" for r in range(world)], timedelta(seconds=startup_timeout_s))
    except Exception as exc:  # name who never came, not just the store's key list
        try:
            missing = ", ".join(str(r) for r in range(world) if not store.check([f"ddlbench/arrived/{r}"]))
        except Exception:  # the store itself is gone (its host, rank 0, died)
            missing = "?"
        raise RuntimeError(f"rank(s) {missing} never reached the rendezvous within startup_timeout_s="
                           f"{startup_timeout_s:g} s ({' '.join(str(exc).split())[:200]})") from None
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=comm_timeout_s))


def init_horovod(timeout_s: float) -> tuple[int, int, int]:
    """hvd.init(), then a torch.distributed Gloo group over the same ranks, whose address rank 0
    picks and Horovod broadcasts. Returns (rank, world size, local rank)."""
    import torch.distributed as dist

    hvd = import_horovod()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    addr = None
    if rank == 0:
        host = os.environ.get("DDLBENCH_CONTROL_ADDR") or _routable_address(hvd)
        with socket.socket() as s:
            s.bind(("", 0))
            addr = (host, s.getsockname()[1])
    host, port = hvd.broadcast_object(addr, root_rank=0, name="ddlbench.control_addr")
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    return rank, world, hvd.local_rank()


def _routable_address(hvd) -> str:
    """This host's address as the other ranks see it: loopback when every rank is local."""
    if hvd.cross_size() <= 1:
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())
