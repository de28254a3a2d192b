"""The one gradient-synchronisation interface every method implements.

The timing driver calls, per iteration:

    sync.begin_iteration(it)   # before forward
    loss.backward()            # hooks may launch communication while gradients appear
    sync.synchronize()         # on return every gradient is the average over all workers
    optimizer.step()

A method decides *when* gradients leave (after backward, or from gradient hooks), *how they are
grouped* (one tensor, merged groups, everything) and over *which transport* (all-reduce, or
push/pull to parameter servers). It must be lossless: the averaged gradient equals BSP's.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Context:
    """What a method may use: the process group view, the device, the workload and the tracer."""

    rank: int
    world: int
    device: torch.device
    tracer: Any
    workload: Any = None  # models.Workload; methods that profile the backward pass need it
    seed: int = 0
    group: Any = None  # the workers' process group (None: the default group, no servers)
    # A Gloo group over the workers, whatever the device: control messages (rank 0's decisions,
    # plans, orders) are CPU objects, which NCCL cannot carry (DESIGN section 6).
    control: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def comm_timeout_s(self) -> float:
        """How long any wait on communication may take before the run fails (config `comm_timeout_s`)."""
        return self.extra.get("comm_timeout_s", 30)

    @property
    def startup_timeout_s(self) -> float:
        """How long start-up waits (peers building BERT-Large, servers waiting for their first
        worker) may take: a bound of its own, longer than the communication timeout."""
        return self.extra.get("startup_timeout_s", 600)


def bind_device(device) -> None:
    """Make `device` the calling thread's CUDA device. A new thread starts on cuda:0, and its
    first CUDA call there (synchronizing an event, leaving a `torch.cuda.stream` block, which
    restores cuda:0's stream) creates a context on GPU 0: every rank of a node would then hold
    one on GPU 0, hundreds of MiB each, out of rank 0's memory. No-op off CUDA."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.set_device(device)


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (Linux's 15 characters), where `top -H`,
    `ps -L` and /proc show it and a per-thread CPU account can find it; Python's own thread name
    never reaches them. No-op elsewhere."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(("ddlb-" + name)[:15].encode()), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass  # a libc without prctl: the thread keeps its process's name


# A worker's helper threads (ByteScheduler's scheduler, completions, PS staging and I/O) run their
# CPU tensor ops on one thread each (`start_thread`'s default). Under OpenMP every thread that runs
# a parallel op gets a team of its own, OMP_NUM_THREADS strong: a helper's team beside the
# worker's outnumbers the cores the launcher sized them for, and libgomp then stops its idle
# threads spinning, so every op of the worker's compute waits for its team to wake. A lone
# ByteScheduler-A2A worker at 2 threads on 2 cores stepped in 9.1 ms until its scheduler thread
# had run an update, and in 20 ms after. The worker's own thread keeps its count (OpenMP's is per
# thread, fixed at its first op; `start_thread` makes the caller's first).
def start_thread(target, name: str, device=None, args: tuple = (), ops_threads: int | None = 1) -> threading.Thread:
    """A started daemon helper thread that runs `target(*args)` on `device` (`bind_device`),
    named `name` in the kernel as well (`name_os_thread`), its own CPU ops on `ops_threads`
    threads (the comment above; None: as many as the caller's, for a PS server's engines,
    whose sums are the server's work, as BytePS's reducer sums on several). Every helper thread
    of a method starts here, so none can forget its device."""
    caller = torch.get_num_threads()  # also fixes the caller's own count (at its first op) before the helper runs

    def run() -> None:
        name_os_thread(name)
        bind_device(device)
        torch.set_num_threads(ops_threads or caller)
        target(*args)

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    return thread


def control_group(workers: int):
    """The Gloo group over the workers that carries control messages (rank 0's decisions,
    orders, plans) on every device: NCCL, the default on GPUs, takes only CUDA tensors. Every
    rank of the job must call this, in the same order as its other `new_group` calls."""
    import torch.distributed as dist

    return dist.new_group(list(range(workers)), backend="gloo") if workers > 1 else None


class GradSync(ABC):
    """Averages gradients across workers; subclasses are the study's schedules."""

    owns_update = False  # True: the method applies the optimizer step itself, per parameter
    # The PS probe's keys (driver: the PS communication probe), set before `setup`: a PS
    # schedule prepares them after its own messages (`with_probe`), and `probe_async` pushes one
    # straight to the transport, past the schedule's queue.
    probe_numels: tuple[int, ...] = ()

    def __init__(self, cfg, ctx: Context):
        self.cfg = cfg
        self.ctx = ctx
        self.iteration = -1

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the driver trains (DDP returns its wrapper)."""
        return model

    @abstractmethod
    def setup(self, model: nn.Module) -> None:
        """Attach hooks, profile, choose groups. Called once, before the first iteration."""

    def wrap_optimizer(self, opt):
        """The optimizer the driver steps (Horovod's reference wraps it)."""
        return opt

    def begin_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    @abstractmethod
    def synchronize(self) -> None:
        """Return once every gradient holds the average over all workers."""

    def before_backward(self) -> None:
        """Called after forward, before backward."""

    def flush(self) -> None:
        """Wait for all communication and updates in flight (end of a repeat)."""

    def close(self) -> None:
        """After the last iteration: release servers and threads."""
        close = getattr(getattr(self, "transport", None), "close", None)
        if close is not None:
            close()

    def with_probe(self, message_numels: list[int]) -> list[int]:
        """The transport's messages: the schedule's, then the probe's keys (`probe_numels`)."""
        self._probe_base = len(message_numels)
        return list(message_numels) + list(self.probe_numels)

    def probe_async(self, k: int, flat: torch.Tensor, iteration: int):
        """Push the probe's key `k` (its own round `iteration`, counted apart from training's);
        the handle's wait leaves the workers' average in `flat`."""
        return self.transport.reduce_async(flat, iteration=iteration, tensors=[f"probe{k}"],
                                           group=self._probe_base + k)

    def describe(self) -> dict:
        """Schedule facts for the run record: message sizes (`groups`) and anything chosen."""
        return {"groups": None}
