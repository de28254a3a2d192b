"""BytePS's topology: reduce inside each machine, push and pull once per machine, broadcast
inside the machine (`ps_topology=per-machine`, the default); or every worker pushes
(`per-gpu`).

The study ran BytePS with as many servers as worker machines and `DMLC_NUM_WORKER` = machines:
BytePS reduces a partition over the machine's GPUs (NCCL), its local root copies it to the host
and pushes it, pulls the sum, copies it back and broadcasts it to the machine's GPUs
(REDUCE -> COPYD2H -> PUSH -> PULL -> COPYH2D -> BROADCAST). Servers therefore sum one push per
machine, not per GPU, and each NIC carries one machine's traffic once.

Here a node is `workers_per_node` consecutive worker ranks; its leader is its lowest rank
(BytePS's local root is the last; either is one process per machine). Per message:
`dist.reduce` to the leader over the node's group (NCCL on GPU, Gloo on CPU) -> the leader's
push/pull wire (which stages D2H/H2D and divides by W) -> `dist.broadcast` from the leader.

One group carries a node's reduces and broadcasts, and every rank of the node must issue its
collectives in the same order. Reduces arrive in the schedule's order, broadcasts in the order
the leader's pulls land; so, as BytePS's root does (`RunRootNcclLoopOnce`), the leader's
dispatcher decides the sequence and sends it to the node's other ranks over a Gloo control group;
they issue the same collectives in that order, each reduce once their own `reduce_async` for the
message has come. One sequence on one group is also what NCCL needs: two communicators used at
once on a GPU can deadlock.

Set-up (`setup`) runs on every rank of the job, servers included, because `dist.new_group`
needs every rank for every group, in the same order everywhere.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from .base import start_thread
from .ps import recv_within
from .ps_stage import Lane

REDUCE, BROADCAST = 0, 1
STOP = -1
BATCH = 32  # operations per control message


def nodes_of(workers: int, workers_per_node: int) -> list[list[int]]:
    """Worker ranks per node: consecutive, `workers_per_node` at a time (the last may be smaller)."""
    return [list(range(s, min(workers, s + workers_per_node))) for s in range(0, workers, workers_per_node)]


@dataclass(frozen=True)
class NodeGroups:
    data: Any    # the node's reduces and broadcasts (the job's default backend: NCCL for CUDA tensors)
    ctrl: Any    # Gloo: the leader's sequence of collectives
    order: Any   # Gloo: free for the schedule's own agreement (`NodeLayer.order_group`)


@dataclass
class Layout:
    """Who pushes, and the groups of each node: the same on every rank of the job."""

    workers: int
    servers: int
    topology: str
    nodes: list[list[int]]
    engine_threads: int = 8
    comm_timeout_s: float = 30
    startup_timeout_s: float = 600
    setup_group: Any = None  # Gloo over every rank, `startup_timeout_s`: plan and addresses
    node_groups: dict = field(default_factory=dict)  # node index -> NodeGroups (this rank's node only)
    server_schedule: bool = False  # BytePS's BYTEPS_SERVER_ENABLE_SCHEDULE (ps.ScheduledQueue)

    @property
    def pushers(self) -> list[int]:
        """The ranks that push to the servers: each node's leader, or every worker."""
        return [n[0] for n in self.nodes] if self.topology == "per-machine" else list(range(self.workers))

    def node_of(self, rank: int) -> int:
        return next(i for i, n in enumerate(self.nodes) if rank in n)

    def describe(self) -> dict:
        return {"ps_topology": self.topology, "pushers_per_key": len(self.pushers),
                "workers_per_node": max(len(n) for n in self.nodes), "server_engine_threads": self.engine_threads,
                "server_schedule": self.server_schedule}


def setup(method_cfg, workers: int, servers: int, workers_per_node: int, comm_timeout_s: float,
          startup_timeout_s: float, setup_group) -> Layout:
    """Every rank of the job calls this at the same point: it creates each multi-worker node's
    groups (data, ctrl, order) when the topology is per-machine."""
    topology = method_cfg.get("ps_topology", "per-machine")
    nodes = nodes_of(workers, workers_per_node)
    layout = Layout(workers, servers, topology, nodes, int(method_cfg.get("server_engine_threads", 8)),
                    comm_timeout_s, startup_timeout_s, setup_group,
                    server_schedule=method_cfg.get("scheduler") == "byteps")
    if topology == "per-machine":
        me = dist.get_rank()
        for i, members in enumerate(nodes):
            if len(members) == 1:
                continue
            groups = NodeGroups(dist.new_group(members), dist.new_group(members, backend="gloo"),
                                dist.new_group(members, backend="gloo"))
            if me in members:
                layout.node_groups[i] = groups
    return layout


def per_gpu(workers: int, servers: int, **kw) -> Layout:
    """A layout for code that builds the engine by hand (benchmarks): every worker pushes."""
    return Layout(workers, servers, "per-gpu", nodes_of(workers, workers), **kw)


