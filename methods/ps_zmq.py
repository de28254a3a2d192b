"""The parameter-server protocol of `ps` over ZeroMQ, as BytePS's ps-lite carries it over TCP.

Chosen as the default PS transport by measurement (benchmarks/ps_vs_a2a.py, which runs both
engines): on loopback, 2 workers and 1 server, its push/pull bus bandwidth was 1.2-1.3x that of
Gloo point-to-point at 64-100 MB and 0.9-1.5x (noisy) at 1-16 MB; a first hand-written ZeroMQ
prototype had measured 1.4-1.8x. Same partitions, keys, servers and semantics as the Gloo wire
(`ps_gloo`); the set-up (plan, addresses) uses the job's set-up group.

Messages are multipart: [header, payload, proof]. header = int64 [kind, key, iteration]; kind PUSH
(pusher -> server), ACK (server -> pusher: the push is held, credit may come back), PULL
(server -> pusher: the sum), STOP. ZeroMQ sockets are not thread-safe, so each side has one I/O
thread that owns its sockets, and other threads reach it through a `Mailbox`: a server is one
ROUTER socket whose I/O thread acknowledges a push on receipt (as BytePS does) and hands it to
the engine threads (`ps.Engines`), which post the round's sum back for sending; a pusher has
one DEALER per server, and a monitor on each turns a server's disconnect into an immediate
error. A server waits for its first push under `startup_timeout_s`, then under `comm_timeout_s`.

The wire is closed to other peers (as NCCL and Gloo bind one interface): a server binds
loopback when the whole job is on one host, else one interface's address (DDLBENCH_PS_IFNAME,
like NCCL_SOCKET_IFNAME; default the address of this host's name). Rank 0 draws a job secret
and sends it over the set-up group; every message carries proof = HMAC-SHA256(secret, header +
payload). The server admits a message only through `Gate`: the right frames, a pusher's
identity, a valid proof, a known key, a sane iteration, the key's exact size, and one push per
pusher per round; anything else is dropped, counted in its stats (`rejected`) and logged.
"""
from __future__ import annotations

import collections
import fcntl
import hashlib
import hmac
import itertools
import os
import queue
import secrets
import socket
import struct
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

from .base import start_thread
from .ps import Engines, PushPull, receive_plan

PUSH, ACK, PULL, STOP = 0, 1, 2, 3
_STOP_ALL = object()  # a pusher's mailbox item: send STOP to every server


def _header(kind: int, key: int, iteration: int) -> bytes:
    return np.array([kind, key, iteration], dtype=np.int64).tobytes()


HEADER_BYTES = 24
PROOF_BYTES = 32  # SHA-256
IFNAME_ENV = "DDLBENCH_PS_IFNAME"
ADDRESS_FILE_ENV = "DDLBENCH_TEST_PS_ADDRESS_FILE"  # test-only: a server appends its address there


def _buf(frame):
    return frame.buffer if hasattr(frame, "buffer") else frame


def _nbytes(frame) -> int:
    return memoryview(_buf(frame)).nbytes


def _bytes(frame) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)


def _parse(frame) -> tuple[int, int, int]:
    kind, key, it = np.frombuffer(_buf(frame), dtype=np.int64)
    return int(kind), int(key), int(it)


def prove(secret: bytes, header, payload) -> bytes:
    """HMAC-SHA256 (RFC 2104) under the job's secret of the header and the payload's length.

    It proves the sender holds the job's secret and fixes what the message claims (kind, key,
    iteration, size). It does not hash the payload's bytes: at about 1.8 GB/s per core that cost
    2.3 ms per 4,096,000-byte partition on each side, slower than a 100 Gb/s link, which would
    bias the PS methods against all-reduce (whose NCCL and Gloo transports carry no proof at all).
    Changing a payload in flight takes a man in the middle on the job's own network."""
    mac = hmac.new(secret, _buf(header), hashlib.sha256)
    mac.update(_nbytes(payload).to_bytes(8, "little"))
    return mac.digest()


