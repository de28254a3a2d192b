"""The parameter-server protocol of `ps` over ZeroMQ, as BytePS's ps-lite carries it over TCP.

Chosen as the default PS transport by measurement (benchmarks/ps_vs_a2a.py, which runs both
engines): on loopback, 2 workers and 1 server, its push/pull bus bandwidth was 1.2-1.3x that of
Gloo point-to-point at 64-100 MB and 0.9-1.5x (noisy) at 1-16 MB; a first hand-written ZeroMQ
prototype had measured 1.4-1.8x. Same partitions, keys, servers and semantics as the Gloo wire
(`ps_gloo`); the set-up (plan, addresses) uses the job's set-up group.

Messages are multipart: [header, payload]. header = int64 [kind, key, iteration]; kind PUSH
(pusher -> server), ACK (server -> pusher: the push is held, credit may come back), PULL
(server -> pusher: the sum), STOP. ZeroMQ sockets are not thread-safe, so each side has one I/O
thread that owns its sockets, and other threads reach it through a `Mailbox`: a server is one
ROUTER socket whose I/O thread acknowledges a push on receipt (as BytePS does) and hands it to
the engine threads (`ps.Engines`), which post the round's sum back for sending; a pusher has
one DEALER per server, and a monitor on each turns a server's disconnect into an immediate
error. A server waits for its first push under `startup_timeout_s`, then under `comm_timeout_s`.
"""
from __future__ import annotations

import queue
import socket
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

from .ps import Engines, PushPull, receive_plan

PUSH, ACK, PULL, STOP = 0, 1, 2, 3


def _header(kind: int, key: int, iteration: int) -> bytes:
    return np.array([kind, key, iteration], dtype=np.int64).tobytes()


def _parse(frame) -> tuple[int, int, int]:
    kind, key, it = np.frombuffer(frame.buffer if hasattr(frame, "buffer") else frame, dtype=np.int64)
    return int(kind), int(key), int(it)


def exchange_addresses(port: int | None, group) -> dict[int, str]:
    """Every rank says its host; servers also their port. Returns {server rank: address}:
    loopback when the whole job is on one host (no traffic leaves it), else the server's host."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (socket.gethostname(), port), group=group)
    single_host = len({h for h, _ in everyone}) == 1
    return {r: f"tcp://{'127.0.0.1' if single_host else h}:{p}" for r, (h, p) in enumerate(everyone) if p is not None}


class Mailbox:
    """How other threads hand items to the thread that owns the ZeroMQ sockets: a queue, and an
    inproc PAIR socket that wakes that thread's poller (`rx` goes into its poller)."""

    def __init__(self, zctx):
        import zmq

        addr = f"inproc://ddlbench-mailbox-{id(self)}"
        self.rx = zctx.socket(zmq.PAIR)
        self.rx.bind(addr)
        self._tx = zctx.socket(zmq.PAIR)
        self._tx.connect(addr)
        self._tx_lock = threading.Lock()
        self._items: queue.SimpleQueue = queue.SimpleQueue()

    def post(self, item) -> None:
        self._items.put(item)
        with self._tx_lock:
            self._tx.send(b"")

    def take(self) -> list:
        """On the owning thread, once `rx` polled readable: every item posted so far."""
        import zmq

        while True:
            try:
                self.rx.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        items = []
        while True:
            try:
                items.append(self._items.get_nowait())
            except queue.Empty:
                return items

    def close(self) -> None:
        self.rx.close(linger=0)
        self._tx.close(linger=0)


