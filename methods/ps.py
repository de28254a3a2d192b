"""Parameter-server architecture with BytePS's semantics: the plan, the worker side and the
server's engine threads, shared by the two wires (`ps_zmq`, the default, and `ps_gloo`).

S server processes, separate from the W workers, are ranks W..W+S-1 of the same job. Every
message a schedule sends is split into partitions of at most `partition_bytes` (BytePS:
4,096,000 bytes); a partition's key picks its server by the djb2 hash of the key, as BytePS
does. The pushers (`ps_node.Layout.pushers`: one per machine, its leader, as BytePS does after
reducing inside the machine; or every worker with `ps_topology=per-gpu`) push partitions; a
server sums the pushes of every pusher and answers each of them with the sum, which the pusher
divides by W. Each partition moves on its own, so partitions of one message overlap.

Worker side (`PushPull`): a wire implements `_connect`, `_send` and `_disconnect` and calls
`_pulled` when a sum arrives; staging between device and host (`ps_stage.Stager`) keeps copies
off the autograd thread and off the wire's I/O thread.

Server side (`Engines`): BytePS's engine threads (`BYTEPS_SERVER_ENGINE_THREAD`, 8 in the
study). A key belongs to one thread, chosen at its first push as the thread with the fewest
bytes so far (BytePS's `GetThreadID`: first come, least loaded, then cached); that thread sums
the key's pushes in arrival order (FIFO, `BYTEPS_SERVER_ENABLE_SCHEDULE=0`) and hands each
round's sum back to the wire, whose own I/O never sums.
"""
from __future__ import annotations

import heapq
import queue
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .base import start_thread
from .ps_stage import Stager

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


def recv_within(tensor: torch.Tensor, src: int, tag: int, timeout_s: float, group=None) -> None:
    """`dist.recv` under a bound of its own instead of the process group's timeout."""
    if not dist.irecv(tensor, src=src, tag=tag, group=group).wait(timedelta(seconds=timeout_s)):
        raise RuntimeError(f"nothing from rank {src} within {timeout_s} s")


def announce_plan(parts, dtype, group) -> None:
    """Rank 0 sends the partition plan to every rank of the job (servers learn their keys), over
    the set-up group (Gloo, every rank, bounded by `startup_timeout_s`)."""
    obj = [[(p.key, p.numel, p.server) for ps in parts for p in ps], str(dtype).removeprefix("torch.")]
    dist.broadcast_object_list(obj, src=0, group=group)


def receive_plan(rank: int, layout) -> tuple[int, dict[int, int], torch.dtype]:
    """A server's side of `announce_plan`: (server index, {key: numel} it owns, dtype)."""
    obj = [None, None]
    dist.broadcast_object_list(obj, src=0, group=layout.setup_group)
    keys, dtype = obj[0], getattr(torch, obj[1])
    me = rank - layout.workers
    return me, {k: n for k, n, s in keys if s == me}, dtype


