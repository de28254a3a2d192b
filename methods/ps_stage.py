"""Staging between device and host for the PS engine: BytePS's COPYD2H and COPYH2D stages, done
so that no thread that matters waits on a copy, and "done" means the data is there (DESIGN
section 6).

On CUDA:
* push (`to_host`): the device-to-host copy goes into a pinned buffer on a copy stream of its
  own, non-blocking, after the stream that produced the gradient (or after the collective that
  produced it); the tensor is recorded on that stream (`record_stream`) so its owner may free
  it; an event follows the copy. The `d2h` lane waits on the events in order (one stream
  completes in order) and only then hands the buffer to the wire. The autograd thread only
  enqueues.
* pull (`to_device`): the wire's receiving thread only hands the received bytes over. The
  `h2d` lane copies them into pinned memory if they are not there already (ZeroMQ frames are
  pageable), issues the non-blocking host-to-device copy and the division by W on a second copy
  stream, and the `h2d-done` lane waits for the event before the pull counts as done.
* `mark`, `issue` and `ticket` do the same for the per-machine layer's collectives: the node
  stream waits for the gradient's event, and a collective is complete when an event recorded
  after it has passed.
Completion is therefore always observed on the host, after which any stream may read the data.

On CPU the same calls are plain: a push sends the gradient's own memory (nothing writes it until
its pull lands), and a pull is copied and divided on the `h2d` lane, so the network I/O thread
only receives. Everything device-specific is in `Stager`.
"""
from __future__ import annotations

import contextlib
import queue

import torch

from .base import start_thread


class Lane:
    """One thread that runs queued calls in order. The first error goes to `on_error` (the
    transport fails every waiter) and ends the lane."""

    def __init__(self, name: str, on_error, device=None):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._on_error = on_error
        self._thread = start_thread(self._run, name, device)

    def put(self, call) -> None:
        self._queue.put(call)

    def _run(self) -> None:
        try:
            while True:
                call = self._queue.get()
                if call is None:
                    return
                call()
        except BaseException as exc:
            self._on_error(exc)

    def close(self, timeout_s: float) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)


class Stager:
    """Device <-> host staging and completion for one worker (see the module docstring)."""

    def __init__(self, device: torch.device, on_error):
        self.device = device
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.d2h_stream = torch.cuda.Stream(device)
            self.h2d_stream = torch.cuda.Stream(device)
            self.node_stream = torch.cuda.Stream(device)
            self._h2d_done = Lane("ps-h2d-done", on_error, device)
        self._d2h = Lane("ps-d2h", on_error, device)
        self._h2d = Lane("ps-h2d", on_error, device)

    def host_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, pin_memory=self.cuda)

    # -- pushes -----------------------------------------------------------------------------
    def to_host(self, view: torch.Tensor, buf: torch.Tensor | None, after, then) -> None:
        """Call `then(host)` with host memory holding `view`'s values once they are there.
        `after`: the collective (work) that writes `view`, or None for the calling thread's
        current stream. CUDA: copied into `buf` (pinned) on the D2H stream."""
        if not self.cuda:
            if after is None:
                then(view)
            else:
                self._d2h.put(lambda: (after.wait(), then(view)))
            return
        producer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.d2h_stream):
            if after is None:
                self.d2h_stream.wait_stream(producer)
            else:
                after.wait()  # NCCL: the current (D2H) stream waits for the collective
            buf.copy_(view, non_blocking=True)
            view.record_stream(self.d2h_stream)
            copied = torch.cuda.Event()
            copied.record(self.d2h_stream)
        self._d2h.put(lambda: (copied.synchronize(), then(buf)))

    # -- pulls ------------------------------------------------------------------------------
    def to_device(self, src: torch.Tensor, view: torch.Tensor, divisor: int, bounce: torch.Tensor | None, then) -> None:
        """Off the calling (network I/O) thread: `view` = `src` / `divisor`, then `then()` once
        the result is in `view`. CUDA: `bounce` is a pinned buffer for `src` when `src` is not
        pinned (ZeroMQ frames)."""
        self._h2d.put(lambda: self._copy_in(src, view, divisor, bounce, then))

    def _copy_in(self, src, view, divisor, bounce, then) -> None:
        if not self.cuda:
            view.copy_(src)
            view.div_(divisor)
            then()
            return
        if not src.is_pinned():
            bounce.copy_(src)
            src = bounce
        with torch.cuda.stream(self.h2d_stream):
            view.copy_(src, non_blocking=True)
            view.div_(divisor)
            view.record_stream(self.h2d_stream)
            landed = torch.cuda.Event()
            landed.record(self.h2d_stream)
        self._h2d_done.put(lambda: (landed.synchronize(), then()))

    # -- the per-machine layer's collectives ------------------------------------------------
    def mark(self):
        """Where the calling thread's stream is now (the gradient is produced up to here)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    @contextlib.contextmanager
    def issue(self, marker=None):
        """Issue collectives on the node stream, after `marker` (a `mark()`)."""
        if not self.cuda:
            yield
            return
        with torch.cuda.stream(self.node_stream):
            if marker is not None:
                self.node_stream.wait_event(marker)
            yield

    def ticket(self, work):
        """A call that returns once `work`'s result is in memory: CUDA, an event after the
        collective on the node stream; CPU (Gloo), the work itself."""
        if not self.cuda:
            return work.wait
        with torch.cuda.stream(self.node_stream):
            work.wait()
            done = torch.cuda.Event()
            done.record(self.node_stream)
        return done.synchronize

    def close(self, timeout_s: float) -> None:
        self._d2h.close(timeout_s)
        self._h2d.close(timeout_s)
        if self.cuda:
            self._h2d_done.close(timeout_s)