def wrap(ctx, inner, layout: Layout):
    """The transport a schedule gets: the wire itself, or the per-machine layer around it."""
    if layout.topology == "per-gpu" or len(layout.nodes[layout.node_of(ctx.rank)]) == 1:
        return inner
    return NodeLayer(ctx, inner, layout)


class NodeLayer:
    """Per-machine push/pull around a wire (`ps.PushPull`), same interface. `reduce_async`'s
    `on_pushed` means this worker's contribution is held: by the servers (leader), or by the
    leader once the node's reduce is done (others); `on_done` that the average is in `flat` and
    no collective uses it any more (the node's broadcast completed)."""

    def __init__(self, ctx, inner, layout: Layout):
        self.ctx, self.inner, self.layout = ctx, inner, layout
        node = layout.node_of(ctx.rank)
        self.node = node
        self.members = layout.nodes[node]
        self.leader = self.members[0]
        self.is_leader = ctx.rank == self.leader
        self.groups: NodeGroups = layout.node_groups[node]
        self.name = f"node+{inner.name}"
        # The schedule's handle for agreeing on one order inside the node (ByteScheduler):
        # a Gloo group over the node's workers, the leader's global rank, and the node's ranks.
        self.order_group = (self.groups.order, self.leader, list(self.members))
        self._error: BaseException | None = None
        inner.on_fail = self.fail

    @property
    def error(self):
        return self._error or self.inner.error

    def prepare(self, message_numels: list[int]) -> None:
        self.inner.prepare(message_numels)
        self.stager = self.inner.stager
        self._lock = threading.Lock()
        self._submitted = [collections.deque() for _ in message_numels]  # reduce_async'd, not yet reduced
        self._reduced = [collections.deque() for _ in message_numels]    # reduced, not yet broadcast
        self._arrived = threading.Condition(self._lock)
        self._live: set = set()
        self._completions = Lane("node-completions", self.fail, self.stager.device)  # node collectives, in issue order
        self._ops: queue.SimpleQueue = queue.SimpleQueue()  # the leader's next collectives
        self._sends: collections.deque = collections.deque()  # control sends in flight
        self._stopping = False
        self._thread = start_thread(self._guarded, "node-dispatcher", self.stager.device)

    # -- the schedule's side -----------------------------------------------------------------
    def reduce_async(self, flat: torch.Tensor, *, iteration: int, tensors: list[str], group: int,
                     extra_args: dict | None = None, on_done=None, on_pushed=None):
        msg = _Message(self, group, flat, iteration, tensors, extra_args, on_done, on_pushed, self.stager.mark())
        with self._lock:
            self._submitted[group].append(msg)
            self._live.add(msg)
            self._arrived.notify_all()
        if self.is_leader:
            self._ops.put((REDUCE, group))
        return msg

    # -- the dispatcher: one sequence of node collectives -------------------------------------
    def _guarded(self) -> None:
        try:
            self._lead() if self.is_leader else self._follow()
        except BaseException as exc:
            self.fail(exc)

    def _lead(self) -> None:
        while True:
            ops = [self._ops.get()]
            while len(ops) < BATCH:
                try:
                    ops.append(self._ops.get_nowait())
                except queue.Empty:
                    break
            stop = ops[-1] == STOP
            self._tell(ops)
            for op in ops:
                if op != STOP:
                    self._issue(*op)
            if stop:
                return

    def _tell(self, ops) -> None:
        """Send the next collectives to the node's other ranks (non-blocking; at most a few in flight)."""
        msg = torch.full((BATCH + 1,), STOP, dtype=torch.int64)
        msg[0] = len(ops)
        for j, op in enumerate(ops):
            msg[j + 1] = STOP if op == STOP else op[1] * 2 + op[0]
        for r in self.members[1:]:
            self._sends.append((dist.isend(msg, dst=r, group=self.groups.ctrl), msg))
        while len(self._sends) > 4 * len(self.members):
            self._sends.popleft()[0].wait()

    def _follow(self) -> None:
        msg = torch.empty(BATCH + 1, dtype=torch.int64)
        while True:
            # Idle waits (the leader's forward and backward) are not failures; a hung peer is
            # caught by the handles' `comm_timeout_s`, a dead one by the connection.
            recv_within(msg, self.leader, 0, self.layout.startup_timeout_s, group=self.groups.ctrl)
            for code in msg[1:int(msg[0]) + 1].tolist():
                if code == STOP:
                    return
                self._issue(code % 2, code // 2)

    def _issue(self, kind: int, m: int) -> None:
        if kind == REDUCE:
            msg = self._next_submitted(m)
            msg.stage = "its node reduce issued"
            with self.stager.issue(msg.marker):
                msg.reduce_us = self._now()
                work = dist.reduce(msg.flat, dst=self.leader, group=self.groups.data, async_op=True)
                ticket = self.stager.ticket(work)
            with self._lock:
                self._reduced[m].append(msg)
            if self.is_leader:
                self.inner.reduce_async(msg.flat, iteration=msg.iteration, tensors=msg.tensors, group=m,
                                        extra_args=msg.extra_args, on_pushed=msg.pushed,
                                        on_done=lambda: (msg.at("pulled from the servers, its node broadcast "
                                                                "queued"), self._ops.put((BROADCAST, m))),
                                        after=work)
            self._completions.put(lambda: (ticket(), msg.reduced()))
        else:
            with self._lock:
                msg = self._reduced[m].popleft()
            msg.stage = "its node broadcast issued"
            with self.stager.issue():
                msg.broadcast_us = self._now()
                work = dist.broadcast(msg.flat, src=self.leader, group=self.groups.data, async_op=True)
                ticket = self.stager.ticket(work)
            self._completions.put(lambda: (ticket(), msg.broadcast()))

    def _next_submitted(self, m: int) -> "_Message":
        """The oldest message `m` this rank submitted and the node has not reduced: on the
        leader it is there already; elsewhere wait for the schedule to submit it."""
        deadline = time.monotonic() + self.layout.startup_timeout_s
        with self._lock:
            while not self._submitted[m]:
                if self._stopping or self.error is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"node {self.node}: the leader (rank {self.leader}) reduces message {m}, "
                                       f"which rank {self.ctx.rank} never submitted: {self.error or 'stopped'}")
                self._arrived.wait(0.2)
            return self._submitted[m].popleft()

    def _now(self) -> float:
        return self.ctx.tracer.now_us() if self.ctx.tracer.enabled else 0.0

    def _finished(self, msg: "_Message") -> None:
        with self._lock:
            self._live.discard(msg)

    # -- failure and the end -----------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """The wire, a lane or the dispatcher failed: wake every waiter so the run fails now."""
        self._error = self._error or exc
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            for msg in self._live:
                msg.event.set()
            self._arrived.notify_all()

    def close(self) -> None:
        timeout = self.ctx.comm_timeout_s
        if self.is_leader:
            self._ops.put(STOP)
        with self._lock:
            self._stopping = True
            self._arrived.notify_all()
        self._thread.join(timeout)
        while self._sends:
            self._sends.popleft()[0].wait()
        self._completions.close(timeout)
        self.inner.close()

    def describe(self) -> dict:
        return self.inner.describe()