# -- worker side ------------------------------------------------------------------------------
class PushPull:
    """Worker side: `reduce_async(flat, ...)` pushes every partition of `flat` to its server and
    returns a handle that, once waited, leaves the average over all W workers in `flat`. Every
    rank builds one and calls `prepare` (the plan is a collective); only pushers connect."""

    name = "pushpull"
    receives_into_buffers = True  # the wire receives pulls into `_pull_bufs` (else into its own frames)
    order_group = None  # each worker orders its own messages (see ps_node.NodeLayer)

    def __init__(self, ctx, layout, partition_bytes: int, dtype=torch.float32):
        self.ctx = ctx
        self.layout = layout
        self.W, self.S = layout.workers, layout.servers
        self.partition_bytes = partition_bytes
        self.dtype = dtype
        self.pushes = ctx.rank in layout.pushers
        self.parts: list[list[Part]] = []
        self._pending: dict[int, _PartHandle] = {}
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.on_fail = None  # set by a layer above that must fail its own waiters too

    # -- set-up: every rank, servers included, takes part -----------------------------------
    def prepare(self, message_numels: list[int]) -> None:
        self.parts = plan(message_numels, torch.tensor([], dtype=self.dtype).element_size(), self.partition_bytes, self.S)
        announce_plan(self.parts, self.dtype, self.layout.setup_group)
        self.stager = Stager(self.ctx.device, self.fail)
        mine = [p for ps in self.parts for p in ps] if self.pushes else []
        # Pinned host copies of what a GPU pushes, and pinned memory to receive its pulls into
        # (or to bounce them through, for a wire that receives into frames of its own).
        self._push_bufs = {p.key: self.stager.host_buffer(p.numel, self.dtype) for p in mine if self.stager.cuda}
        self._pull_bufs = {p.key: self.stager.host_buffer(p.numel, self.dtype) for p in mine
                           if self.stager.cuda or self.receives_into_buffers}
        self._connect()

    def _connect(self) -> None:
        """Wire: set up (every rank: may be a collective), and start I/O if `self.pushes`."""
        raise NotImplementedError

    def _send(self, h: "_PartHandle", data: torch.Tensor, iteration: int) -> None:
        """Wire: send `data` (host memory) as `h.part`'s push; call `h.pushed()` once the server holds it."""
        raise NotImplementedError

    def _disconnect(self) -> None:
        """Wire: tell every server this pusher is done and stop the I/O."""
        raise NotImplementedError

    # -- push ------------------------------------------------------------------------------
    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None, on_pushed=None, after=None):
        """`on_pushed()` runs once the servers hold every partition of `flat`, `on_done()` once
        every partition's average is back in `flat` (on GPU: its copy's event has passed).
        `after`: the collective that produces `flat` (the per-machine layer's reduce), if any."""
        parts = self.parts[group]
        pushed, done = _countdown(len(parts), on_pushed), _countdown(len(parts), on_done)
        return _Joined([self.push(p, flat[p.start:p.end], iteration, tensors, extra_args, done, pushed, after)
                        for p in parts])

    def push(self, part: Part, view: torch.Tensor, iteration: int, tensors, extra_args=None, on_done=None,
             on_pushed=None, after=None) -> "_PartHandle":
        h = _PartHandle(part, view, self, iteration, tensors, extra_args, on_done, on_pushed)
        with self._lock:
            self._pending[part.key] = h
        self.stager.to_host(view, self._push_bufs.get(part.key), after, lambda data: self._send(h, data, iteration))
        return h

    # -- pull ------------------------------------------------------------------------------
    def _pulled(self, key: int, summed: torch.Tensor) -> None:
        """The wire received `key`'s sum (on its I/O thread): stage it into the worker's tensor
        on the staging lane, divided by W."""
        with self._lock:
            h = self._pending.pop(key)
        self.stager.to_device(summed, h.view, self.W, self._pull_bufs.get(key), h.arrived)

    def fail(self, exc: BaseException) -> None:
        """A dead server or peer: record why and wake every waiter, so the run fails now."""
        self.error = self.error or exc
        with self._lock:
            for h in self._pending.values():
                h.event.set()
                h.acked.set()
        if self.on_fail is not None:
            self.on_fail(exc)

    def close(self) -> None:
        if self.pushes:
            self._disconnect()
        self.stager.close(self.ctx.comm_timeout_s)

    def describe(self) -> dict:
        return {**self.layout.describe(), "ps_wire": self.name}


class _PartHandle:
    def __init__(self, part, view, transport, iteration, tensors, extra_args, on_done, on_pushed):
        self.part, self.view, self.transport = part, view, transport
        self.event = threading.Event()
        self.acked = threading.Event()
        self.on_done, self.on_pushed = on_done, on_pushed
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

    def arrived(self) -> None:
        """The average is in `view`."""
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


# -- server side ------------------------------------------------------------------------------
class EngineMap:
    """BytePS's key -> engine thread (`GetThreadID`): at a key's first push, the thread with the
    fewest bytes assigned so far (the lowest index on a tie); cached for every later push."""

    def __init__(self, threads: int):
        self.load_bytes = [0] * threads
        self.owner: dict[int, int] = {}
        self._lock = threading.Lock()

    def thread_of(self, key: int, nbytes: int) -> int:
        with self._lock:
            i = self.owner.get(key)
            if i is None:
                i = min(range(len(self.load_bytes)), key=self.load_bytes.__getitem__)
                self.load_bytes[i] += nbytes
                self.owner[key] = i
            return i


