"""ByteScheduler (Peng et al., SOSP 2019): tensor partitioning, priority and credit.

ByteScheduler counts in *parameters* (elements), not bytes (its bytecore: "the number of
parameters"); the study set BYTESCHEDULER_PARTITION=4000000 and BYTESCHEDULER_CREDIT=16000000,
16 MB and 64 MB in fp32. The record keeps both units.

* Every gradient tensor is split into partitions of at most `partition_params` elements.
* Priority is the layer's forward position (0 = the first layer the next forward pass needs;
  a lower number goes first). Partitions wait in a priority queue as backward produces them.
* The credit rule is ByteScheduler's: the highest-priority queued partition goes while credit
  remains (fewer than `credit_params` elements in flight), so in-flight stays below credit plus
  one partition; a partition that became ready later overtakes the queue.
* Nothing waits at the end of backward: each parameter is updated (its own SGD step) as soon as
  its last partition's average arrives, and a forward pre-hook makes each layer wait only for
  its own parameters, so communication also overlaps the next forward pass.

An all-reduce needs every rank to issue the same collectives in the same order, which a
timing-driven queue cannot promise; so, as Horovod's coordinator does, rank 0's dispatcher
decides and sends its choices to the other workers over the Gloo control group; they launch the
same partitions, in that order, once their own gradients are ready. One message carries every
partition that can go when the leader picks (up to MAX_CHOICES), as Horovod's coordinator
answers each cycle with all the tensors it agreed on: a Gloo send waits for its receiver to post
the receive, so one message per partition put a round trip between any two launches
(tiny-resnet, 2 local workers: 110-116 samples/s against 135-165 with one message per pick).
On PS each machine schedules on its own, as ByteScheduler does over BytePS: with one worker per
machine (or the per-GPU topology) each worker leads itself; where a machine's workers first
reduce among themselves, the machine's leader decides for them (the transport's `order_group`).

The queue itself (`CreditQueue`) is pure, so the performance model can run the same one.
"""
from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .base import GradSync, start_thread
from .grouped import broadcast_parameters

MAX_CHOICES = 64  # choices per message from the leader to its followers


def tell(group, followers: list[int], pids: list[int]) -> None:
    """The leader's message to each follower over the Gloo `group`, one blocking send each: how
    many choices (0: stop), then the choices, in launch order (at most MAX_CHOICES)."""
    msg = torch.zeros(MAX_CHOICES + 1, dtype=torch.int64)
    msg[0] = len(pids)
    msg[1:1 + len(pids)] = torch.tensor(pids, dtype=torch.int64)
    for r in followers:
        dist.send(msg, dst=r, group=group)


def hear(group, leader: int, msg: torch.Tensor) -> list[int]:
    """A follower's next message from `leader` (into `msg`, MAX_CHOICES + 1 int64): the choices,
    in launch order; [] means stop."""
    dist.recv(msg, src=leader, group=group)
    return msg[1:1 + int(msg[0])].tolist()


class CreditQueue:
    """ByteScheduler's core: a priority queue of partitions with credit, in parameters.

    `push` queues a ready partition (a lower `pid` is more urgent: pids are dense in forward
    order); `pop` hands out the most urgent one while credit remains (`in_flight < credit`,
    ByteScheduler's rule: it may overshoot by less than one partition); `release` returns a
    partition's credit once it stops being in flight. A follower, which runs its leader's order,
    `take`s a given partition instead."""

    def __init__(self, credit: int, sizes: list[int]):
        self.credit = credit
        self.sizes = sizes  # parameters per pid
        self.in_flight = 0
        self.heap: list[int] = []

    def push(self, pid: int) -> None:
        heapq.heappush(self.heap, pid)

    def pop(self) -> int | None:
        if not self.heap or self.in_flight >= self.credit:
            return None
        pid = heapq.heappop(self.heap)
        self.in_flight += self.sizes[pid]
        return pid

    def take(self, pid: int) -> None:
        self.heap.remove(pid)
        heapq.heapify(self.heap)
        self.in_flight += self.sizes[pid]

    def release(self, pid: int) -> None:
        self.in_flight -= self.sizes[pid]

    def __len__(self) -> int:
        return len(self.heap)


@dataclass(frozen=True)
class Partition:
    pid: int      # dense, in forward order: also the queue order
    param: int    # index in forward order = priority
    start: int
    end: int

    @property
    def numel(self) -> int:
        return self.end - self.start


