"""All-reduce transport over torch.distributed (Gloo for CPU tensors, NCCL for GPU tensors).

Every message is traced as one `comm` event from launch to completion: the end time is when the
data has landed (see `AllReduce`), so overlap with backward shows in the timeline as it really
happened.
"""
from __future__ import annotations

import functools
import os
import queue
import threading
import time

import torch
import torch.distributed as dist

from .base import start_thread


class Handle:
    def __init__(self, work, on_wait=None):
        self._work = work
        self._on_wait = on_wait

    def wait(self) -> None:
        if self._work is not None:
            self._work.wait()
        if self._on_wait is not None:
            self._on_wait()


class _Averaging:
    """What the all-reduce transports share: no plan, a message averaged in place by
    pre-dividing by the world size and summing, one `comm` trace event per message."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.error: BaseException | None = None

    def prepare(self, message_numels: list[int]) -> None:
        pass  # collectives need no plan

    def _alone(self, on_done) -> bool:
        """One worker: nothing to send; the average is already in place."""
        if self.ctx.world > 1:
            return False
        if on_done is not None:
            on_done()
        return True

    def _wait(self, landed: threading.Event) -> None:
        timeout = self.ctx.comm_timeout_s
        if not landed.wait(timeout) or self.error is not None:
            raise RuntimeError(f"{self.label} did not complete within {timeout} s: {self.error or 'peer dead or hung'}")

    def _report(self, t0: float, args: dict, on_done, landed: threading.Event) -> None:
        """A message has landed (or failed, with `error` set): trace it, run `on_done`, wake its waiter."""
        if self.error is None:
            tracer = self.ctx.tracer
            if tracer.enabled:
                tracer.complete("allreduce", "comm", t0, tracer.now_us(), args, lane="comm")
            if on_done is not None:
                on_done()
        landed.set()

    @staticmethod
    def _args(flat: torch.Tensor, iteration: int, tensors: list[str], group: int, extra_args: dict | None) -> dict:
        return {"iter": iteration, "bytes": flat.numel() * flat.element_size(), "tensors": tensors, "group": group,
                **(extra_args or {})}


class AllReduce(_Averaging):
    """Averages a flat tensor in place over torch.distributed.

    Completion means the data is there (DESIGN section 6). A collective's future may resolve
    when NCCL has only queued the work, so nothing here trusts it: when a caller needs the
    moment a message lands (`on_done`, or a trace's end time), one completion thread takes the
    messages in launch order and waits for each with `work.wait()` under a stream of its own,
    then (on CUDA) records an event on that stream and synchronises on it. Only then do the
    trace's end and `on_done` happen, on that thread and outside the side stream, so an update
    `on_done` launches goes to the default stream, ahead of the next forward pass. Launch order
    is also completion order on one communicator (NCCL runs a group's collectives in order);
    on Gloo a later message that lands first is reported when the earlier one has.
    """

    name = "allreduce"
    label = "all-reduce"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.group = ctx.group
        self._collective = collective()
        self._landing = None  # the completion thread's queue, started on first use

    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None) -> Handle:
        """`on_done()` runs on the completion thread once the average is in `flat`."""
        tracer = self.ctx.tracer
        if self._alone(on_done):
            return Handle(None)
        flat.div_(self.ctx.world)
        t0 = tracer.now_us() if tracer.enabled else 0.0
        work = self._collective(flat, group=self.group, async_op=True)
        if not tracer.enabled and on_done is None:
            return Handle(work)  # waited by the caller: work.wait() orders its stream after the sum
        landed = self.track(work, t0, self._args(flat, iteration, tensors, group, extra_args), on_done)
        return Handle(None, on_wait=lambda: self._wait(landed))

    def track(self, work, t0: float, args: dict, on_done=None) -> threading.Event:
        """Hand a launched collective to the completion thread; the event is set once it landed
        (DDP's traced buckets use this too)."""
        landed = threading.Event()
        if self._landing is None:
            self._landing = queue.SimpleQueue()
            self._thread = start_thread(self._complete, "allreduce-completion", self.ctx.device)
        self._landing.put((work, t0, args, on_done, landed))
        return landed

    def _complete(self) -> None:
        device = self.ctx.device
        side = torch.cuda.Stream(device) if device.type == "cuda" else None
        while True:
            item = self._landing.get()
            if item is None:
                return
            work, t0, args, on_done, landed = item
            if self.error is None:
                try:
                    wait_landed(work, side)
                except Exception as exc:  # a dead peer: every waiter fails now
                    self.error = exc
            self._report(t0, args, on_done, landed)

    def benchmark(self, t: torch.Tensor) -> None:
        """One blocking sum, untraced (MG-WFBP's alpha-beta microbenchmark)."""
        dist.all_reduce(t, group=self.group)

    def close(self) -> None:
        """Report every message still landing (a trace saved next must hold them), then stop."""
        if self._landing is not None:
            self._landing.put(None)
            self._thread.join(timeout=self.ctx.comm_timeout_s)


def wait_landed(work, side_stream=None) -> None:
    """Block this thread until `work`'s result is in memory. On CPU (Gloo) `work.wait()` does
    that; on CUDA it only makes the current stream wait for the collective, so wait under a side
    stream and synchronise on an event recorded there after it."""
    if side_stream is None:
        work.wait()
        return
    with torch.cuda.stream(side_stream):
        work.wait()
        event = torch.cuda.Event()
        event.record(side_stream)
    event.synchronize()


# -- a test-only transport whose completions are reported early ------------------------------
EARLY_COMPLETION_ENV = "DDLBENCH_TEST_EARLY_COMPLETION_S"


def collective():
    """`dist.all_reduce`, or (test-only, with DDLBENCH_TEST_EARLY_COMPLETION_S=<delay>) a CPU
    stand-in for NCCL's enqueue-time futures: see `early_completion_all_reduce`."""
    delay = os.environ.get(EARLY_COMPLETION_ENV)
    if not delay:
        return dist.all_reduce
    return functools.partial(early_completion_all_reduce, delay_s=float(delay))


def early_completion_all_reduce(flat: torch.Tensor, *, group=None, async_op: bool = True, delay_s: float):
    """An all-reduce whose future resolves at once while its sum lands in `flat` only `delay_s`
    after the real collective finished: what a callback on an NCCL future can see. Code that
    takes the future for completion returns credit, updates and trace ends too early; code that
    waits on the work sees the data. Test-only: the runs that use it record the variable."""
    scratch = flat.clone()
    real = dist.all_reduce(scratch, group=group, async_op=True)
    landed = threading.Event()

    def land() -> None:
        real.wait()
        time.sleep(delay_s)
        flat.copy_(scratch)
        landed.set()

    start_thread(land, "early-completion", flat.device)  # Gloo; CUDA tensors with launcher.share_gpu
    return _EarlyWork(landed)


class _EarlyWork:
    def __init__(self, landed: threading.Event):
        self._landed = landed

    def get_future(self) -> torch.futures.Future:
        fut = torch.futures.Future()
        fut.set_result(None)  # resolved at enqueue, before the data has arrived
        return fut

    def wait(self, timeout=None) -> bool:
        return self._landed.wait(timeout.total_seconds() if timeout is not None else None)

    def is_completed(self) -> bool:
        return self._landed.is_set()


class HorovodAllReduce(_Averaging):
    """The same averaging over Horovod: `allreduce_async_` per message, Horovod's own fusion
    off (see `engines.horovod_env`). Horovod has no completion callbacks, so when a trace or an
    `on_done` needs the moment a message lands, one poller thread watches the handles; the
    trace's end times are then accurate to the poll interval (0.1 ms)."""

    name = "horovod"
    label = "Horovod all-reduce"
    POLL_S = 1e-4

    def __init__(self, ctx):
        from ddlbench.engines import import_horovod

        super().__init__(ctx)
        self.hvd = import_horovod()
        self._pending: list = []  # (handle, t0, args, on_done, event)
        self._cond = threading.Condition()
        self._thread = None
        self._stop = False

    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None) -> Handle:
        hvd, tracer = self.hvd, self.ctx.tracer
        if self._alone(on_done):
            return Handle(None)
        flat.div_(self.ctx.world)
        t0 = tracer.now_us() if tracer.enabled else 0.0
        # One name per message slot: the same name on every rank is how Horovod matches them.
        handle = hvd.allreduce_async_(flat, name=f"ddlbench.{group}", op=hvd.Sum)
        if not tracer.enabled and on_done is None:
            return Handle(None, on_wait=lambda: hvd.synchronize(handle))
        args = self._args(flat, iteration, tensors, group, extra_args)
        landed = threading.Event()
        with self._cond:
            self._pending.append((handle, t0, args, on_done, landed))
            if self._thread is None:
                self._thread = start_thread(self._poll, "horovod-poller", self.ctx.device)
            self._cond.notify()
        return Handle(None, on_wait=lambda: self._wait(landed))

    def _poll(self) -> None:
        hvd = self.hvd
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                pending = list(self._pending)
            done = [p for p in pending if hvd.poll(p[0])]
            for item in done:
                handle, t0, args, on_done, landed = item
                try:
                    hvd.synchronize(handle)
                except Exception as exc:  # a dead peer: every waiter fails now
                    self.error = exc
                self._report(t0, args, on_done, landed)
            with self._cond:
                for item in done:
                    self._pending.remove(item)
            if not done:
                time.sleep(self.POLL_S)

    def benchmark(self, t: torch.Tensor) -> None:
        self.hvd.allreduce_(t, name="ddlbench.benchmark", op=self.hvd.Sum)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
