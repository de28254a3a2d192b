"""Parameter-server architecture with BytePS's semantics, over torch.distributed point-to-point.

S server processes, separate from the W workers, are ranks W..W+S-1 of the same job. Every
message a schedule sends is split into partitions of at most `partition_bytes` (BytePS:
4,096,000 bytes); a partition's key picks its server by the djb2 hash of the key, as BytePS
does. A worker pushes a partition; the server sums the pushes of all W workers and answers
each worker's pull with the sum once every worker has pushed; workers divide by W. Each
partition moves on its own, so partitions of one message overlap.

Wire protocol (Gloo send/recv over the job's own connections, so a dead peer or a timeout
fails the run like any collective): a header [key, iteration] on tag 0, then the payload on
tag key + 1. Gloo point-to-point work has no completion future and only completes when
waited on, so each side runs one receiving thread per peer. GPU workers stage partitions
through pinned host memory, as BytePS does.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

STOP = -1  # header key that ends a receiving thread


def djb2(text: str) -> int:
    h = 5381
    for ch in text.encode():
        h = (h * 33 + ch) & 0xFFFFFFFF
    return h


@dataclass(frozen=True)
class Part:
    key: int
    message: int   # which message of the schedule (group or partition index)
    start: int     # element range within the message
    end: int
    server: int    # 0..S-1

    @property
    def numel(self) -> int:
        return self.end - self.start


def plan(message_numels: list[int], element_size: int, partition_bytes: int, servers: int) -> list[list[Part]]:
    """Partitions of each message; keys are dense integers, servers chosen by djb2(key)."""
    per = max(1, partition_bytes // element_size)
    out, key = [], 0
    for m, numel in enumerate(message_numels):
        parts = []
        for start in range(0, numel, per):
            parts.append(Part(key, m, start, min(numel, start + per), djb2(f"{m}:{start}") % servers))
            key += 1
        out.append(parts)
    return out


class PushPull:
    """Worker side: `reduce_async(flat, ...)` pushes every partition of `flat` to its server and
    returns a handle that, once waited, leaves the average over workers in `flat`."""

    name = "pushpull"

    def __init__(self, ctx, workers: int, servers: int, partition_bytes: int, dtype=torch.float32):
        self.ctx = ctx
        self.W, self.S = workers, servers
        self.partition_bytes = partition_bytes
        self.dtype = dtype
        self.parts: list[list[Part]] = []
        self._send_locks = [threading.Lock() for _ in range(servers)]
        self._pending: dict[int, _PartHandle] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._acks: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None

    # -- set-up: every rank, servers included, takes part -----------------------------------
    def prepare(self, message_numels: list[int]) -> None:
        self._plan(message_numels)
        self._pull_bufs = {p.key: torch.empty(p.numel, dtype=self.dtype, pin_memory=self._pin()) for ps in self.parts for p in ps}
        self._push_bufs = dict(self._pull_bufs) if self.ctx.device.type == "cpu" else \
            {k: torch.empty_like(v, pin_memory=True) for k, v in self._pull_bufs.items()}
        for s in range(self.S):
            t = threading.Thread(target=self._receive_from, args=(s,), daemon=True, name=f"pull-from-server{s}")
            t.start()
            self._threads.append(t)
        ack = threading.Thread(target=self._acknowledge, daemon=True, name="push-acks")
        ack.start()
        self._threads.append(ack)

    def _pin(self) -> bool:
        return self.ctx.device.type == "cuda"

    def _plan(self, message_numels: list[int]) -> None:
        """Partition the messages and tell every rank, servers included, the plan."""
        self.parts = plan(message_numels, torch.tensor([], dtype=self.dtype).element_size(), self.partition_bytes, self.S)
        announce_plan(self.parts, self.ctx, self.dtype)

    def _stage(self, part: Part, view: torch.Tensor, iteration: int, tensors, extra_args, on_done, on_pushed):
        """The partition's handle, registered for its pull, and its push buffer holding `view`
        (device -> pinned host on GPU; a copy also frees `view` for the pull)."""
        h = _PartHandle(part, view, self, iteration, tensors, extra_args, on_done, on_pushed)
        with self._lock:
            self._pending[part.key] = h
        buf = self._push_bufs[part.key]
        buf.copy_(view)
        return h, buf

    def _join(self) -> None:
        for t in self._threads:
            t.join(timeout=self.ctx.comm_timeout_s)

    # -- push ------------------------------------------------------------------------------
    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None, on_pushed=None):
        """`on_pushed()` runs once the servers hold every partition of `flat`, `on_done()` once
        every partition's average is back in `flat` (both on this transport's threads)."""
        parts = self.parts[group]
        pushed, done = _countdown(len(parts), on_pushed), _countdown(len(parts), on_done)
        return _Joined([self.push(p, flat[p.start:p.end], iteration, tensors, extra_args, done, pushed) for p in parts])

    def push(self, part: Part, view: torch.Tensor, iteration: int, tensors, extra_args=None, on_done=None,
             on_pushed=None) -> "_PartHandle":
        h, buf = self._stage(part, view, iteration, tensors, extra_args, on_done, on_pushed)
        dst = self.W + part.server
        header = torch.tensor([part.key, iteration], dtype=torch.int64)
        with self._send_locks[part.server]:  # a header and its payload go out back to back
            h.sends = [dist.isend(header, dst=dst, tag=0), dist.isend(buf, dst=dst, tag=part.key + 1)]
        h.header = header  # keep the header alive until sent
        self._acks.put(h)
        return h

    def _acknowledge(self) -> None:
        """Wait on every push in order: a finished send means the server holds the partition."""
        try:
            while True:
                h = self._acks.get()
                if h is None:
                    return
                for work in h.sends:
                    work.wait()
                h.pushed()
        except BaseException as exc:
            self.fail(exc)

    # -- pull ------------------------------------------------------------------------------
    def _receive_from(self, s: int) -> None:
        src = self.W + s
        header = torch.empty(2, dtype=torch.int64)
        try:
            while True:
                dist.recv(header, src=src, tag=0)
                key = int(header[0])
                if key == STOP:
                    return
                buf = self._pull_bufs[key]
                dist.recv(buf, src=src, tag=key + 1)
                with self._lock:
                    h = self._pending.pop(key)
                h.arrived(buf)
        except BaseException as exc:  # a dead server: fail every waiter instead of hanging
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """A dead server or peer: record why and wake every waiter, so the run fails now."""
        self.error = exc
        with self._lock:
            for h in self._pending.values():
                h.event.set()
                h.acked.set()

    def close(self) -> None:
        """Tell every server this worker is done; the servers answer with STOP headers."""
        for s in range(self.S):
            with self._send_locks[s]:
                dist.send(torch.tensor([STOP, -1], dtype=torch.int64), dst=self.W + s, tag=0)
        self._acks.put(None)
        self._join()


class _PartHandle:
    def __init__(self, part, view, transport, iteration, tensors, extra_args, on_done, on_pushed):
        self.part, self.view, self.transport = part, view, transport
        self.event = threading.Event()
        self.acked = threading.Event()
        self.on_done, self.on_pushed = on_done, on_pushed
        self.sends = []
        tracer = transport.ctx.tracer
        self.t0 = tracer.now_us() if tracer.enabled else 0.0
        self.args = {"iter": iteration, "bytes": part.numel * view.element_size(), "tensors": tensors,
                     "group": part.message, "partition": part.key, "server": part.server, **(extra_args or {})}

    def pushed(self) -> None:
        tracer = self.transport.ctx.tracer
        if tracer.enabled:
            self.args["pushed_us"] = round(tracer.now_us(), 3)
        self.acked.set()
        if self.on_pushed is not None:
            self.on_pushed()

    def arrived(self, summed: torch.Tensor) -> None:
        self.view.copy_(summed)
        self.view.div_(self.transport.W)
        tracer = self.transport.ctx.tracer
        if tracer.enabled:
            tracer.complete("push_pull", "comm", self.t0, tracer.now_us(), self.args, lane="comm")
        self.event.set()
        if self.on_done is not None:
            self.on_done()

    def wait(self) -> None:
        timeout = self.transport.ctx.comm_timeout_s
        self.acked.wait(timeout)
        if not self.event.wait(timeout) or self.transport.error is not None:
            raise RuntimeError(f"no pull from server {self.part.server} for partition {self.part.key} "
                               f"within {timeout} s: {self.transport.error or 'server dead or hung'}")


def _countdown(n: int, then):
    """A callable that runs `then()` on its n-th call."""
    left = [n]
    lock = threading.Lock()

    def tick() -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last and then is not None:
            then()

    return tick


class _Joined:
    def __init__(self, handles):
        self.handles = handles

    def wait(self) -> None:
        for h in self.handles:
            h.wait()


def announce_plan(parts, ctx, dtype) -> None:
    """Rank 0 sends the partition plan to every rank of the job (servers learn their keys)."""
    obj = [[(p.key, p.numel, p.server) for ps in parts for p in ps], str(dtype).removeprefix("torch.")]
    dist.broadcast_object_list(obj, src=0)


def receive_plan(rank: int, workers: int) -> tuple[int, dict[int, int], torch.dtype]:
    """A server's side of `announce_plan`: (server index, {key: numel} it owns, dtype)."""
    obj = [None, None]
    dist.broadcast_object_list(obj, src=0)
    keys, dtype = obj[0], getattr(torch, obj[1])
    me = rank - workers
    return me, {k: n for k, n, s in keys if s == me}, dtype