def interface_address(ifname: str | None) -> str:
    """The IPv4 address to bind on a multi-host job: `ifname`'s, else that of this host's name."""
    if not ifname:
        addr = socket.gethostbyname(socket.gethostname())
        if addr.startswith("127."):
            raise RuntimeError(f"this host's name resolves to {addr}, which other hosts cannot reach: "
                               f"set {IFNAME_ENV} to one of {[n for _, n in socket.if_nameindex()]}")
        return addr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:  # SIOCGIFADDR: the interface's IPv4 address
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            raise RuntimeError(f"{IFNAME_ENV}={ifname!r} has no IPv4 address here; interfaces: "
                               f"{[n for _, n in socket.if_nameindex()]}") from None
    return socket.inet_ntoa(packed[20:24])


def rendezvous(group, router=None) -> tuple[bytes, dict[int, str]]:
    """Every rank of the job: the job's secret from rank 0, then every rank's host, then each
    server (the ranks passing their `router`) binds loopback if the job is on one host (no
    traffic leaves it) or its interface's address, and says where. Returns (secret, {server rank: address})."""
    world = dist.get_world_size()
    secret = [secrets.token_bytes(32) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(secret, src=0, group=group)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    bound = None
    if router is not None:
        host = "127.0.0.1" if len(set(hosts)) == 1 else interface_address(os.environ.get(IFNAME_ENV))
        bound = f"tcp://{host}:{router.bind_to_random_port(f'tcp://{host}')}"  # a free port: no clash with other jobs
    everyone = [None] * world
    dist.all_gather_object(everyone, bound, group=group)
    return secret[0], {r: a for r, a in enumerate(everyone) if a is not None}


class Gate:
    """What a server admits: `check(frames)` of [identity, header, payload, proof] returns None
    (admitted; a push then counts toward its key's round) or why it was dropped. Checked in this
    order: frame count, header length, a pusher's identity, the proof, kind, key (this server's),
    iteration (not older than the key's round, the round's own while it is open), payload size
    (exactly the key's bytes), one push per pusher per round."""

    def __init__(self, secret: bytes, keys: dict[int, int], element_size: int, pushers: list[int]):
        self.secret, self.keys, self.element_size = secret, keys, element_size
        self.idents = {f"w{r}".encode() for r in pushers}
        self._round: dict[int, set] = {k: set() for k in keys}  # who pushed the key's open round
        self._iteration: dict[int, int] = {}                   # the key's latest round
        self._ever: set = set()                                # pushers heard from at all
        self.rejected: collections.Counter = collections.Counter()

    def check(self, frames) -> str | None:
        reason = self._reason(frames)
        if reason is not None:
            self.rejected[reason] += 1
        return reason

    def open_rounds(self, limit: int = 4) -> str:
        """Which keys wait for which pushers (for a timeout's message): at most `limit` keys."""
        waiting = [(k, self._iteration[k], sorted(self.idents - pushed)) for k, pushed in self._round.items() if pushed]
        text = "; ".join(f"key {k} iteration {it} waits for {b', '.join(missing).decode()}"
                         for k, it, missing in waiting[:limit])
        more = f" (+{len(waiting) - limit} keys)" if len(waiting) > limit else ""
        silent = sorted(self.idents - self._ever)
        return (f"{text or 'no round open'}{more}; never pushed: {b', '.join(silent).decode() or 'none'}; "
                f"dropped: {dict(self.rejected) or 'none'}")

    def _reason(self, frames) -> str | None:
        if len(frames) != 4:
            return "frames"
        ident, header, payload, proof = frames
        if _nbytes(header) != HEADER_BYTES:
            return "header"
        who = _bytes(ident)
        if who not in self.idents:
            return "identity"
        if not hmac.compare_digest(_bytes(proof), prove(self.secret, header, payload)):
            return "proof"
        kind, key, iteration = _parse(header)
        if kind == STOP:
            return None
        if kind != PUSH:
            return "kind"
        if key not in self.keys:
            return "key"
        pushed = self._round[key]
        latest = self._iteration.get(key, -1)
        if iteration < latest or iteration < 0 or (pushed and iteration != latest):
            return "iteration"
        if _nbytes(payload) != self.keys[key] * self.element_size:
            return "size"
        if who in pushed:
            return "duplicate"
        self._iteration[key] = iteration
        pushed.add(who)
        self._ever.add(who)
        if len(pushed) == len(self.idents):
            pushed.clear()  # the round is complete: each pusher's next push opens the next one
        return None


_INPROC = itertools.count()


def _inproc(what: str) -> str:
    """A fresh inproc endpoint name. Not derived from id() or a file descriptor: libzmq
    unbinds a closed socket's endpoint later, on its reaper thread, so a name reused at once
    could still be taken."""
    return f"inproc://ddlbench-{what}-{os.getpid()}-{next(_INPROC)}"


def open_dealer(zctx, addr: str, identity: bytes):
    """A DEALER connected to a server at `addr`, and the PAIR socket that reports its
    disconnection (poll it; `close_dealer` closes both)."""
    import zmq

    d = zctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.IDENTITY, identity)  # servers know who pushed
    mon = d.get_monitor_socket(zmq.EVENT_DISCONNECTED, addr=_inproc("monitor"))
    d.connect(addr)
    return d, mon