class _Message:
    """One message of the schedule on one rank of a node: its handle, and its trace events."""

    def __init__(self, layer, m, flat, iteration, tensors, extra_args, on_done, on_pushed, marker):
        self.layer, self.m, self.flat = layer, m, flat
        self.iteration, self.tensors, self.extra_args = iteration, tensors, extra_args
        self.on_done, self.on_pushed = on_done, on_pushed
        self.marker = marker
        self.event = threading.Event()
        # when the schedule handed the message over (a hook, for WFBP), and when each collective
        # was issued (by the dispatcher thread, which a busy host may run later)
        self.submitted_us = layer._now()
        self.reduce_us = self.broadcast_us = 0.0
        # how far it got, for a timeout's message (the leader decides when each collective runs)
        self.stage = "submitted, its node reduce not issued yet (waits for the leader's order)"

    def at(self, stage: str) -> None:
        self.stage = stage

    def _trace(self, name: str, t0_us: float) -> None:
        layer = self.layer
        tracer = layer.ctx.tracer
        if tracer.enabled:
            args = {"iter": self.iteration, "bytes": self.flat.numel() * self.flat.element_size(), "tensors": self.tensors,
                    "group": self.m, "node": layer.node, "leader": layer.leader,
                    "submitted_us": round(self.submitted_us, 3), **(self.extra_args or {})}
            tracer.complete(name, "comm", t0_us, tracer.now_us(), args, lane="comm")

    def reduced(self) -> None:
        """The node's sum is at the leader: a follower's contribution is held."""
        if self.stage == "its node reduce issued":  # (the leader's push may be acknowledged already)
            self.stage = "node reduce done" + (", pushing to the servers" if self.layer.is_leader else
                                               ", waiting for the leader's pull")
        self._trace("node_reduce", self.reduce_us)
        if not self.layer.is_leader and self.on_pushed is not None:
            self.on_pushed()

    def pushed(self) -> None:
        """The leader's push is held by the servers."""
        self.stage = "pushed, waiting for the servers' pull"
        if self.on_pushed is not None:
            self.on_pushed()

    def broadcast(self) -> None:
        """The average is in `flat` on this rank, and no collective uses it any more."""
        self._trace("node_broadcast", self.broadcast_us)
        self.layer._finished(self)
        self.event.set()
        if self.on_done is not None:
            self.on_done()

    def wait(self) -> None:
        layer = self.layer
        timeout = layer.ctx.comm_timeout_s
        if not self.event.wait(timeout) or layer.error is not None:
            raise RuntimeError(f"node {layer.node} (leader rank {layer.leader}): message {self.m} (iteration "
                               f"{self.iteration}) not averaged within {timeout} s on rank {layer.ctx.rank}, "
                               f"{self.stage}: {layer.error or 'a peer or server is dead or hung'}")