# -- the server process ---------------------------------------------------------------------
def serve(rank: int, workers: int, tracer, timeout_s: float) -> dict:
    """Run one server until every worker has said STOP; returns counts for the record."""
    me, mine, dtype = receive_plan(rank, workers)
    acc = {k: torch.zeros(n, dtype=dtype) for k, n in mine.items()}
    count = {k: 0 for k in mine}
    key_locks = {k: threading.Lock() for k in mine}
    send_locks = [threading.Lock() for _ in range(workers)]
    stats = {"server": me, "keys": len(mine), "pushes": 0, "bytes_in": 0}

    def reply(key: int, iteration: int) -> None:
        t0 = tracer.now_us() if tracer.enabled else 0.0
        for w in range(workers):
            with send_locks[w]:
                dist.send(torch.tensor([key, iteration], dtype=torch.int64), dst=w, tag=0)
                dist.send(acc[key], dst=w, tag=key + 1)
        if tracer.enabled:
            tracer.complete("pull_served", "server", t0, tracer.now_us(),
                            {"iter": iteration, "key": key, "server": me, "bytes": acc[key].numel() * acc[key].element_size(),
                             "workers": workers}, lane="server")

    def from_worker(w: int) -> None:
        header = torch.empty(2, dtype=torch.int64)
        scratch = {}
        while True:
            dist.recv(header, src=w, tag=0)
            key, iteration = int(header[0]), int(header[1])
            if key == STOP:
                return
            buf = scratch.get(key)
            if buf is None:
                buf = scratch[key] = torch.empty(mine[key], dtype=dtype)
            t0 = tracer.now_us() if tracer.enabled else 0.0
            dist.recv(buf, src=w, tag=key + 1)
            if tracer.enabled:
                tracer.complete("push_received", "server", t0, tracer.now_us(),
                                {"iter": iteration, "key": key, "server": me, "worker": w, "bytes": buf.numel() * buf.element_size()},
                                lane="server")
            with key_locks[key]:
                t1 = tracer.now_us() if tracer.enabled else 0.0
                if count[key] == 0:
                    acc[key].copy_(buf)
                else:
                    acc[key].add_(buf)
                count[key] += 1
                stats["pushes"] += 1
                stats["bytes_in"] += buf.numel() * buf.element_size()
                if tracer.enabled:
                    tracer.complete("sum", "server", t1, tracer.now_us(),
                                    {"iter": iteration, "key": key, "server": me, "pushes": count[key]}, lane="server")
                if count[key] == workers:
                    reply(key, iteration)  # under the key's lock: the next round's pushes wait for it
                    count[key] = 0

    errors = []

    def guarded(w):
        try:
            from_worker(w)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,), daemon=True, name=f"push-from-worker{w}") for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for w in range(workers):  # release each worker's receiving thread
        with send_locks[w]:
            dist.send(torch.tensor([STOP, -1], dtype=torch.int64), dst=w, tag=0)
    return stats


TRANSPORT = PushPull  # see methods.ps_engine
