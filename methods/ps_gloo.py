"""The PS engine's wire over torch.distributed point-to-point (Gloo): the alternative to ZeroMQ
(`method.transport=gloo`). Same plan, keys, servers and semantics (`ps`).

A header [key, iteration] on tag 0, then the payload on tag key + 1, over the job's own
connections, so a dead peer fails the run like any collective. Gloo point-to-point work has no
completion future and only completes when waited on, so each side runs one receiving thread per
peer, and a pusher one thread that waits on its sends in order (a finished send means the server
holds the partition). A receiving thread waits for its next header under `startup_timeout_s`:
a pusher's waiters (the handles) already bound every round by `comm_timeout_s`, and a server
waits that long only for the first push, then under `comm_timeout_s`. The server's sums run on
its engine threads (`ps.Engines`), which also send the replies.
"""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from .base import start_thread
from .ps import STOP, Engines, PushPull, receive_plan, recv_within
from .ps_stage import Lane


def _header(key: int, iteration: int) -> torch.Tensor:
    return torch.tensor([key, iteration], dtype=torch.int64)


class GlooPushPull(PushPull):
    """Worker side over Gloo point-to-point."""

    name = "gloo"
    receives_into_buffers = True

    def _connect(self) -> None:
        if not self.pushes:
            return
        self._send_locks = [threading.Lock() for _ in range(self.S)]
        self._acks = Lane("push-acks", self.fail, self.ctx.device)  # waits on every push in order
        self._threads = [start_thread(self._receive_from, f"pull-from-server{s}", self.ctx.device, (s,))
                         for s in range(self.S)]

    def _send(self, h, data, iteration) -> None:
        part = h.part
        header = _header(part.key, iteration)
        with self._send_locks[part.server]:  # a header and its payload go out back to back
            h.sends = [dist.isend(header, dst=self.W + part.server, tag=0),
                       dist.isend(data, dst=self.W + part.server, tag=part.key + 1)]
        h.header = header  # keep the header alive until sent
        self._acks.put(lambda: self._acknowledge(h))

    @staticmethod
    def _acknowledge(h) -> None:
        """A finished send means the server holds the partition."""
        for work in h.sends:
            work.wait()
        h.pushed()

    def _receive_from(self, s: int) -> None:
        src = self.W + s
        header = torch.empty(2, dtype=torch.int64)
        try:
            while True:
                recv_within(header, src, 0, self.ctx.startup_timeout_s)
                key = int(header[0])
                if key == STOP:
                    return
                buf = self._pull_bufs[key]
                dist.recv(buf, src=src, tag=key + 1)
                self._pulled(key, buf)
        except BaseException as exc:  # a dead server: fail every waiter instead of hanging
            self.fail(exc)

    def _disconnect(self) -> None:
        """Tell every server this pusher is done; the servers answer with STOP headers."""
        for s in range(self.S):
            with self._send_locks[s]:
                dist.send(_header(STOP, -1), dst=self.W + s, tag=0)
        self._acks.close(self.ctx.comm_timeout_s)
        for t in self._threads:
            t.join(timeout=self.ctx.comm_timeout_s)


def serve(rank: int, layout, tracer) -> dict:
    """Run one server until every pusher has said STOP; returns counts for the record."""
    me, mine, dtype = receive_plan(rank, layout)
    pushers = layout.pushers
    send_locks = {w: threading.Lock() for w in pushers}

    def reply(key: int, iteration: int, summed: torch.Tensor, senders: list[int]) -> None:
        t0 = tracer.now_us() if tracer.enabled else 0.0
        for w in senders:
            with send_locks[w]:
                dist.send(_header(key, iteration), dst=w, tag=0)
                dist.send(summed, dst=w, tag=key + 1)
        if tracer.enabled:
            tracer.complete("pull_served", "server", t0, tracer.now_us(),
                            {"iter": iteration, "key": key, "server": me, "bytes": summed.numel() * summed.element_size(),
                             "workers": len(senders)}, lane="server")

    engines = Engines(me, dtype, len(pushers), layout.engine_threads, reply, tracer, schedule=layout.server_schedule)

    def from_pusher(w: int) -> None:
        header = torch.empty(2, dtype=torch.int64)
        # One buffer per key: a pusher pushes a key again only after its pull, so after the sum.
        scratch: dict[int, torch.Tensor] = {}
        timeout_s = layout.startup_timeout_s  # until the first push, then the communication bound
        while True:
            recv_within(header, w, 0, timeout_s)
            timeout_s = layout.comm_timeout_s
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
                                {"iter": iteration, "key": key, "server": me, "worker": w,
                                 "bytes": buf.numel() * buf.element_size()}, lane="server")
            engines.push(key, iteration, w, buf)

    errors = []

    def guarded(w):
        try:
            from_pusher(w)
        except BaseException as exc:
            errors.append(exc)

    # a server: no device, and the server's threads for what its receivers do
    threads = [start_thread(guarded, f"push-from-worker{w}", None, (w,), ops_threads=None) for w in pushers]
    while not errors and engines.error is None:  # until every pusher said STOP, or a failure
        alive = [t for t in threads if t.is_alive()]
        if not alive:
            break
        alive[0].join(0.2)
    if errors or engines.error is not None:
        raise errors[0] if errors else engines.error
    stats = {"server": me, "keys": len(mine), **engines.close(layout.comm_timeout_s)}
    for w in pushers:  # release each pusher's receiving thread
        with send_locks[w]:
            dist.send(_header(STOP, -1), dst=w, tag=0)
    return stats


TRANSPORT = GlooPushPull  # see methods.ps_engine