def close_dealer(d, mon) -> None:
    """Stop the monitor before its reader goes. libzmq's I/O thread sends each event to the
    monitor with a blocking send; once the reading PAIR socket is closed (or garbage-collected
    while the closed DEALER's connection is still being torn down), the next event, such as the
    server's disconnection, blocks that thread for good, and with it every socket of the
    process's context: a later transport's connect never happens (a commbench ps job whose second
    phase hung for 60 s, about once in 10 runs on a loaded machine)."""
    d.disable_monitor()  # zmq_socket_monitor(NULL): no event is sent to `mon` from here on
    mon.close(linger=0)
    d.close(linger=0)


class Mailbox:
    """How other threads hand items to the thread that owns the ZeroMQ sockets: a queue, and an
    inproc PAIR socket that wakes that thread's poller (`rx` goes into its poller)."""

    def __init__(self, zctx):
        import zmq

        addr = _inproc("mailbox")
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

        self._secret, addrs = rendezvous(self.layout.setup_group)  # every rank takes part
        if not self.pushes:
            return
        self.server_addrs = [addrs[self.W + s] for s in range(self.S)]
        self.ctx.tracer.meta("ps_servers", {"host": socket.gethostname(), "addresses": self.server_addrs})
        self._zctx = zmq.Context.instance()
        self._mailbox = Mailbox(self._zctx)
        self._threads = [start_thread(self._io, "zmq-io", self.ctx.device)]

    def describe(self) -> dict:
        return {**super().describe(), "ps_server_addresses": getattr(self, "server_addrs", None)}

    def _send(self, h, data, iteration) -> None:
        self._mailbox.post((h.part.server, _header(PUSH, h.part.key, iteration), data))

    def _io(self) -> None:
        import zmq

        dealers, monitors = [], {}
        try:
            poller = zmq.Poller()
            poller.register(self._mailbox.rx, zmq.POLLIN)
            for s, addr in enumerate(self.server_addrs):
                d, mon = open_dealer(self._zctx, addr, f"w{self.ctx.rank}".encode())
                dealers.append(d)
                poller.register(d, zmq.POLLIN)
                poller.register(mon, zmq.POLLIN)
                monitors[mon] = s
            self._serve_dealers(poller, dealers, monitors)
        except BaseException as exc:  # a dead server: fail every waiter instead of hanging
            self.fail(exc)
        finally:  # whatever ended it: the dealers' monitors stop before their readers close
            for mon, s in monitors.items():
                close_dealer(dealers[s], mon)

    def _serve_dealers(self, poller, dealers, monitors) -> None:
        server_of = {d: s for s, d in enumerate(dealers)}
        stopped: set[int] = set()  # servers that answered our STOP: they close, and that is no error
        while len(stopped) < self.S:
            for sock, _ in poller.poll(1000):
                if sock is self._mailbox.rx:
                    for item in self._mailbox.take():
                        if item is _STOP_ALL:
                            for d in dealers:
                                self._send_now(d, _header(STOP, -1, -1), torch.zeros(1, dtype=torch.uint8))
                        else:
                            s, header, payload = item
                            self._send_now(dealers[s], header, payload)
                elif sock in monitors:
                    sock.recv_multipart()
                    if monitors[sock] not in stopped:
                        raise RuntimeError(f"server {monitors[sock]} ({self.server_addrs[monitors[sock]]}) disconnected")
                else:
                    header, payload = sock.recv_multipart(copy=False)
                    kind, key, _ = _parse(header)
                    if kind == STOP:
                        stopped.add(server_of[sock])
                    elif kind == ACK:
                        with self._lock:
                            h = self._pending.get(key)
                        if h is not None:
                            h.pushed()
                    elif kind == PULL:  # staged off this thread (ps_stage)
                        self._pulled(key, torch.frombuffer(payload.buffer, dtype=self.dtype))

    def _send_now(self, dealer, header: bytes, payload: torch.Tensor) -> None:
        data = memoryview(payload.numpy())
        dealer.send_multipart([header, data, prove(self._secret, header, data)], copy=False)

    def _disconnect(self) -> None:
        # One item for every server's STOP: posted one by one, a server that had all its STOPs
        # could answer and close in between, and the I/O thread took that close for a dead
        # server and ended before sending the next STOP; that server then waited out its
        # timeout (a CI hang: "no round open; never pushed: none", the workers already gathering).
        self._mailbox.post(_STOP_ALL)
        for t in self._threads:
            t.join(timeout=self.ctx.comm_timeout_s)


