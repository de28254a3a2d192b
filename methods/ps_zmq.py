"""The parameter-server protocol of `ps` over ZeroMQ, as BytePS's ps-lite carries it over TCP.

Chosen as the default PS transport by measurement (benchmarks/ps_vs_a2a.py, which runs both
engines): on loopback, 2 workers and 1 server, its push/pull bus bandwidth was 1.2-1.3x that of
Gloo point-to-point at 64-100 MB and 0.9-1.5x (noisy) at 1-16 MB; a first hand-written ZeroMQ
prototype had measured 1.4-1.8x. Same
partitions, keys, servers and semantics as `ps.PushPull`; the set-up (plan, addresses) and
the end of the run use the job's torch.distributed group.

Messages are multipart: [header, payload]. header = int64 [kind, key, iteration]; kind PUSH
(worker -> server), ACK (server -> worker: the push is held, credit may come back), PULL
(server -> worker: the sum), STOP. Each server is one ROUTER socket; each worker has one
DEALER per server, all owned by one I/O thread (ZeroMQ sockets are not thread-safe), which the
pushing threads reach through an inproc socket. A monitor on each DEALER turns a server's
disconnect into an immediate error.
"""
from __future__ import annotations

import queue
import socket
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

from .ps import PushPull, receive_plan

PUSH, ACK, PULL, STOP = 0, 1, 2, 3


def _header(kind: int, key: int, iteration: int) -> bytes:
    return np.array([kind, key, iteration], dtype=np.int64).tobytes()


def _parse(frame) -> tuple[int, int, int]:
    kind, key, it = np.frombuffer(frame.buffer if hasattr(frame, "buffer") else frame, dtype=np.int64)
    return int(kind), int(key), int(it)


def exchange_addresses(port: int | None) -> dict[int, str]:
    """Every rank says its host; servers also their port. Returns {server rank: address}:
    loopback when the whole job is on one host (no traffic leaves it), else the server's host."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (socket.gethostname(), port))
    single_host = len({h for h, _ in everyone}) == 1
    return {r: f"tcp://{'127.0.0.1' if single_host else h}:{p}" for r, (h, p) in enumerate(everyone) if p is not None}


class ZmqPushPull(PushPull):
    """Worker side, over ZeroMQ. Same interface and semantics as `PushPull`."""

    name = "zmq"

    def prepare(self, message_numels: list[int]) -> None:
        import zmq

        self._plan(message_numels)
        addrs = exchange_addresses(None)
        self.server_addrs = [addrs[self.W + s] for s in range(self.S)]
        # pulls arrive in ZeroMQ's own frames; only pushes need buffers of their own
        self._push_bufs = {p.key: torch.empty(p.numel, dtype=self.dtype, pin_memory=self._pin()) for ps in self.parts for p in ps}
        self._zctx = zmq.Context.instance()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_addr = f"inproc://ddlbench-wake-{id(self)}"
        self._wake_rx = self._zctx.socket(zmq.PAIR)
        self._wake_rx.bind(self._wake_addr)
        self._wake_tx = self._zctx.socket(zmq.PAIR)
        self._wake_tx.connect(self._wake_addr)
        self._wake_lock = threading.Lock()
        t = threading.Thread(target=self._io, daemon=True, name="zmq-io")
        t.start()
        self._threads = [t]

    def push(self, part, view, iteration, tensors, extra_args=None, on_done=None, on_pushed=None):
        h, buf = self._stage(part, view, iteration, tensors, extra_args, on_done, on_pushed)
        self._outbox.put((part.server, _header(PUSH, part.key, iteration), buf))
        self._wake()
        return h

    def _wake(self) -> None:
        with self._wake_lock:
            self._wake_tx.send(b"")

    def _io(self) -> None:
        import zmq

        try:
            dealers, monitors = [], {}
            poller = zmq.Poller()
            poller.register(self._wake_rx, zmq.POLLIN)
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
                    if sock is self._wake_rx:
                        sock.recv()
                        while True:
                            try:
                                item = self._outbox.get_nowait()
                            except queue.Empty:
                                break
                            s, header, payload = item
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
                        elif kind == PULL:
                            with self._lock:
                                h = self._pending.pop(key)
                            h.arrived(torch.frombuffer(payload.buffer, dtype=self.dtype))
            for d in dealers:
                d.close(linger=0)
        except BaseException as exc:  # a dead server: fail every waiter instead of hanging
            self.fail(exc)

    def close(self) -> None:
        for s in range(self.S):
            self._outbox.put((s, _header(STOP, -1, -1), torch.zeros(1, dtype=torch.uint8)))
        self._wake()
        self._join()


def serve(rank: int, workers: int, tracer, timeout_s: float) -> dict:
    """One ZeroMQ server: sum every worker's push of a key, then answer all their pulls."""
    import zmq

    me, mine, dtype = receive_plan(rank, workers)
    zctx = zmq.Context.instance()
    router = zctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 1000)
    port = router.bind_to_random_port("tcp://*")  # a free port: no clash with other jobs
    advertised = exchange_addresses(port)[rank]
    acc: dict[int, torch.Tensor] = {}
    count = {k: 0 for k in mine}
    waiting: dict[int, list] = {k: [] for k in mine}
    stats = {"server": me, "keys": len(mine), "pushes": 0, "bytes_in": 0, "transport": "zmq", "address": advertised}
    stopped = set()
    last = time.monotonic()
    while len(stopped) < workers:
        if not router.poll(1000):
            if time.monotonic() - last > timeout_s:
                raise RuntimeError(f"server {me}: no message from any worker for {timeout_s} s")
            continue
        last = time.monotonic()
        ident, header, payload = router.recv_multipart(copy=False)
        kind, key, iteration = _parse(header)
        if kind == STOP:
            stopped.add(ident.bytes)
            continue
        t0 = tracer.now_us() if tracer.enabled else 0.0
        data = torch.frombuffer(payload.buffer, dtype=dtype)
        router.send_multipart([ident.bytes, _header(ACK, key, iteration), b""])
        if count[key] == 0:
            acc[key] = data.clone()  # a fresh tensor each round: the last round's may still be sending
        else:
            acc[key].add_(data)
        count[key] += 1
        waiting[key].append(ident.bytes)
        stats["pushes"] += 1
        stats["bytes_in"] += data.numel() * data.element_size()
        if tracer.enabled:
            tracer.complete("push_received", "server", t0, tracer.now_us(),
                            {"iter": iteration, "key": key, "server": me, "worker": int(ident.bytes[1:]),
                             "bytes": data.numel() * data.element_size()}, lane="server")
            tracer.complete("sum", "server", t0, tracer.now_us(),
                            {"iter": iteration, "key": key, "server": me, "pushes": count[key]}, lane="server")
        if count[key] == workers:
            t1 = tracer.now_us() if tracer.enabled else 0.0
            out = memoryview(acc[key].numpy())
            for w in waiting[key]:
                router.send_multipart([w, _header(PULL, key, iteration), out], copy=False)
            if tracer.enabled:
                tracer.complete("pull_served", "server", t1, tracer.now_us(),
                                {"iter": iteration, "key": key, "server": me, "workers": workers,
                                 "bytes": acc[key].numel() * acc[key].element_size()}, lane="server")
            count[key] = 0
            waiting[key] = []
    for ident in stopped:
        router.send_multipart([ident, _header(STOP, -1, -1), b""])
    router.close(linger=1000)
    return stats


TRANSPORT = ZmqPushPull  # see methods.ps_engine