class ScheduledQueue:
    """An engine thread's queue with BytePS's server-side scheduling
    (`BYTEPS_SERVER_ENABLE_SCHEDULE=1`, byteps/server/queue.h): the push of the key with the
    fewest pushes received so far in its round goes first, the oldest on a tie, so a key that
    only lately started its round is summed ahead of keys that are nearly done. BytePS counts a
    key's pushes as they are queued and does not re-sort later; neither does this. Without
    scheduling BytePS's queue is FIFO, as `queue.SimpleQueue` is."""

    def __init__(self, pushers: int):
        self.pushers = pushers
        self._heap: list = []
        self._seen: dict[int, int] = {}  # pushes of the key queued in its current round
        self._arrival = 0
        self._cond = threading.Condition()

    def put(self, item) -> None:
        with self._cond:
            if item is None:  # stop after everything queued
                rank = (float("inf"), self._arrival)
            else:
                key = item[0]
                count = self._seen.get(key, 0)
                self._seen[key] = (count + 1) % self.pushers
                rank = (count, self._arrival)
            self._arrival += 1
            heapq.heappush(self._heap, (rank, item))
            self._cond.notify()

    def get(self):
        with self._cond:
            while not self._heap:
                self._cond.wait()
            return heapq.heappop(self._heap)[1]


class Engines:
    """A server's summing engine: `threads` engine threads, each owning the keys `EngineMap`
    gives it. `push` (from the wire's I/O) queues a push; the owner sums it, and once a key has
    `pushers` pushes in the round, `reply(key, iteration, summed, senders)` runs on that engine
    thread (the wire sends the sum, or hands it to its I/O thread). With `schedule`, each engine
    thread takes its pushes in BytePS's server-scheduled order (`ScheduledQueue`)."""

    def __init__(self, me: int, dtype, pushers: int, threads: int, reply, tracer, schedule: bool = False):
        self.me, self.dtype, self.pushers = me, dtype, pushers
        self.reply, self.tracer = reply, tracer
        self.map = EngineMap(threads)
        self._queues = [ScheduledQueue(pushers) if schedule else queue.SimpleQueue() for _ in range(threads)]
        self._acc: dict[int, torch.Tensor] = {}
        self._senders: dict[int, list] = {}
        self._counts = [{"pushes": 0, "bytes_in": 0} for _ in range(threads)]
        self.error: BaseException | None = None
        # a server: no device; its engines sum with the server's threads (no compute beside them)
        self._threads = [start_thread(self._run, f"ps-engine{i}", None, (i,), ops_threads=None) for i in range(threads)]

    def push(self, key: int, iteration: int, sender, data: torch.Tensor) -> None:
        self._queues[self.map.thread_of(key, data.numel() * data.element_size())].put((key, iteration, sender, data))

    def _run(self, i: int) -> None:
        q, counts, tracer = self._queues[i], self._counts[i], self.tracer
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                key, iteration, sender, data = item
                t0 = tracer.now_us() if tracer.enabled else 0.0
                senders = self._senders.setdefault(key, [])  # this thread alone touches `key`
                if not senders:
                    self._acc[key] = data.clone()  # a fresh sum each round: the last may still be sending
                else:
                    self._acc[key].add_(data)
                senders.append(sender)
                counts["pushes"] += 1
                counts["bytes_in"] += data.numel() * data.element_size()
                if tracer.enabled:
                    tracer.complete("sum", "server", t0, tracer.now_us(),
                                    {"iter": iteration, "key": key, "server": self.me, "pushes": len(senders),
                                     "engine": i}, lane="server")
                if len(senders) == self.pushers:
                    self._senders[key] = []
                    self.reply(key, iteration, self._acc[key], senders)
        except BaseException as exc:  # the wire's loop sees it and fails the server
            self.error = exc

    def close(self, timeout_s: float) -> dict:
        """Stop the threads once their queues are drained; the counts for the record."""
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(timeout_s)
        if self.error is not None:
            raise self.error
        return {"pushes": sum(c["pushes"] for c in self._counts), "bytes_in": sum(c["bytes_in"] for c in self._counts),
                "engine_threads": len(self._threads), "pushers_per_key": self.pushers,
                "keys_per_engine": [sum(1 for t in self.map.owner.values() if t == i) for i in range(len(self._threads))]}