class ByteScheduler(GradSync):
    owns_update = True  # parameters are updated as their communication completes

    def __init__(self, cfg, ctx, transport):
        super().__init__(cfg, ctx)
        self.transport = transport
        self.partition_params = int(cfg.partition_params)
        self.credit_params = int(cfg.credit_params)
        self.error: BaseException | None = None

    # -- set-up ----------------------------------------------------------------------------
    def setup(self, model) -> None:
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # forward order
        broadcast_parameters([p for _, p in self.named], self.ctx)
        self.parts: list[Partition] = []
        self.parts_of: list[list[int]] = []
        for i, (_, p) in enumerate(self.named):
            ids = []
            for start in range(0, p.numel(), self.partition_params):
                ids.append(len(self.parts))
                self.parts.append(Partition(len(self.parts), i, start, min(p.numel(), start + self.partition_params)))
            self.parts_of.append(ids)
        self.element_size = self.named[0][1].element_size()
        self.transport.prepare(self.with_probe([part.numel for part in self.parts]))
        opt = self.ctx.extra["optimizer"]
        self.opts = [torch.optim.SGD([p], lr=opt.lr, momentum=opt.momentum) for _, p in self.named]
        self.updated = [threading.Event() for _ in self.named]
        for e in self.updated:
            e.set()
        self.left = [0] * len(self.named)
        self.views: dict[int, torch.Tensor] = {}
        self.ready = [threading.Event() for _ in self.parts]
        self.ready_us = [0.0] * len(self.parts)
        self.iter_of = [0] * len(self.parts)
        self.queue = CreditQueue(self.credit_params, [part.numel for part in self.parts])
        self.outstanding = 0
        self.cond = threading.Condition()
        self.stopping = False
        for i, (_, p) in enumerate(self.named):
            p.register_post_accumulate_grad_hook(self._grad_ready(i))
        index = {id(p): i for i, (_, p) in enumerate(self.named)}
        for module in model.modules():
            mine = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
            if mine:
                module.register_forward_pre_hook(self._wait_for(mine))
        self.order = self._order_domain()
        self.thread = start_thread(self._guarded, "bytescheduler", self.ctx.device)

    # -- backward side: queue partitions ----------------------------------------------------
    def _grad_ready(self, i: int):
        def hook(p: torch.Tensor) -> None:
            self.updated[i].clear()
            self.left[i] = len(self.parts_of[i])
            flat = p.grad.view(-1)
            with self.cond:  # stamped as queued: the leader's pick, under the lock, is before or after
                now = self.ctx.tracer.now_us()
                for pid in self.parts_of[i]:
                    part = self.parts[pid]
                    self.views[pid] = flat[part.start:part.end]
                    self.ready_us[pid], self.iter_of[pid] = now, self.iteration
                    self.queue.push(pid)
                    self.outstanding += 1
                    self.ready[pid].set()
                self.cond.notify_all()

        return hook

    def _wait_for(self, params: list[int]):
        def pre_hook(module, args) -> None:
            for i in params:
                self._wait(self.updated[i])

        return pre_hook

    def _wait(self, event: threading.Event) -> None:
        """Wait for `event`; fail as soon as the dispatcher or the transport reports an error
        (a dead server or peer), and at the latest after `comm_timeout_s`."""
        timeout = self.ctx.comm_timeout_s
        deadline = time.monotonic() + timeout
        while not event.wait(0.2):
            self.error = self.error or getattr(self.transport, "error", None)
            if self.error is not None or time.monotonic() > deadline:
                break
        self.error = self.error or getattr(self.transport, "error", None)
        if not event.is_set() or self.error is not None:
            raise RuntimeError(f"ByteScheduler: communication did not complete within {timeout} s "
                               f"({len(self.queue)} partitions queued, {self.queue.in_flight} parameters in flight, "
                               f"{self.outstanding} outstanding): {self.error or 'a peer or server is dead or hung'}")

    # -- the dispatcher ----------------------------------------------------------------------
    def _order_domain(self):
        """(Gloo group, leader's rank, follower ranks) of the ranks that must launch in one
        order, or None when this worker orders on its own."""
        if self.cfg.architecture == "a2a":
            return (self.ctx.control, 0, list(range(1, self.ctx.world))) if self.ctx.world > 1 else None
        domain = getattr(self.transport, "order_group", None)
        if domain is None:
            return None
        group, leader, ranks = domain
        return group, leader, [r for r in ranks if r != leader]

    def _guarded(self) -> None:
        try:
            self._follow() if self.order is not None and self.ctx.rank != self.order[1] else self._lead()
        except BaseException as exc:  # wake every waiter: the run fails instead of hanging
            self.error = exc
            for e in self.updated:
                e.set()
            with self.cond:
                self.cond.notify_all()

    def _lead(self) -> None:
        """Pick the highest-priority queued partition whenever credit remains: every one that
        can go now, in priority order, told to the followers in one message."""
        while True:
            with self.cond:
                while (pid := self.queue.pop()) is None:
                    if self.stopping and not len(self.queue):
                        self._tell_followers([])
                        return
                    self.cond.wait()
                chosen = [(pid, len(self.queue))]
                while len(chosen) < MAX_CHOICES and (pid := self.queue.pop()) is not None:
                    chosen.append((pid, len(self.queue)))
                chosen_us = self.ctx.tracer.now_us()
            self._tell_followers([pid for pid, _ in chosen])
            for pid, queued in chosen:
                self._launch(pid, queued, chosen_us)

    def _follow(self) -> None:
        """Launch what the leader chose, in its order, once the partition is ready here."""
        group, leader, _ = self.order
        msg = torch.empty(MAX_CHOICES + 1, dtype=torch.int64)
        while pids := hear(group, leader, msg):
            for pid in pids:
                self._wait(self.ready[pid])
                with self.cond:
                    self.queue.take(pid)
                    queued = len(self.queue)
                    chosen_us = self.ctx.tracer.now_us()
                self._launch(pid, queued, chosen_us)

    def _tell_followers(self, pids: list[int]) -> None:
        if self.order is not None:
            group, _, followers = self.order
            tell(group, followers, pids)

    def _launch(self, pid: int, queued: int, chosen_us: float) -> None:
        part = self.parts[pid]
        self.ready[pid].clear()
        extra = {"priority": part.param, "partition": pid, "queued": queued,
                 "ready_us": round(self.ready_us[pid], 3), "chosen_us": round(chosen_us, 3)}
        kwargs = {"on_done": lambda: self._landed(pid)}
        if self.cfg.architecture == "ps":
            kwargs["on_pushed"] = lambda: self._release(pid)  # BytePS acknowledges a push on receipt
        else:
            kwargs["on_done"] = lambda: (self._release(pid), self._landed(pid))
        self.transport.reduce_async(self.views[pid], iteration=self.iter_of[pid], tensors=[self.named[part.param][0]],
                                    group=pid, extra_args=extra, **kwargs)

    # -- completion: credit back; update the parameter once its last partition is averaged ------
    def _release(self, pid: int) -> None:
        """Credit comes back when a partition stops being in flight: its all-reduce finished, or
        (PS) the server holds its push. Waiting for the pull instead would deadlock: the server
        answers only once every worker pushed, and each worker schedules on its own."""
        with self.cond:
            self.queue.release(pid)
            self.cond.notify_all()

    def _landed(self, pid: int) -> None:
        part = self.parts[pid]
        with self.cond:
            self.left[part.param] -= 1
            last = self.left[part.param] == 0
        if last:
            p = self.named[part.param][1]
            with torch.no_grad():
                self.opts[part.param].step()
            p.grad = None
            self.updated[part.param].set()
        with self.cond:
            self.outstanding -= 1
            self.cond.notify_all()

    # -- the driver's calls ----------------------------------------------------------------
    def synchronize(self) -> None:
        pass  # nothing waits at the end of backward; see `flush`

    def before_backward(self) -> None:
        for e in self.updated:  # a parameter no forward pre-hook covered (none in our models)
            self._wait(e)

    def flush(self) -> None:
        """Wait until every queued partition is sent, averaged and applied."""
        with self.cond:
            while self.outstanding and self.error is None:
                self.cond.wait(timeout=1.0)
        for e in self.updated:
            self._wait(e)

    def close(self) -> None:
        self.flush()
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join(timeout=self.ctx.comm_timeout_s)
        super().close()

    def describe(self) -> dict:
        return {"groups": None, "partition_params": self.partition_params, "credit_params": self.credit_params,
                "partition_bytes": self.partition_params * self.element_size,
                "credit_bytes": self.credit_params * self.element_size,
                "partitions_per_iter": len(self.parts),
                "order_leader": None if self.order is None else self.order[1]}
