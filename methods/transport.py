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

    @staticmethod
    def _args(flat: torch.Tensor, iteration: int, tensors: list[str], group: int, extra_args: dict | None) -> dict:
        return {"iter": iteration, "bytes": flat.numel() * flat.element_size(), "tensors": tensors, "group": group,
                **(extra_args or {})}


class AllReduce(_Averaging):
    """Averages a flat tensor in place over torch.distributed."""

    name = "allreduce"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.group = ctx.group

    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None) -> Handle:
        """`on_done()` runs on the backend's thread once the average is in `flat`."""
        tracer = self.ctx.tracer
        if self._alone(on_done):
            return Handle(None)
        flat.div_(self.ctx.world)
        t0 = tracer.now_us() if tracer.enabled else 0.0
        work = dist.all_reduce(flat, group=self.group, async_op=True)
        if tracer.enabled or on_done is not None:
            args = self._args(flat, iteration, tensors, group, extra_args)

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

    def benchmark(self, t: torch.Tensor) -> None:
        """One blocking sum, untraced (MG-WFBP's alpha-beta microbenchmark)."""
        dist.all_reduce(t, group=self.group)


class HorovodAllReduce(_Averaging):
    """The same averaging over Horovod: `allreduce_async_` per message, Horovod's own fusion
    off (see `engines.horovod_env`). Horovod has no completion callbacks, so when a trace or an
    `on_done` needs the moment a message lands, one poller thread watches the handles; the
    trace's end times are then accurate to the poll interval (0.1 ms)."""

    name = "horovod"
    POLL_S = 1e-4

    def __init__(self, ctx):
        import threading

        from ddlbench.engines import import_horovod

        super().__init__(ctx)
        self.hvd = import_horovod()
        self._pending: list = []  # (handle, t0, args, on_done, event)
        self._cond = threading.Condition()
        self._thread = None
        self._stop = False

    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None) -> Handle:
        import threading

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
                self._thread = threading.Thread(target=self._poll, daemon=True, name="horovod-poller")
                self._thread.start()
            self._cond.notify()
        return Handle(None, on_wait=lambda: self._wait(landed))

    def _wait(self, landed) -> None:
        timeout = self.ctx.comm_timeout_s
        if not landed.wait(timeout) or self.error is not None:
            raise RuntimeError(f"Horovod all-reduce did not complete within {timeout} s: {self.error or 'peer dead or hung'}")

    def _poll(self) -> None:
        import time

        hvd, tracer = self.hvd, self.ctx.tracer
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
                if self.error is None:
                    if tracer.enabled:
                        tracer.complete("allreduce", "comm", t0, tracer.now_us(), args, lane="comm")
                    if on_done is not None:
                        on_done()
                landed.set()
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