class ZmqPushPull(PushPull):
    """Worker side, over ZeroMQ. Same interface and semantics as the Gloo wire."""

    name = "zmq"
    receives_into_buffers = False  # pulls arrive in ZeroMQ's own frames

    def _connect(self) -> None:
        import zmq

        addrs = exchange_addresses(None, self.layout.setup_group)  # every rank takes part
        if not self.pushes:
            return
        self.server_addrs = [addrs[self.W + s] for s in range(self.S)]
        self._zctx = zmq.Context.instance()
        self._mailbox = Mailbox(self._zctx)
        t = threading.Thread(target=self._io, daemon=True, name="zmq-io")
        t.start()
        self._threads = [t]

    def _send(self, h, data, iteration) -> None:
        self._mailbox.post((h.part.server, _header(PUSH, h.part.key, iteration), data))

    def _io(self) -> None:
        import zmq

        try:
            dealers, monitors = [], {}
            poller = zmq.Poller()
            poller.register(self._mailbox.rx, zmq.POLLIN)
            for s, addr in enumerate(self.server_addrs):
                d = self._zctx.socket(zmq.DEALER)
                d.setsockopt(zmq.LINGER, 0)
                d.setsockopt(zmq.IDENTITY, f"w{self.ctx.rank}".encode())  # servers know who pushed
                mon = d.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                d.connect(addr)
                dealers.append(d)
                poller.register(d, zmq.POLLIN)
                poller.register(mon, zmq.POLLIN)
                monitors[mon] = s
            stopped = 0
            while stopped < self.S:
                for sock, _ in poller.poll(1000):
                    if sock is self._mailbox.rx:
                        for s, header, payload in self._mailbox.take():
                            dealers[s].send_multipart([header, memoryview(payload.numpy())], copy=False)
                    elif sock in monitors:
                        sock.recv_multipart()
                        raise RuntimeError(f"server {monitors[sock]} ({self.server_addrs[monitors[sock]]}) disconnected")
                    else:
                        header, payload = sock.recv_multipart(copy=False)
                        kind, key, _ = _parse(header)
                        if kind == STOP:
                            stopped += 1
                        elif kind == ACK:
                            with self._lock:
                                h = self._pending.get(key)
                            if h is not None:
                                h.pushed()
                        elif kind == PULL:  # staged off this thread (ps_stage)
                            self._pulled(key, torch.frombuffer(payload.buffer, dtype=self.dtype))
            for d in dealers:
                d.close(linger=0)
        except BaseException as exc:  # a dead server: fail every waiter instead of hanging
            self.fail(exc)

    def _disconnect(self) -> None:
        for s in range(self.S):
            self._mailbox.post((s, _header(STOP, -1, -1), torch.zeros(1, dtype=torch.uint8)))
        for t in self._threads:
            t.join(timeout=self.ctx.comm_timeout_s)


def serve(rank: int, layout, tracer) -> dict:
    """One ZeroMQ server: acknowledge each push, let the engine threads sum every pusher's push
    of a key, then answer all their pulls."""
    import zmq

    me, mine, dtype = receive_plan(rank, layout)
    zctx = zmq.Context.instance()
    router = zctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 1000)
    port = router.bind_to_random_port("tcp://*")  # a free port: no clash with other jobs
    advertised = exchange_addresses(port, layout.setup_group)[rank]
    mailbox = Mailbox(zctx)
    engines = Engines(me, dtype, len(layout.pushers), layout.engine_threads,
                      lambda key, iteration, summed, senders: mailbox.post((key, iteration, summed, senders)), tracer,
                      schedule=layout.server_schedule)
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(mailbox.rx, zmq.POLLIN)
    stopped = set()
    timeout_s = layout.startup_timeout_s  # until the first push, then the communication bound
    last = time.monotonic()
    while len(stopped) < len(layout.pushers):
        ready = dict(poller.poll(1000))
        if engines.error is not None:
            raise engines.error
        if not ready and time.monotonic() - last > timeout_s:
            raise RuntimeError(f"server {me}: no message from any worker for {timeout_s} s")
        if mailbox.rx in ready:  # sums the engines finished: answer every pusher's pull
            for key, iteration, summed, senders in mailbox.take():
                t1 = tracer.now_us() if tracer.enabled else 0.0
                out = memoryview(summed.numpy())
                for ident in senders:
                    router.send_multipart([ident, _header(PULL, key, iteration), out], copy=False)
                if tracer.enabled:
                    tracer.complete("pull_served", "server", t1, tracer.now_us(),
                                    {"iter": iteration, "key": key, "server": me, "workers": len(senders),
                                     "bytes": summed.numel() * summed.element_size()}, lane="server")
        if router in ready:
            last = time.monotonic()
            ident, header, payload = router.recv_multipart(copy=False)
            kind, key, iteration = _parse(header)
            if kind == STOP:
                stopped.add(ident.bytes)
                continue
            timeout_s = layout.comm_timeout_s
            t0 = tracer.now_us() if tracer.enabled else 0.0
            router.send_multipart([ident.bytes, _header(ACK, key, iteration), b""])
            data = torch.frombuffer(payload.buffer, dtype=dtype)
            engines.push(key, iteration, ident.bytes, data)
            if tracer.enabled:
                tracer.complete("push_received", "server", t0, tracer.now_us(),
                                {"iter": iteration, "key": key, "server": me, "worker": int(ident.bytes[1:]),
                                 "bytes": data.numel() * data.element_size()}, lane="server")
    stats = {"server": me, "keys": len(mine), **engines.close(layout.comm_timeout_s), "transport": "zmq",
             "address": advertised}
    for ident in stopped:
        router.send_multipart([ident, _header(STOP, -1, -1), b""])
    mailbox.close()
    router.close(linger=1000)
    return stats


TRANSPORT = ZmqPushPull  # see methods.ps_engine