class _RejectLog:
    """One stderr line per dropped message, at most one a second (the counts say the rest)."""

    def __init__(self, me: int, gate: Gate):
        self.me, self.gate, self._last = me, gate, 0.0

    def __call__(self, reason: str, ident) -> None:
        now = time.monotonic()
        if now - self._last >= 1.0:
            self._last = now
            print(f"ps server {self.me}: dropped a message ({reason}) from identity {_bytes(ident)[:16]!r}; "
                  f"dropped so far: {dict(self.gate.rejected)}", file=sys.stderr, flush=True)


def serve(rank: int, layout, tracer) -> dict:
    """One ZeroMQ server: admit each push through `Gate`, acknowledge it, let the engine threads
    sum every pusher's push of a key, then answer all their pulls."""
    import zmq

    me, mine, dtype = receive_plan(rank, layout)
    element_size = torch.tensor([], dtype=dtype).element_size()
    zctx = zmq.Context.instance()
    router = zctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 1000)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to an unknown peer raises, not vanishes
    router.setsockopt(zmq.SNDHWM, 0)  # replies to the pushers are never dropped at a high-water mark
    # A frame larger than the largest partition is no pusher's: libzmq drops its connection.
    router.setsockopt(zmq.MAXMSGSIZE, max([n * element_size for n in mine.values()] + [HEADER_BYTES + PROOF_BYTES]))
    secret, addrs = rendezvous(layout.setup_group, router)
    advertised = addrs[rank]
    tracer.meta("ps_server", {"host": socket.gethostname(), "address": advertised})
    if os.environ.get(ADDRESS_FILE_ENV):
        with open(os.environ[ADDRESS_FILE_ENV], "a") as f:
            f.write(advertised + "\n")
    gate = Gate(secret, mine, element_size, layout.pushers)
    dropped = _RejectLog(me, gate)
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
            raise RuntimeError(f"server {me}: no message from any worker for {timeout_s} s: {gate.open_rounds()}")
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
            frames = router.recv_multipart(copy=False)
            reason = gate.check(frames)
            if reason is not None:
                dropped(reason, frames[0])
                continue
            last = time.monotonic()
            ident, header, payload, _ = frames
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
             "address": advertised, "rejected": dict(gate.rejected)}
    for ident in stopped:
        router.send_multipart([ident, _header(STOP, -1, -1), b""])
    mailbox.close()
    router.close(linger=1000)
    return stats


TRANSPORT = ZmqPushPull  # see methods.ps_engine
