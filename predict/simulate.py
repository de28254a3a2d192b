"""A discrete-event model of one training iteration per method, on a `network.Cluster`.

Every schedule decision is the runtime's own code, imported, never copied:
- BSP and WFBP groups: `methods.grouped.fuse_by_threshold` (threshold in elements; BSP's
  536,870,912 fuses everything, WFBP's 0 sends one tensor per message), over the runtime's
  gradient-ready order (`grouped.ready_order`: last registered first);
- MG-WFBP groups: `methods.mgwfbp.merge_groups` with the profile's t_b and the study's
  small-group rule (`min_group_numel`), its alpha/beta either the table the study's code used
  (`Cluster.mgwfbp_table`, stack "study") or `mgwfbp.fit_alpha_beta` over the runtime's
  start-up microbenchmark (`mgwfbp.bench_sizes`, medians of back-to-back calls) timed by this
  model, token buckets included (`microbenchmark_s`), as ddlbench fits at start-up; a recorded
  run's own alpha/beta where given (`Options.mgwfbp_alpha_beta`);
- ByteScheduler: `methods.bytescheduler.CreditQueue` (partition and credit in parameters, pid =
  priority in forward order, ByteScheduler's credit rule);
- PS: `methods.ps.plan` (4,096,000-byte partitions, server = djb2(key) % S), the servers'
  `ps.EngineMap` (key -> engine thread) and, for BytePS's server schedule, `ps.ScheduledQueue`;
- DDP: `fuse_by_threshold` in bytes with DDP's bucket caps (1 MiB first bucket, then 25 MiB),
  and before every forward DDP's broadcast of the module's buffers from rank 0 (broadcast_buffers,
  its default: one bucket per buffer dtype, `buffer_sync_s`; BatchNorm's running statistics,
  BERT's position and token-type ids).

What is modelled (one worker stands for all: workers are identical, so every machine does the
same thing at the same time, and a server receives a partition from all m machines at once;
but for PS on the emulated cluster's links, below):
- compute from a `profile.Profile`: forward, then backward producing gradient i at ready_s[i];
- all-reduce methods: one NCCL stream per worker, so collectives run one at a time in launch
  order, each costing `Cluster.allreduce_s` (stack study: NCCL 2.4's size threshold between tree
  and ring; else the faster of the two; where make commbench timed the run's worker count in
  the run's placement, that measurement, `Cluster.measured`); BSP launches after
  backward, the others from the hook of the group's last gradient (overlap with backward); fused
  groups pay a pack and an unpack copy at the GPU's memory bandwidth. Gloo's process group runs
  async collectives on its two threads (`network.GLOO_THREADS`), two at once: where make
  commbench timed a round of them at the run's worker count in the run's placement (its fusion
  mode: a model's per-tensor all-reduces launched one every 0.4 ms, as backward releases them,
  else at once), they share two `Lanes` at the speed that round gives (`Cluster.lane_speed`,
  `lane_speed`; the paced round's where there is one: launched at once they overlap less, which
  one speed cannot give both ways, `network._lane_speeds`; on an emulated network found again
  against the tc rate's wire and its token bucket, which each collective meets as it starts:
  `network.emulated_lanes`); elsewhere one at a time. On an emulated network the all-reduce of
  3 or more ranks is make commbench's at that many ranks, on the tc wire's slope
  (`network.emulated_by_ranks`), not the 2-rank link's ring. A collective submitted after the stream
  idled AFTER_COMPUTE_IDLE_S (the ranks computed) also pays what make commbench found an
  all-reduce costs right after compute beyond its own time, where it timed one at the run's
  worker count in the run's placement (`Cluster.after_compute_s`: two local ranks' 312 KB took
  0.18 ms back to back, 0.5 ms after compute that streams through memory);
- PS methods, per machine (BytePS): per partition, a reduce inside the node over its NCCL stream
  (where make commbench timed a reduce and a broadcast at the node's worker count in the run's
  placement, those fits: `Cluster.node_stage_s`),
  a push on the machine's uplink, the server's downlink taking all m machines' pushes (m x the
  bytes: the contention the servers see), the summing on the key's engine thread, a pull on the
  server's uplink (m x the bytes) and the machine's downlink, and a broadcast inside the node.
  A message streams through a worker link and a server link at the slower of the two (cut
  through, not store and forward). On the emulated cluster's links (tc tbf: one FIFO queue per
  link direction, `fifo_pulls`) a server's replies to its pushers leave one after another, so
  the machines fall out of step and no longer push at once: there every machine runs on one
  clock with its own links (`PSMachines`, `ps_machines_period_s`; not for ByteScheduler's queue,
  which stays in step), and with m machines and one server holding the whole gradient (n bytes
  at beta) BSP-PS's period is the compute plus (m + 1) n beta, not 2 m n beta. Where make
  commbench timed the replies' landing with the run's number of machines in its placement
  (`Cluster.landing_gaps`: four TCP connections share the one queue, each with its own window,
  so at 100 Mbit/s tiny-resnet's last two replies of four land together), they land at that
  profile instead, none earlier than one after another. Stack "study": with one machine BytePS is not distributed
  (DMLC_NUM_WORKER=1), so only the node's reduce and broadcast run; ddlbench's runtime pushes
  through the servers even then (stack "ddlbench"). A machine's push when its PS rounds idled
  AFTER_COMPUTE_IDLE_S also pays what make commbench found a push/pull round costs right after
  compute beyond the same round back to back, where it timed one with the run's worker count in
  the run's placement (`Cluster.ps_after_compute_s`);
- ByteScheduler: partitions queue as their gradient appears; the dispatcher starts the most
  urgent while credit remains; credit returns when an all-reduce ends (A2A) or when the servers
  hold the push (PS); a parameter's update is launched as soon as its last partition lands, and
  the next forward pass waits, layer by layer, only for its own parameters (overlap with the
  next forward). The updates share the device with the compute, one stream in issue order
  (`forward_with_updates`): those launched during backward queue behind it, the rest run
  between the forward's pieces, so no update hides under compute. This runtime's A2A leader
  tells every other rank its choices before it launches them (`methods.bytescheduler`: every
  partition that can go when it picks, in one message), one message at a time: where make
  commbench timed its ordered round at the run's worker count in the run's placement, each
  message takes the time found from it (`Cluster.order_s`, `order_s`). The study's
  ByteScheduler-PS (`scheduler: byteps`) is WFBP-PS with BytePS's server schedule instead;
- every other method updates all parameters after all communication, and the next forward
  starts after that;
- workers and servers on one machine's cores (`Cluster.host_cpu`: a local run, the emulated
  cluster): every PS message costs that machine CPU (the worker's and the server's processes,
  the kernel's networking; measured by commbench's ps bursts, paced as backward spaces its
  gradients where measured so), which the compute lacks while the messages are in flight:
  where they leave during backward (WFBP, ByteScheduler), backward takes m x (the messages' CPU
  per machine) / cores longer (`host_cpu_s`), gradients appearing proportionally later. The
  last message's round is still timed whole after backward (the PS link's alpha and beta,
  measured on the same cores): its CPU counts twice. All-reduces that
  leave during backward (WFBP, MG-WFBP, DDP's buckets, ByteScheduler) likewise cost every worker
  the CPU commbench's fusion bursts measured per all-reduce at the run's worker count (Gloo's
  threads, the kernel's networking), and backward takes W x that / cores longer: for WFBP,
  MG-WFBP and DDP, each all-reduce's CPU spread over the time it runs and counted for the share
  that runs before backward ends (`allreduce_cpu_in_backward_s`); for ByteScheduler, every
  partition's but those that leave with backward's last gradient, and this runtime's
  ByteScheduler-A2A's at the cost of commbench's ordered rounds where they were timed (its
  leader's choice, a message of its own, before each: at 2 workers here 0.30-0.57 ms an
  all-reduce against 0.21-0.34 back to back). Where the workers hold every
  core and the all-reduces run on measured lanes (`starves`: 2 or 4 workers on 2 cores here,
  Gloo's receiving loop threads under SCHED_IDLE; for ByteScheduler 4, more workers than
  cores), none of that: an all-reduce launched during backward progresses only at its wire's
  share of its time till backward ends (none on a loopback; `Lanes.starve`), and no further than
  the first of its ring's 2 (W - 1) steps: Gloo's worker thread sends it, the kernels carry it,
  and each step after waits for the receiving loop thread, under SCHED_IDLE, to find a core idle
  (`ring_steps`); it takes no cores from backward. Where make commbench timed its per-tensor
  round beside compute at the run's worker count (`Cluster.starved_share`), what it measured
  replaces that rule: the wire runs on, the part that needs a core gets that share of one,
  through every step (2 ranks over emulated 100 Mbit/s links here: about a fifth; at 1 Gbit/s,
  on a loopback and at 4 ranks on 2 cores: none);
  ByteScheduler's, which overlap the next forward, till a forward's length after it (its
  pieces hold the cores as backward does: as if it computed first, then the messages ran);
- where those all-reduces starve, an eager method's iteration takes at least its compute plus
  every message's CPU (commbench's per worker, and what the runtime's launch from a gradient
  hook adds, `Options.launch_s`) at the cores' share, W / cores (`cpu_floor_s`): the lanes time
  the all-reduces after backward, the floor bounds the rank's whole CPU;
- a per-machine PS node of several workers on one machine's cores (a local run): its stage per
  message is at least what make commbench's node bursts took per key (`Cluster.node_ps_s`: the
  node's reduce, the leader's control message, push, pull and broadcast, as the runtime's
  NodeLayer runs them), not only the bare reduce and broadcast, and each message costs the
  machine the CPU those bursts measured per key (`HostCpu.node_ps`), not only the leader's push;
- the emulated cluster's links are tc token buckets (`Link.burst_bytes`, launch.netns): each
  link direction passes what finds tokens at once and the rest at the rate, tokens coming back
  between transfers (`Bucket`; modelled for the ring over one-worker machines and for PS links).

- every A2A method, stack "study", goes through Horovod 0.19, as the study's scripts set it:
  - ByteScheduler-A2A (its bytescheduler/ folder: Horovod with ByteScheduler's patch, no
    HOROVOD_* variable set) at Horovod's defaults: a request waits for the background loop's
    next cycle (5 ms), and each cycle fuses what is pending into buffers of at most 64 MiB
    (`HorovodCycle`);
  - BSP-A2A, WFBP-A2A and MG-WFBP through the study's own optimizer (its mgwfbp/ folder:
    `--threshold 536870912`, `--threshold 0`, `--mgwfbp`), whose benchmark scripts set
    HOROVOD_FUSION_THRESHOLD=0, HOROVOD_CYCLE_TIME=0 and HOROVOD_CACHE_CAPACITY=0 before Horovod
    starts (imagenet_benchmark.py, bert_benchmark.py): it calls allreduce_async_ once per group
    as the group's last gradient appears, and Horovod sends each request at once, on its own
    (`allreduce_comm`). So WFBP-A2A is one all-reduce per tensor, the startup-latency problem the
    study describes ("many small messages need to be transferred"), and MG-WFBP's groups are
    what its merge rule chose, nothing more.

- ByteScheduler's own machinery in this runtime (stack "ddlbench": its dispatcher and completion
  threads, per-parameter optimizer steps, forward pre-hooks, all under one GIL):
  `Options.bytescheduler_unit_s` per unit, serial on the update path before each parameter's
  update, calibrated from a one-worker run of the method (`calibrate_unit_s`: one worker of this
  runtime runs the whole machinery, and pushes through its servers on PS). 0 by default. Where
  the workers share a host's cores, the machinery's threads also take cores from the others'
  compute: there `Options.bytescheduler_cpu_s` as well, what the machinery adds to one worker's
  iteration beside W-1 neighbours doing the same (`profile.machinery_s`, a one-worker
  microbenchmark), lengthens backward as the messages' CPU does;
- stragglers: every iteration of W workers waits for the slowest one's compute. Where the
  profile was measured (`iteration_s`: one worker's iterations, on a shared machine beside the
  run's other workers), every compute time is the profile's times `Profile.sync_factor(W)`,
  E[max of W independent draws] / mean (on this VM's 2 cores, tiny-resnet: 1.06-1.08 at 2
  workers, 1.14-1.24 at 4). The roofline's profile has no spread: 1;
- one worker: compute only, but for this runtime's PS methods (its servers) and ByteScheduler
  (its updates as gradients land, and its machinery): `config.compute_only_at_one_worker`.

Not modelled: compute slowed by concurrent communication kernels or copies; the study's
ByteScheduler machinery (its busy polling thread and the GIL, its per-parameter Python update):
its one-GPU rows ran without ByteScheduler (off at size 1), so no one-worker run gives its cost,
and its ByteScheduler-A2A is predicted too fast; stragglers where the profile is the roofline's
(no measured spread), and workers' iterations that vary together; the servers' CPU beyond summing,
except on shared cores (above); concurrent all-reduces overlapping their start-ups (`Lanes`
slows a whole collective, latency too: on the emulated 1 Gbit/s link a burst of tiny-resnet's 29
per-tensor all-reduces took 57 ms, longer than the 45 ms they take one at a time, which lanes
that overlap start-ups cannot give at any speed). One scheduling step of our
CreditQueue (push, pop, release) costs 0.47 us per partition on this project's CPU (measured with
timeit over 400 partitions), so the queue's own cost is left out.

Measured, not modelled yet (each alone moves other methods the wrong way):
- this runtime's ByteScheduler machinery beside the compute, beyond its leader's messages. With
  a message per partition its launches came 1-2 ms apart at 2 local workers (traced tiny-resnet
  runs; the next forward waited 47 ms for its parameters) and its runs were 20-46% slower than
  WFBP-A2A's in every setup of the 2026-11-26 benches; the leader now sends every partition it
  can pick in one message, and on the 2026-11-27 benches (this version) ByteScheduler-A2A came
  within 6.5% (emulated) and 11.3% (local: +18% at 2 workers, where every method's 2-worker run
  was 9-19% slower than predicted) of the model. The messages' own time, from commbench's
  ordered round on idle ranks, is small here (0-1.1 ms each at 2 local workers over three
  rounds, 0 at 4 and at 1 Gbit/s, 1.0 and 5.4 ms at 100 Mbit/s). What remains is CPU: with the
  old protocol and 200 iterations of a 2-worker local run, ByteScheduler-A2A's processes used
  35.5 CPU-s in 21.7 s and WFBP-A2A's 23.5 in 14.7 s (both about 1.7 of the 2 cores busy), with
  twice the futex calls (strace: 340k against 166k): the GIL and the wake-ups of its dispatcher,
  completion and protocol threads beside the compute. A one-worker run shows 5 ms per
  iteration of it (its CPU over BSP-A2A's), the ordered round on idle ranks none, and with a
  thread training the model beside each rank the ordered round took 2.5 ms a message at 2
  workers but 54 ms at 4, ten times a run's, so no fixed load stands for a run's;
- a worker's messages while its cores compute: two Gloo workers here, each with a thread
  multiplying 256 x 256 matrices beside it, took 1.7-2.5 ms on average for a 1 KiB all-reduce
  (0.4-0.5 ms median: a call now and then waits out a scheduler slice) against 0.55-0.92 ms
  alone. commbench times its all-reduces on idle workers; WFBP's and ByteScheduler's messages
  leave during backward (where the workers hold every core, `starves` above models them:
  at 2 workers on 2 cores too, but ByteScheduler's);
- the cores a local run's other processes take: at 2 workers on 2 cores, commbench's 2-rank
  reduce (0.31 ms, a core per rank) is a third of what the run's node stage pays beside its
  server and dispatcher threads (its trace: 29 messages drain after backward at about 1.4 ms
  each, the reduces issued during backward all finish after it, Gloo's TCP loop threads busy a
  third of the cores), so 2-worker local PS runs are predicted 23-183% too fast; at 4 workers
  commbench's 4 ranks contend as the run does, and its fits match (-6 to +3%);
- an eager method's launches inside backward where each rank holds one core (2 local workers
  on 2 cores): a pair of pinned ranks sending tiny-resnet's gradients in MG-WFBP's 5 groups
  took 15.7 ms an iteration launched from the hooks and 14.6-14.8 launched after backward; the
  hooks cost the main thread its packs, divisions and Gloo's calls (0.8-1.0 ms; 0.6 after backward)
  and backward's compute 0.45 ms more, and the groups made no progress till backward ended.
  `Options.launch_s` (from WFBP's per-tensor launches) charges 0.3 ms of it: such runs come out
  7-16% too fast. Charging the hooks' packs and launches to backward moved none of them (the
  CPU floor binds), and charging each launch after 1 ms of compute commbench's after-compute
  cost fixed them but put WFBP-A2A's 4-worker runs 6-10% too slow.
"""
from __future__ import annotations

import functools
import heapq
import math
import statistics
from collections import deque
from dataclasses import dataclass, replace

from ddlbench.methods.bytescheduler import MAX_CHOICES, CreditQueue
from ddlbench.methods.grouped import fuse_by_threshold
from ddlbench.methods.mgwfbp import bench_sizes, fit_alpha_beta, merge_groups
from ddlbench.methods.ps import EngineMap, ScheduledQueue, plan
from ddlbench.methods import TOPOLOGIES as PS_TOPOLOGIES

from .network import ALGORITHMS, GLOO_THREADS, Cluster, Link
from .profile import GPU_MEM_BPS, Profile

METHODS = ("bsp-ps", "bsp-a2a", "wfbp-ps", "wfbp-a2a", "mg-wfbp", "bytescheduler-ps", "bytescheduler-a2a", "ddp")
STACKS = ("study", "ddlbench")
DDP_FIRST_BUCKET_BYTES = 1 << 20   # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
# Horovod 0.19's defaults (horovod/common/operations.cc, BackgroundThreadLoop:
# SetCycleTimeMs(5) and SetTensorFusionThresholdBytes(64 * 1024 * 1024) unless the environment
# overrides them; the study's ByteScheduler-A2A script overrides neither, its other A2A scripts
# set both to 0).
HOROVOD_CYCLE_S = 0.005
HOROVOD_FUSION_BYTES = 64 * 1024 * 1024
ITERATIONS = 3                     # simulated back to back; the last gap is the steady-state period
# an all-reduce stream idle this long before a collective (the ranks computed meanwhile) makes it
# pay Cluster.after_compute_s: commbench measures that after 5 ms of compute; WFBP's and MG-WFBP's
# messages during backward come well under 1 ms apart here, and only the first of an iteration pays
AFTER_COMPUTE_IDLE_S = 1e-3
MACHINE_ITERATIONS = 12            # per-machine PS (`ps_machines_period_s`): the mean of the last 6


@functools.lru_cache(maxsize=None)
def _method_yaml(name: str) -> dict:
    import yaml

    from ddlbench.config import conf_dir

    path = conf_dir() / "method" / f"{name}.yaml"
    if name not in METHODS or not path.exists():
        raise ValueError(f"method {name!r} is unknown to the predictor; accepted: {', '.join(METHODS)}")
    return yaml.safe_load(path.read_text())


def method_config(name: str, bytescheduler_ps: str = "byteps") -> dict:
    """conf/method/<name>.yaml as a dict (read once per process), the ByteScheduler-PS variant filled in."""
    cfg = dict(_method_yaml(name))
    if "scheduler" in cfg:
        cfg["scheduler"] = bytescheduler_ps
    return cfg


# -- the event engine -------------------------------------------------------------------------
class Sim:
    def __init__(self):
        self.heap: list = []
        self.seq = 0
        self.now = 0.0

    def at(self, t: float, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, args))

    def run(self) -> None:
        heap = self.heap
        while heap:
            t, _, fn, args = heapq.heappop(heap)
            self.now = t
            fn(*args)


class Station:
    """One resource serving one job at a time: a link direction, a NCCL stream, an engine
    thread. FIFO, or `queue` (put/get: e.g. ps.ScheduledQueue) picks the next job. A job is
    (duration_s, min_end_s, on_start, on_done): it ends at max(start + duration, min_end), which
    lets a transfer stream through two links at the slower one's pace. A link direction may have
    a token bucket (`bucket`): its jobs' durations then come from `timed`, decided at their start."""

    def __init__(self, sim: Sim, queue=None, bucket: "Bucket | None" = None):
        self.sim = sim
        self.queue = queue
        self.bucket = bucket if bucket is not None and bucket.depth else None
        self.fifo: deque = deque()
        self.busy = False

    def submit(self, job) -> None:
        if self.queue is not None:
            self.queue.put(job)
        else:
            self.fifo.append(job)
        if not self.busy:
            self._next()

    def _next(self) -> None:
        if self.queue is None:
            if not self.fifo:
                self.busy = False
                return
            job = self.fifo.popleft()
        elif self.queue._heap:
            job = self.queue.get()
        else:
            self.busy = False
            return
        self.busy = True
        sim = self.sim
        now = sim.now
        dur, min_end, on_start, on_done = job[-4:]
        if dur.__class__ is not float and callable(dur):  # a duration that depends on when the job
            dur = dur(now)                                   # starts (a Bucket's tokens)
        end = now + dur
        if min_end > end:
            end = min_end
        if on_start is not None:
            on_start(now, end)
        sim.seq += 1
        heapq.heappush(sim.heap, (end, sim.seq, self._done, (on_done,)))

    def _done(self, on_done) -> None:
        if on_done is not None:
            on_done()
        self._next()

    def timed(self, nbytes: float, base_s: float, extra_s: float = 0.0):
        return timed(self.bucket, nbytes, base_s, extra_s)


def timed(bucket: "Bucket | None", nbytes: float, base_s: float, extra_s: float = 0.0):
    """A job's duration (`Station`, `Lanes`): `base_s` at the link's rate plus `extra_s`, less what
    the link direction's `bucket` lets `nbytes` of it pass at once when the job starts (then a
    function of that time)."""
    if bucket is None:
        return base_s + extra_s
    return lambda now: bucket.duration_s(now, nbytes, base_s) + extra_s


class Bucket:
    """A token bucket in front of one link direction (tc tbf: the emulated cluster's links,
    `Link.burst_bytes` deep): a transfer's bytes that find tokens pass at once, the rest at the
    link's rate; tokens come back at the rate between transfers, up to the depth. A transfer's
    alpha counts as part of it (no refill): its software cost runs on the same cores, and
    commbench's fit, whose alpha this is, timed back-to-back calls on drained buckets. A
    Station ignores a bucket of no depth (a real link)."""

    def __init__(self, link: Link):
        self.depth, self.beta = link.burst_bytes, link.beta_s_per_byte
        self.tokens, self.idle_from = self.depth, 0.0

    def duration_s(self, now: float, nbytes: float, base_s: float) -> float:
        """The duration of a transfer of `nbytes` (`base_s` at the rate) starting at `now`. A
        transfer that starts while another still sends (Gloo's concurrent collectives, `Lanes`)
        finds only the tokens that one left: none come back while the link sends."""
        if self.beta <= 0:  # a link of no per-byte time (explain's what-if): nothing for tokens to save
            self.idle_from = max(self.idle_from, now + base_s)
            return base_s
        tokens = min(self.depth, self.tokens + max(0.0, now - self.idle_from) / self.beta)
        used = min(tokens, nbytes)
        self.tokens = tokens - used  # what the transfer leaves: sending at the rate refills nothing
        dur = max(0.0, base_s - used * self.beta)
        self.idle_from = max(self.idle_from, now + dur)
        return dur


# -- the cluster's communication, per worker ----------------------------------------------------
@dataclass
class Options:
    stack: str = "study"            # "study": BytePS/Horovod as the study ran them; "ddlbench": this runtime
    algorithm: str | None = None    # all-reduce algorithm, one of network.ALGORITHMS; None: default_algorithm
    backend: str | None = None      # the run's backend where known (gloo: its ring)
    bytescheduler_ps: str = "byteps"  # the study's variant (profile=study); "worker": ByteScheduler's queue
    servers: int | None = None      # PS servers; None = one per worker machine (the study)
    bytescheduler_unit_s: float = 0.0  # ByteScheduler's own machinery per unit (this runtime's threads
                                    # and per-parameter updates), serial on the update path; from a
                                    # one-worker run of the method (`calibrate_unit_s`); 0: not modelled
    bytescheduler_cpu_s: float = 0.0  # the same machinery where the workers share a host's cores:
                                    # what it adds to one worker's iteration beside the others,
                                    # taken from compute as the messages' CPU is; from one worker
                                    # beside W-1 neighbours (`profile.machinery_s`); 0: not modelled
    launch_s: float = 0.0           # what an eager method's launch of an all-reduce costs the worker's
                                    # thread beyond make commbench's bare launch (`HostCpu.allreduce_s`
                                    # holds that), per message; from a one-worker run of the runtime's
                                    # WFBP (`profile.measure_launch`); 0: not modelled (`cpu_floor_s`)
    server_contention: bool = True  # False: a what-if for `explain`: each server link carries one
                                    # machine's bytes and summing is free
    mgwfbp_alpha_beta: tuple[float, float] | None = None  # MG-WFBP's alpha, beta as a run resolved
                                    # them (its record's start-up fit); None: `mgwfbp_alpha_beta()`
    mgwfbp_group_bytes: tuple[int, ...] | None = None  # MG-WFBP's groups as a run sent them (its
                                    # record's `groups`: bytes per group, in send order), taken as
                                    # they are (`run_groups`); None: merged here (`merge_groups`)
    ps_topology: str | None = None  # PS: per-machine or per-gpu (a run's `method.ps_topology`); None: the
                                    # method config's (per-machine, as the study ran BytePS)
    stragglers: bool = True         # False: a what-if for `explain`: every worker computes in the mean
                                    # time, none waits for the slowest (`Profile.sync_factor`)
    horovod_cycle_s: float = HOROVOD_CYCLE_S  # stack study: Horovod's cycle, which ByteScheduler-A2A's
                                    # messages wait for (`HorovodCycle`); 0: each goes at once

    def __post_init__(self):
        if self.stack not in STACKS:
            raise ValueError(f"stack={self.stack!r} is unknown; accepted: {', '.join(STACKS)}")
        self.algorithm = self.algorithm or default_algorithm(self.stack, self.backend)
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r} is unknown; accepted: {', '.join(ALGORITHMS)}")
        if self.mgwfbp_alpha_beta is not None and not (isinstance(self.mgwfbp_alpha_beta, (tuple, list))
                                                       and len(self.mgwfbp_alpha_beta) == 2
                                                       and all(v >= 0 for v in self.mgwfbp_alpha_beta)):
            raise ValueError(f"mgwfbp_alpha_beta={self.mgwfbp_alpha_beta!r} is invalid; accepted: (alpha_s, "
                             f"beta_s_per_byte), both >= 0, or None")
        for knob in ("bytescheduler_unit_s", "bytescheduler_cpu_s", "launch_s"):
            value = getattr(self, knob)
            if not 0 <= value < math.inf or (value and self.stack != "ddlbench"):
                raise ValueError(f"{knob}={value!r} with stack={self.stack!r} is invalid; accepted: >= 0 seconds, "
                                 f"and 0 but with stack ddlbench (this runtime's machinery)")
        groups = self.mgwfbp_group_bytes
        if groups is not None and not (isinstance(groups, (tuple, list)) and groups
                                       and all(isinstance(n, int) and n > 0 for n in groups)):
            raise ValueError(f"mgwfbp_group_bytes={groups!r} is invalid; accepted: bytes per group in send order "
                             f"(whole numbers > 0), or None")
        if not (isinstance(self.horovod_cycle_s, (int, float)) and self.horovod_cycle_s >= 0):
            raise ValueError(f"horovod_cycle_s={self.horovod_cycle_s!r} is invalid; accepted: >= 0 seconds "
                             f"(0: each request at once)")
        from ddlbench.config import BYTESCHEDULER_PS_VARIANTS

        if self.bytescheduler_ps not in BYTESCHEDULER_PS_VARIANTS:
            raise ValueError(f"bytescheduler_ps={self.bytescheduler_ps!r} is unknown; accepted: byteps, worker")
        if self.ps_topology not in (None, *PS_TOPOLOGIES):
            raise ValueError(f"ps_topology={self.ps_topology!r} is unknown; accepted: {', '.join(PS_TOPOLOGIES)}")
        if self.ps_topology == "per-gpu" and self.stack == "study":
            raise ValueError("ps_topology='per-gpu' with stack='study' is invalid (the study's BytePS pushes once "
                             "per machine); accepted: per-machine, or per-gpu with stack ddlbench")


# Costs known to exist and left out of a method's model, which make its prediction an upper bound
# rather than an estimate (the module's docstring, "Not modelled"); by (stack, method).
NOT_MODELLED = {
    ("study", "bytescheduler-a2a"): "the study's ByteScheduler plugin (a busy Python polling thread, per-parameter "
                                    "Python updates, a lock per parameter before each layer's forward) is not "
                                    "modelled; no spec, microbenchmark or one-GPU run gives its cost",
}


def upper_bound(method: str, opts: Options) -> str | None:
    """Why `method`'s prediction is an upper bound under `opts`, or None where it is an estimate."""
    return NOT_MODELLED.get((opts.stack, method))


def per_gpu(cfg: dict, opts: Options) -> bool:
    """Whether every worker pushes (ps_topology=per-gpu), not one per machine after its reduce."""
    return (opts.ps_topology or cfg.get("ps_topology", "per-machine")) == "per-gpu"


def pushers(cluster: Cluster, workers: int, cfg: dict, opts: Options) -> int:
    """How many push each partition, as `methods.ps_node` lays them out: one per machine
    (per-machine: the node's leader, after its reduce), or every worker (per-gpu)."""
    return workers if per_gpu(cfg, opts) else cluster.nodes(workers)[0]


def default_algorithm(stack: str, backend: str | None = None) -> str:
    """The all-reduce algorithm a stack and backend run: the study's NCCL 2.4.8 rule for `study`;
    Gloo's ring (gloo/allreduce.cc: an unspecified algorithm is the ring) for `gloo`; else a
    current NCCL's choice, the faster of ring and tree."""
    if stack == "study":
        return "nccl-2.4"
    return "ring" if backend == "gloo" else "nccl"


def starves(cluster: Cluster, workers: int, algorithm: str, queue: bool = False) -> bool:
    """The workers share one machine's cores (`Cluster.host_cpu`) and hold every one of them,
    and their all-reduces run on measured lanes (`Lanes`): there no all-reduce progresses during
    backward beyond its wire's time (`Lanes.starve`), and none takes cores from it. Gloo's loop
    threads, which receive every message, run under SCHED_IDLE on shared cores
    (`hostcpu.settle_gloo_loops`), so they get a core only when no worker computes on it: a
    worker's compute holds at least one, so W workers on W cores or fewer leave none. Traced here
    (tiny-resnet, 4 workers on 2 cores): of WFBP-A2A's per-tensor all-reduces, local and at
    1 Gbit/s emulated, the first ended within 0.5 ms of the last worker's backward, the rest
    1.1-1.3 ms apart after it, and that backward ended when the compute alone would; MG-WFBP's
    159 KB group at 100 Mbit/s, launched during backward, ended about a wire's time after its
    launch. At 2 workers on the 2 cores, WFBP-A2A's runs took 7.7-8.1 ms an iteration beyond
    their compute (two local benches), where all-reduces running during backward gave 4.1.
    ByteScheduler's queue (`queue`) starves only where the workers outnumber the cores: its
    dispatcher and completion threads take the GIL from the compute's hooks and leave the
    cores idle in between, where the loop threads run (at 2 workers on 2 cores its runs came
    out 7-38% slower than predicted when starved, 1-18% faster when not: the model keeps the
    second; inferred from three benches, not traced). How far an all-reduce gets meanwhile is
    `Lanes`' rule, or what make commbench's round beside compute measured
    (`Cluster.starved_share`)."""
    if cluster.host_cpu is None or measured_lane_speed(cluster, workers, algorithm) is None:
        return False
    cores = cluster.host_cpu.cores
    return workers > cores if queue else workers >= cores


def measured_lane_speed(cluster: Cluster, workers: int, algorithm: str) -> float | None:
    """The speed of Gloo's concurrent all-reduces where make commbench timed a burst of them at
    this worker count, in this placement, with this algorithm (`Cluster.lane_speed`), else None."""
    return (cluster.lane_speed.get(workers) or None) if algorithm == cluster.measured_algorithm else None


def ring_link_bytes(nbytes: float, workers: int) -> float:
    """What a ring all-reduce of n bytes sends through each link direction: 2 (W-1) / W of it."""
    return 2 * (workers - 1) / workers * nbytes


def ring_link(cluster: Cluster, workers: int, algorithm: str) -> Link | None:
    """The shaped link (a token bucket's) that a ring across machines meets, or None: the
    emulated cluster's hosts; `ring_bucket`."""
    m, _ = cluster.nodes(workers)
    return cluster.inter if m > 1 and algorithm == "ring" and cluster.inter.burst_bytes > 0 else None


def core_bound_s(dur_s: float, link_bytes: float, link: Link | None) -> float:
    """What of an all-reduce's `dur_s` alone needs a core (`Lanes`' starved_s): all of it, but
    for the time `link_bytes` take at a shaped `link`'s rate (`ring_link`), where there is one."""
    return max(0.0, dur_s - (link_bytes * link.beta_s_per_byte if link is not None else 0.0))


def ring_bucket(cluster: Cluster, workers: int, algorithm: str, buckets: dict | None = None) -> Bucket | None:
    """The token bucket an all-reduce stream sees, or None: a ring across machines (the emulated
    cluster's hosts) sends `ring_link_bytes` of each all-reduce through every link direction
    between them, each behind its own bucket, alike: one stands for all. With several workers a
    machine the ring still leaves each machine once each way (ranks fill machines in order), so
    each link direction carries one chunk a step, as with one. `buckets`: `kept_bucket`'s."""
    link = ring_link(cluster, workers, algorithm)
    return kept_bucket(buckets, "ring", link) if link is not None else None


def kept_bucket(buckets: dict | None, key, link: Link) -> Bucket:
    """The token bucket of link direction `key`: where `buckets` is given, the one it keeps for
    that key (made full the first time), so that iterations simulated one after another share
    it and each starts with the tokens the one before left (at 100 Mbit/s an iteration's idle
    spell refills far less than the 128 KiB depth); else a full new one."""
    if buckets is None:
        return Bucket(link)
    if key not in buckets:
        buckets[key] = Bucket(link)
    return buckets[key]


STARVED_EPS_S = 1e-12  # what a starved job has left of its step in flight, below which it has none


class Lanes:
    """Collectives on a process group with `lanes` worker threads (Gloo's: ProcessGroupGloo runs
    each async collective on the next free one of its threads, 2 by default): they start in
    submission order, up to `lanes` at once; one alone runs at its own pace, and while more run
    each progresses at `shared_speed` of it: the threads share the machine's cores and the links.
    A job is (duration alone, on_done). Processor sharing: whenever a job starts or ends, the
    others' remaining work is brought up to date and the next end rescheduled.

    Until `starve`'s time (the workers' compute holding every core), a job progresses
    only at the share of its time that is not its `starved_s` (what needs a core: all of it on
    one machine's loopback, all but the wire's time on the emulated cluster's shaped links), and
    only through the first of its `steps` (`submit`). Where make commbench measured what
    all-reduces get while every rank computes (`starved_share`, `Cluster.starved_share`: the
    share of a core the part that needs one gets), a job's wire runs meanwhile and its
    `starved_s` takes 1 / that share as long, through all of its steps (0: none progresses but
    on the wire alone)."""

    def __init__(self, sim: Sim, lanes: int, shared_speed: float, starved_share: float | None = None):
        self.sim, self.lanes, self.shared_speed = sim, lanes, shared_speed
        self.starved_share = starved_share
        self.fifo: deque = deque()
        self.running: dict[int, list] = {}  # job id -> [remaining seconds alone, on_done, speed while starved]
        self.seq = self.version = 0
        self.last = 0.0
        self.starved_until = -math.inf

    def starve(self, until: float) -> None:
        """Until `until`, jobs progress only at their speed while starved (see the class)."""
        self._advance()
        self.starved_until = until
        self.sim.at(until, self._wake)
        self._schedule()

    def submit(self, dur_s: float, on_done, on_start=None, starved_s: float = 0.0, steps: int = 1) -> None:
        """`steps`: the job's steps, each of which needs a core to begin (a ring's 2 (W - 1): each
        next one waits for its thread); while starved it goes no further than its first."""
        self._advance()
        self.fifo.append((dur_s, on_done, on_start, starved_s, steps))
        self._fill()
        self._schedule()

    def _rate(self) -> float:
        return self.shared_speed if len(self.running) > 1 else 1.0

    def _speed(self, job: list) -> float:
        """A job's speed relative to the lanes' rate now: while starved, its share that needs no
        core, till it has done the step in flight."""
        if self.sim.now < self.starved_until:
            return job[2] if job[3] > STARVED_EPS_S else 0.0
        return 1.0

    def _advance(self) -> None:
        now = self.sim.now
        if self.running and now > self.last:
            rate = self._rate()
            starved = max(0.0, min(now, self.starved_until) - self.last)
            free = now - self.last - starved
            for job in self.running.values():
                done_starved = min(starved * job[2] * rate, job[3])  # no further than its step in flight
                job[3] -= done_starved
                job[0] -= done_starved + free * rate
        self.last = now

    def _fill(self) -> None:
        while self.fifo and len(self.running) < self.lanes:
            self.seq += 1
            dur, on_done, on_start, starved_s, steps = self.fifo.popleft()
            if callable(dur):  # a duration that depends on when the job starts (a Bucket's tokens)
                dur = dur(self.sim.now)
            if on_start is not None:
                on_start(self.sim.now)
            # [time left alone, on_done, speed while starved, what it may still do while starved]
            self.running[self.seq] = [dur, on_done, *starved_pace(dur, starved_s, steps, self.starved_share)]

    def _left_s(self) -> dict[int, float]:
        """Each running job's time to its end at the present pace (inf: none while starved)."""
        rate, starved = self._rate(), self.sim.now < self.starved_until
        # while starved, a job that would pass the end of its step in flight stalls there: it ends
        # only after the starving (`_wake` reschedules)
        return {j: max(0.0, job[0]) / (rate * self._speed(job))
                if self._speed(job) > 0 and not (starved and job[0] > job[3] + STARVED_EPS_S) else math.inf
                for j, job in self.running.items()}

    def _schedule(self) -> None:
        self.version += 1
        if self.running:
            first = min(self._left_s().values())
            if first < math.inf:  # else the end of the starving (`_wake`) reschedules
                self.sim.at(self.sim.now + first, self._end, self.version)

    def _wake(self) -> None:
        self._advance()
        self._schedule()

    def _end(self, version: int) -> None:
        if version != self.version:  # a start or an end since changed every job's pace
            return
        self._advance()
        left = self._left_s()
        first = min(left.values())
        done = [j for j, t in left.items() if t <= first + 1e-12]
        callbacks = [self.running.pop(j)[1] for j in done]
        self._fill()
        self._schedule()
        for on_done in callbacks:
            if on_done is not None:
                on_done()


def starved_pace(dur_s: float, starved_s: float, steps: int, share: float | None) -> tuple[float, float]:
    """(speed while starved, what it may do while starved) of a `Lanes` job of `dur_s` alone, of
    which `starved_s` needs a core: without a measured `share`, its wire's share of its time,
    through its first of `steps`; with one, its whole time over its wire's plus `starved_s` /
    `share`, through all of it (none where `share` is 0 and any of it needs a core)."""
    if dur_s <= 0:
        return 1.0, dur_s
    starved_s = min(max(0.0, starved_s), dur_s)
    wire_s = dur_s - starved_s
    if share is None:
        return wire_s / dur_s, dur_s / steps
    if starved_s <= STARVED_EPS_S:
        return 1.0, math.inf
    if share <= 0:
        return 0.0, 0.0
    return dur_s / (wire_s + starved_s / share), math.inf


def computing_round_s(durations_s: list[float], starved_s: list[float], lanes: int, shared_speed: float,
                      share: float | None, pace_s: float, bucket: "Link | None" = None,
                      link_bytes: list[float] | None = None) -> float:
    """make commbench's round beside compute (`per_tensor_computing`): every rank computes, the
    k-th of the collectives `durations_s` (each one's time alone, `starved_s` of it needing a
    core) launched at (k + 1) x `pace_s`, the compute ending with the last launch; `Lanes` at
    `shared_speed`, starved till then at `share` (`starved_pace`), behind a full `bucket` where
    given: when the last collective ends."""
    sim = Sim()
    lanes_ = Lanes(sim, lanes, shared_speed, share)
    tokens = Bucket(bucket) if bucket is not None and bucket.burst_bytes else None
    lanes_.starve(len(durations_s) * pace_s)
    for i, (d, c) in enumerate(zip(durations_s, starved_s)):
        sim.at((i + 1) * pace_s, lanes_.submit, timed(tokens, link_bytes[i] if tokens else 0, d), None, None, c)
    sim.run()
    return sim.now


STARVED_SHARE_GRID = 20  # `starved_share`'s scan: shares 0, 1/20, ..., 1 before it bisects


def starved_share(durations_s: list[float], starved_s: list[float], measured_s: float, lanes: int,
                  shared_speed: float, pace_s: float, bucket: "Link | None" = None,
                  link_bytes: list[float] | None = None) -> float:
    """The share of a core the all-reduces' core-bound part gets while every rank computes
    (`starved_pace`), at which `computing_round_s` takes `measured_s`: the least share whose
    round takes no longer, found on a grid of STARVED_SHARE_GRID steps, then by bisection within
    its step (the round need not shorten as the share grows: behind a token bucket, lanes that
    starve run one at a time more, which two lanes sharing below half speed make the faster); 0
    where even none gives no longer a round, 1 where even a whole core gives a longer one."""
    def took(share: float) -> float:
        return computing_round_s(durations_s, starved_s, lanes, shared_speed, share, pace_s, bucket, link_bytes)
    if took(0.0) <= measured_s:
        return 0.0
    grid = [k / STARVED_SHARE_GRID for k in range(1, STARVED_SHARE_GRID + 1)]
    hi = next((g for g in grid if took(g) <= measured_s), None)
    if hi is None:
        return 1.0
    lo = hi - 1 / STARVED_SHARE_GRID
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if took(mid) <= measured_s else (mid, hi)
    return (lo + hi) / 2


def ring_steps(ranks: int) -> int:
    """A ring all-reduce's steps: W - 1 of reduce-scatter, W - 1 of all-gather, each a chunk sent
    to the next rank once the one before arrived (and was summed): each begins on its thread."""
    return max(1, 2 * (ranks - 1))


def slowest_lane_speed(lanes: int) -> float:
    """`lane_speed`'s floor: sharing slows every collective more than it overlaps them."""
    return 1 / (2 * lanes)


def lane_speed(durations_s: list[float], measured_s: float, lanes: int, bucket: "Link | None" = None,
               link_bytes: list[float] | None = None, pace_s: float = 0.0) -> float:
    """The speed of each of `lanes` concurrent collectives (`Lanes`, with every lane busy) at which
    the burst `durations_s` (each one's time alone, all submitted at once, as commbench's fusion
    mode launches a model's per-tensor all-reduces and then waits for them; or one every `pace_s`,
    as its paced round does) takes `measured_s`: by bisection, the burst's time falling as the
    speed grows. Between 1 / (2 lanes) (sharing slows every collective more than it overlaps) and
    1 (a lane each costs nothing). `bucket`: the token bucket of the links (an emulated network),
    which each collective's `link_bytes` meet at its start, as in the run."""
    lo, hi = slowest_lane_speed(lanes), 1.0

    def took(speed: float) -> float:
        return burst_s(durations_s, lanes, speed, bucket, link_bytes, pace_s)
    if took(lo) <= measured_s:
        return lo
    if took(hi) >= measured_s:
        return hi
    for _ in range(40):  # to 2^-40 of the range; the burst's time falls as the speed grows
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if took(mid) <= measured_s else (mid, hi)
    return (lo + hi) / 2


def paced_round_tells(durations_s: list[float], measured_s: float, lanes: int, pace_s: float,
                      bucket: "Link | None" = None, link_bytes: list[float] | None = None) -> bool:
    """Whether a paced round (`durations_s` launched one every `pace_s`, `measured_s` in all)
    bounds the lane speed: not where its launches alone, even at the slowest speed, take as long
    as it did (each all-reduce ends before the next starts; `lane_speed` would return its floor,
    which is no measurement). Both places that fit a speed from a paced round ask this
    (`network._lane_speeds` on the fit's times, `network.emulated_lanes` on the tc wire's)."""
    return burst_s(durations_s, lanes, slowest_lane_speed(lanes), bucket, link_bytes, pace_s) > measured_s


def burst_s(durations_s: list[float], lanes: int, shared_speed: float, bucket: "Link | None" = None,
            link_bytes: list[float] | None = None, pace_s: float = 0.0) -> float:
    """How long `Lanes` take for collectives of these times alone, all submitted at once, or the
    k-th at k x `pace_s` (behind a full `bucket`, where given)."""
    sim = Sim()
    lanes_ = Lanes(sim, lanes, shared_speed)
    tokens = Bucket(bucket) if bucket is not None and bucket.burst_bytes else None
    for i, d in enumerate(durations_s):
        job = (timed(tokens, link_bytes[i] if tokens else 0, d), None)
        if pace_s and i:
            sim.at(i * pace_s, lanes_.submit, *job)
        else:
            lanes_.submit(*job)
    sim.run()
    return sim.now


def order_s(durations_s: list[float], measured_s: float, lanes: int, shared_speed: float | None,
            bucket: "Link | None" = None, link_bytes: list[float] | None = None) -> float:
    """The time each message of ByteScheduler's leader takes (the order protocol: it tells every
    other rank, then launches) at which commbench's ordered round (`durations_s`: its per-tensor
    all-reduces, each one's time alone, all ready at once, one choice a message: the k-th
    launched once the k-th message is told, (k + 1) x the message's time) takes `measured_s`, on
    `lanes` sharing at `shared_speed` (None: one at a time), behind `bucket` where given: by
    bisection, between 0 (the all-reduces alone take that long) and the round's time per
    message."""
    lanes, speed = (lanes, shared_speed) if shared_speed else (1, 1.0)

    def took(s: float) -> float:
        return s + burst_s(durations_s, lanes, speed, bucket, link_bytes, pace_s=s)
    lo, hi = 0.0, measured_s / len(durations_s)
    if took(lo) >= measured_s:
        return lo
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if took(mid) < measured_s else (lo, mid)
    return (lo + hi) / 2


class AfterCompute:
    """A stream's or a wire's messages, for what one pays where it starts with nothing of its own
    in flight for AFTER_COMPUTE_IDLE_S (the workers computed meanwhile): `extra_s`, once, as make
    commbench measured a message after compute beyond the same back to back."""

    def __init__(self, sim: Sim, extra_s: float):
        self.sim, self.extra_s = sim, extra_s
        self.in_flight, self.idle_since = 0, -math.inf

    def start(self) -> float:
        """A message starts: what it pays beyond its own time."""
        cold = self.in_flight == 0 and self.sim.now - self.idle_since >= AFTER_COMPUTE_IDLE_S
        self.in_flight += 1
        return self.extra_s if cold else 0.0

    def ended(self, on_done):
        """`on_done` for a started message, counting it out first."""
        def ended() -> None:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.idle_since = self.sim.now
            if on_done is not None:
                on_done()
        return ended


def allreduce_after_compute_s(cluster: Cluster, workers: int, algorithm: str) -> float:
    """What make commbench found an all-reduce costs right after every rank computed, beyond the
    same back to back, at this worker count and with this algorithm (`Cluster.after_compute_s`);
    0 where it timed none."""
    return cluster.after_compute_s.get(workers, 0.0) if algorithm == cluster.measured_algorithm else 0.0


class AllReduceComm:
    """One NCCL stream: collectives one at a time, in submission order. Where make commbench timed
    a burst of the backend's async all-reduces at this worker count, in this placement
    (`Cluster.lane_speed`: Gloo's two threads), they run as `Lanes` instead."""

    def __init__(self, sim: Sim, cluster: Cluster, workers: int, algorithm: str, buckets: dict | None = None):
        self.sim, self.cluster, self.workers, self.algorithm = sim, cluster, workers, algorithm
        speed = measured_lane_speed(cluster, workers, algorithm)
        self.lanes = Lanes(sim, GLOO_THREADS, speed, cluster.starved_share.get(workers)) if speed else None
        self.link = ring_link(cluster, workers, algorithm)
        self.bucket = ring_bucket(cluster, workers, algorithm, buckets)  # each collective meets it as it starts
        self.stream = None if self.lanes else Station(sim, bucket=self.bucket)
        # a collective submitted after the stream idled AFTER_COMPUTE_IDLE_S (the ranks computed)
        # pays what make commbench found one costs then, beyond its own time (Cluster.after_compute_s)
        self.after_compute = AfterCompute(sim, allreduce_after_compute_s(cluster, workers, algorithm))

    def starve(self, until: float) -> None:
        """The workers compute on every core until `until` (`starves`): till then an
        all-reduce progresses only as fast as its wire's share of its time lets it, through its
        ring's first step, or as make commbench's round beside compute found (`Lanes`)."""
        self.lanes.starve(until)

    def send(self, nbytes: int, extra_s: float, on_done, on_start=None) -> None:
        w = self.workers
        dur = self.cluster.allreduce_s(nbytes, w, self.algorithm)
        if self.after_compute.extra_s:
            extra_s += self.after_compute.start()
            on_done = self.after_compute.ended(on_done)
        if self.lanes is not None:
            link_bytes = ring_link_bytes(nbytes, w)
            # the shaped wire's time needs no core; the rest (all of it on a loopback) does, and
            # so does the start of every ring step after the first
            self.lanes.submit(timed(self.bucket, link_bytes, dur, extra_s), on_done, on_start,
                              starved_s=core_bound_s(dur, link_bytes, self.link) + extra_s, steps=ring_steps(w))
            return
        self.stream.submit((self.stream.timed(ring_link_bytes(nbytes, w), dur, extra_s), 0.0,
                            None if on_start is None else (lambda now, end: on_start(now)), on_done))


class HorovodCycle:
    """Horovod's background loop in front of a NCCL stream (`AllReduceComm`): a request waits for
    the next cycle boundary (RunLoopOnce sleeps until last_cycle_start + cycle time); at each,
    the pending requests, in request order, are fused greedily into buffers of at most
    `fusion_bytes` (docs/tensor-fusion.rst: "select first few tensors that fit"), each one
    all-reduce plus a copy into and out of the fusion buffer."""

    def __init__(self, sim: Sim, comm: AllReduceComm, cycle_s: float = HOROVOD_CYCLE_S,
                 fusion_bytes: int = HOROVOD_FUSION_BYTES):
        self.sim, self.comm, self.cycle_s, self.fusion_bytes = sim, comm, cycle_s, fusion_bytes
        self.pending: list = []
        self.tick_pending = False

    def starve(self, until: float) -> None:
        self.comm.starve(until)

    def send(self, nbytes: int, extra_s: float, on_done) -> None:
        self.pending.append((nbytes, extra_s, on_done))
        if not self.tick_pending:
            self.tick_pending = True
            at = (math.floor(self.sim.now / self.cycle_s) + 1) * self.cycle_s if self.cycle_s > 0 else self.sim.now
            self.sim.at(at, self._cycle)

    def _cycle(self) -> None:
        self.tick_pending = False
        batch, self.pending = self.pending, []
        groups: list[list] = []
        for req in batch:
            if groups and sum(r[0] for r in groups[-1]) + req[0] <= self.fusion_bytes:
                groups[-1].append(req)
            else:
                groups.append([req])
        for g in groups:
            nbytes = sum(r[0] for r in g)
            self.comm.send(nbytes, copy_s(nbytes, len(g)) + sum(r[1] for r in g), lambda g=g: [r[2]() for r in g])


def unpack_s(p: "Plan", profile: Profile) -> float:
    """Unpacking every fused message of a plan after its all-reduce (`copy_s`)."""
    nbytes = profile.tensor_bytes  # a list built per access: once, not once per tensor
    return sum(copy_s(sum(nbytes[i] for i in msg), len(msg), profile) for msg in p.messages)


def allreduce_comm(sim: Sim, cluster: Cluster, workers: int, opts: Options, horovod_defaults: bool = False,
                   buckets: dict | None = None):
    """An A2A method's all-reduces: the stream (`AllReduceComm`); for the study's stack, where
    Horovod ran at its defaults (`horovod_defaults`: ByteScheduler-A2A), behind its cycle and
    fusion (`HorovodCycle`). The study's other A2A methods set Horovod's cycle and fusion to 0:
    each request goes at once, alone, as on the stream itself. `buckets`: `kept_bucket`'s."""
    comm = AllReduceComm(sim, cluster, workers, opts.algorithm, buckets)
    return HorovodCycle(sim, comm, opts.horovod_cycle_s) if opts.stack == "study" and horovod_defaults else comm


def copy_s(nbytes: float, tensors: int, profile: Profile | None = None) -> float:
    """Packing `tensors` tensors of `nbytes` in all into one buffer, or unpacking it, on the
    profile's device (`Profile.copy_s`), else a read and a write at the GPU's memory bandwidth
    (Horovod's fusion buffer in the study's stack); none for one tensor (it is sent in place)."""
    if profile is not None:
        return profile.copy_s(nbytes, tensors)
    return 2 * nbytes / GPU_MEM_BPS if tensors > 1 else 0.0


class PSComm:
    """BytePS per machine: node reduce -> push -> server sum -> pull -> node broadcast, per
    partition of `ps.plan`, over stations for the node's NCCL stream, the machine's two link
    directions, and each server's two link directions and engine threads."""

    def __init__(self, sim: Sim, cluster: Cluster, workers: int, message_numels: list[int], element_size: int,
                 method_cfg: dict, opts: Options, server_schedule: bool, buckets: dict | None = None):
        self.sim, self.cluster, self.algorithm = sim, cluster, opts.algorithm
        self.m, self.g = cluster.nodes(workers)
        self.S = opts.servers or self.m
        self.pushers = pushers(cluster, workers, method_cfg, opts)
        self.per_machine = self.g if per_gpu(method_cfg, opts) else 1  # pushes leaving a (full) machine per partition
        self.parts = plan(message_numels, element_size, int(method_cfg["partition_bytes"]), self.S)
        self.esize = element_size
        self.local_only = self.m == 1 and opts.stack == "study"  # BytePS with DMLC_NUM_WORKER=1
        self.node = Station(sim)
        if not self.local_only:
            # each link direction, with its token bucket (the emulated cluster's; none on a real link)
            wire = cluster.ps or cluster.inter
            if wire is None:
                raise ValueError(f"network {cluster.name!r} has no link to a PS server (no `inter` or `ps` link), "
                                 f"which this runtime's PS pushes through even on one machine; accepted: a network "
                                 f"with one, or stack=study")
            self.up = Station(sim, bucket=kept_bucket(buckets, "up", wire))
            self.down = Station(sim, bucket=kept_bucket(buckets, "down", wire))
            self.server_in = [Station(sim, bucket=kept_bucket(buckets, ("in", s), wire)) for s in range(self.S)]
            self.server_out = [Station(sim, bucket=kept_bucket(buckets, ("out", s), wire)) for s in range(self.S)]
            threads = int(method_cfg.get("server_engine_threads", 8))
            self.threads = threads
            self.engine_map = [EngineMap(threads) for _ in range(self.S)]
            self.engines = [[Station(sim, ScheduledQueue(self.pushers) if server_schedule else None)
                             for _ in range(threads)]
                            for _ in range(self.S)]
            self.summing = (cluster.server_mem_Bps > 0 or server_schedule) and opts.server_contention
        # pushes a server link carries per partition (without contention: one machine's)
        self.fan_in = self.pushers if opts.server_contention else self.per_machine
        # a push when the machine's PS rounds have idled AFTER_COMPUTE_IDLE_S (its workers computed)
        # pays what make commbench found a round costs then, beyond one back to back
        # (Cluster.ps_after_compute_s): the machines alike here, each its own in PSMachines
        self.after_compute = AfterCompute(sim, cluster.ps_after_compute_s.get(workers, 0.0))

    def send(self, message: int, on_pushed, on_done) -> None:
        parts = self.parts[message]
        left = {"pushed": len(parts), "done": len(parts)}

        def tick(what, then):
            left[what] -= 1
            if left[what] == 0 and then is not None:
                then()

        for p in parts:
            self._part(p, lambda: tick("pushed", on_pushed), lambda: tick("done", on_done))

    def _stages_s(self, nbytes: float) -> tuple[float, float]:
        """A partition's reduce and broadcast inside a machine (per-gpu: no node stage). Where
        make commbench timed the node's whole path in bursts on this machine's cores
        (`Cluster.node_ps_s`: the control message and every process's CPU per message included)
        and it is the slower, the two stretch to it in proportion: the node's sustained
        throughput is the burst's."""
        if self.per_machine != 1:
            return 0.0, 0.0
        c = self.cluster
        reduce_s = c.node_stage_s("reduce", nbytes, self.g, self.algorithm)
        broadcast_s = c.node_stage_s("broadcast", nbytes, self.g, self.algorithm)
        whole = c.node_ps_s(nbytes, self.g, self.algorithm)
        if whole is not None and whole > reduce_s + broadcast_s > 0:
            k = whole / (reduce_s + broadcast_s)
            return reduce_s * k, broadcast_s * k
        return reduce_s, broadcast_s

    def _sum(self, part, nbytes: float, then) -> None:
        """The server sums every pusher's push of `part` on the key's engine thread, then `then`."""
        if not self.summing:
            return then()
        k = part.server
        thread = self.engines[k][self.engine_map[k].thread_of(part.key, nbytes)]
        sum_s = self.cluster.server_sum_s(nbytes, self.threads)
        left = [self.pushers]

        def one():
            left[0] -= 1
            if left[0] == 0:
                then()
        for _ in range(self.pushers):  # one engine message per push (BytePS: SUM_RECV)
            thread.submit((part.key, sum_s, 0.0, None, one))

    def _part(self, part, pushed, done) -> None:
        c, sim = self.cluster, self.sim
        nbytes = part.numel * self.esize
        reduce_s, broadcast_s = self._stages_s(nbytes)

        def broadcast(then):
            self.node.submit((broadcast_s, 0.0, None, then))

        if self.local_only:
            self.node.submit((reduce_s, 0.0, None, lambda: (pushed(), broadcast(done))))
            return
        landed = self.after_compute.ended(done)  # the round is out once its pull has landed

        inter: Link = c.ps or c.inter  # the PS wire where measured (commbench's ps mode)
        k = part.server

        def pull():
            def started(now, end):
                mine = self.per_machine * nbytes  # the machine's pulls (per-gpu: each of its workers')
                sim.at(now + inter.alpha_s, self.down.submit,
                       (self.down.timed(mine, mine * inter.beta_s_per_byte), end, None, lambda: broadcast(landed)))
            out = self.server_out[k]
            out.submit((out.timed(self.fan_in * nbytes, inter.time_s(self.fan_in * nbytes)), 0.0, started, None))

        def held():
            pushed()
            self._sum(part, nbytes, pull)

        def push_started(now, end):
            into = self.server_in[k]
            sim.at(now + inter.alpha_s, into.submit,
                   (into.timed(self.fan_in * nbytes, self.fan_in * nbytes * inter.beta_s_per_byte), end, None, held))

        def reduced():
            mine = self.per_machine * nbytes  # the machine's pushes (per-gpu: each of its workers')
            # a cold round starts late: its extra holds the push back (on a link it would hide
            # behind the server's, slower, cut through)
            sim.at(sim.now + self.after_compute.start(), self.up.submit,
                   (self.up.timed(mine, inter.time_s(mine)), 0.0, push_started, None))

        self.node.submit((reduce_s, 0.0, None, reduced))


def fifo_pulls(cluster: Cluster, workers: int) -> bool:
    """Whether a PS server's replies leave one after another: on the emulated cluster's links,
    whose tc tbf queues packets in one FIFO (launch.netns: TBF_QUEUE_BYTES deep), the sum's
    reply to each pusher enters that queue whole (the server answers its pushers in the order
    their pushes came, and a socket hands the kernel a whole partition at once), so the machines
    receive it one after the other, as many partitions' times apart as they are machines, and
    from then on work out of step. A real NIC's queues interleave flows (fq_codel, InfiniBand's
    queue pairs): every machine gets its reply at once, as `PSComm` has it."""
    m, _ = cluster.nodes(workers)
    wire = cluster.ps or cluster.inter
    return m > 1 and wire is not None and wire.burst_bytes > 0


class PSMachines(PSComm):
    """Per-machine PS as `PSComm`, each machine on its own (`fifo_pulls`): its node stage, its
    link directions with their token buckets, its pushes through the servers' downlinks one after
    another, and each server's replies through its uplink one machine after another, in the
    order the pushes came, or at the landing profile make commbench measured (`_landing`). A
    partition's round ends for a machine when its own reply lands."""

    def __init__(self, sim: Sim, cluster: Cluster, workers: int, message_numels: list[int], element_size: int,
                 method_cfg: dict, opts: Options, server_schedule: bool):
        super().__init__(sim, cluster, workers, message_numels, element_size, method_cfg, opts, server_schedule)
        self.wire: Link = cluster.ps or cluster.inter
        self.node = [Station(sim) for _ in range(self.m)]
        self.up = [Station(sim, bucket=Bucket(self.wire)) for _ in range(self.m)]
        self.down = [Station(sim, bucket=Bucket(self.wire)) for _ in range(self.m)]
        self.sent = [dict() for _ in range(self.m)]  # machine -> {key: rounds sent}
        self.rounds: dict = {}                       # (key, round) -> [(machine, its reply's callback)]
        self.after_compute = [AfterCompute(sim, cluster.ps_after_compute_s.get(workers, 0.0)) for _ in range(self.m)]

    def send(self, machine: int, message: int, on_done) -> None:
        parts = self.parts[message]
        left = [len(parts)]

        def one():
            left[0] -= 1
            if left[0] == 0:
                on_done()
        for part in parts:
            self._machine_part(machine, part, one)

    def _machine_part(self, k: int, part, done) -> None:
        sim, wire = self.sim, self.wire
        nbytes = part.numel * self.esize
        mine = self.per_machine * nbytes
        reduce_s, broadcast_s = self._stages_s(nbytes)
        r = self.sent[k].get(part.key, 0)
        self.sent[k][part.key] = r + 1
        s = part.server
        done = self.after_compute[k].ended(done)  # the round is out once its pull has landed

        def pull(machine, then):
            def started(now, end):
                d = self.down[machine]
                sim.at(now + wire.alpha_s, d.submit,
                       (d.timed(mine, mine * wire.beta_s_per_byte), end, None,
                        lambda: self.node[machine].submit((broadcast_s, 0.0, None, then))))
            out = self.server_out[s]
            out.submit((out.timed(mine, wire.time_s(mine)), 0.0, started, None))

        def replies():
            waiting = self.rounds.pop((part.key, r))
            gaps = self.cluster.landing_gaps(len(waiting), nbytes)
            if gaps is None:
                for machine, then in waiting:
                    pull(machine, then)
                return
            self._landing(s, mine, waiting, gaps, broadcast_s)

        def arrived():
            waiting = self.rounds.setdefault((part.key, r), [])
            waiting.append((k, done))
            if len(waiting) == self.m:
                self._sum(part, nbytes, replies)

        def push_started(now, end):
            into = self.server_in[s]
            sim.at(now + wire.alpha_s, into.submit,
                   (into.timed(mine, mine * wire.beta_s_per_byte), end, None, arrived))

        def reduced():
            u = self.up[k]
            sim.at(sim.now + self.after_compute[k].start(), u.submit,
                   (u.timed(mine, wire.time_s(mine)), 0.0, push_started, None))  # a cold round starts late

        self.node[k].submit((reduce_s, 0.0, None, reduced))

    def _landing(self, s: int, mine: float, waiting: list, gaps: list[float], broadcast_s: float) -> None:
        """A server's replies to `waiting` (machine, callback), in the order their pushes came, at
        the landing profile make commbench measured (`Cluster.landing_gaps`: the i-th fastest
        lands `gaps[i]` replies' times at the rate before the last): all of them through the
        server's uplink as one transfer, the last landing when it ends, none earlier than one
        after another would land it (the most spread a FIFO queue gives)."""
        sim, wire, w = self.sim, self.wire, len(waiting)
        total = w * mine
        unit = mine * wire.beta_s_per_byte

        def started(now, end):
            saved = max(0.0, wire.time_s(total) - (end - now))  # what the bucket's tokens gave
            for j, (machine, then) in enumerate(waiting):
                fifo = now + max(0.0, wire.time_s((j + 1) * mine) - saved)
                land = min(end, max(fifo, end - gaps[j] * unit))
                d = self.down[machine]
                sim.at(now + wire.alpha_s, d.submit,
                       (d.timed(mine, mine * wire.beta_s_per_byte), land, None,
                        lambda machine=machine, then=then: self.node[machine].submit((broadcast_s, 0.0, None, then))))
        out = self.server_out[s]
        out.submit((out.timed(total, wire.time_s(total)), 0.0, started, None))


def ps_machines_period_s(p: "Plan", profile: Profile, cluster: Cluster, workers: int, cfg: dict, opts: Options,
                         iterations: int = MACHINE_ITERATIONS) -> float:
    """The steady-state iteration time of a PS method without ByteScheduler's queue where the
    servers' replies leave one after another (`fifo_pulls`): every machine's iterations on one
    clock (`PSMachines`), all starting at once; each machine's next forward starts when its
    backward and all its messages are done, its unpack and updates after. The period: the mean
    over machines of their last `iterations // 2` iterations."""
    sim = Sim()
    m, _ = cluster.nodes(workers)
    numels = [sum(profile.numels[i] for i in msg) for msg in p.messages]
    comm = PSMachines(sim, cluster, workers, numels, profile.element_size, cfg, opts, p.server_schedule)
    tensor_bytes = profile.tensor_bytes
    unpack = unpack_s(p, profile)
    update = sum(profile.update_s)
    starts: list[list[float]] = [[] for _ in range(m)]

    def iteration(k: int) -> None:
        starts[k].append(sim.now)
        if len(starts[k]) > iterations:
            return
        b0 = sim.now + profile.forward_s
        b_end = b0 + profile.backward_s
        left = [len(p.messages)]

        def finished():
            left[0] -= 1
            if left[0] == 0:
                sim.at(max(b_end, sim.now) + unpack + update, iteration, k)
        for g, members in enumerate(p.messages):
            launch = b0 + max(profile.ready_s[i] for i in members) if p.eager else b_end
            pack = copy_s(sum(tensor_bytes[i] for i in members), len(members), profile)
            sim.at(launch + pack, comm.send, k, g, finished)
    for k in range(m):
        sim.at(0.0, iteration, k)
    sim.run()
    last = iterations // 2
    return statistics.mean((st[-1] - st[-1 - last]) / last for st in starts)


# -- methods --------------------------------------------------------------------------------
@dataclass
class Plan:
    """What a method sends: messages (lists of forward-order parameter indices), when each
    leaves, and how the update follows."""

    messages: list[list[int]]
    eager: bool = True           # from the hook of the message's last gradient; else after backward
    bytescheduler: bool = False  # partitions through a CreditQueue, per-parameter updates
    ps: bool = False
    server_schedule: bool = False
    buffer_sync: bool = False    # DDP: a broadcast of the module's buffers before every forward


def grouped_messages(profile: Profile, threshold: int, by_bytes: bool = False) -> list[list[int]]:
    """`fuse_by_threshold` over the runtime's gradient-ready order (last registered first)."""
    order = list(range(len(profile.names)))[::-1]
    sizes = [profile.numels[i] * (profile.element_size if by_bytes else 1) for i in order]
    return [[order[j] for j in g] for g in fuse_by_threshold(sizes, threshold)]


def mgwfbp_alpha_beta(cluster: Cluster, workers: int, cfg: dict, opts: Options) -> tuple[float, float]:
    """The alpha, beta MG-WFBP decides with: a run's own (`Options.mgwfbp_alpha_beta`, to
    predict that run); else set in the config; else the study's table for this worker count
    (stack study); else a relative least-squares fit of this model's all-reduce times over the
    runtime's microbenchmark (`microbenchmark_s`), as ddlbench fits at start-up."""
    if opts.mgwfbp_alpha_beta is not None:
        return opts.mgwfbp_alpha_beta
    if cfg.get("alpha_s") is not None and cfg.get("beta_s_per_byte") is not None:
        return float(cfg["alpha_s"]), float(cfg["beta_s_per_byte"])  # the method config's
    if opts.stack == "study" and workers in cluster.mgwfbp_table:
        return cluster.mgwfbp_table[workers]  # the study's table
    sizes = bench_sizes(int(cfg.get("bench_min_bytes", 32768)), int(cfg.get("bench_max_bytes", 2064384)))
    return fit_alpha_beta(sizes, microbenchmark_s(cluster, workers, sizes, int(cfg.get("bench_reps", 5)),
                                                  opts.algorithm, gloo=opts.backend == "gloo"))


# a timed call takes at least this long (a bucket with tokens and a link of no start-up would
# make it 0, which the relative fit cannot take)
MIN_CALL_S = 1e-9


def microbenchmark_s(cluster: Cluster, workers: int, sizes: list[int], reps: int, algorithm: str,
                     gloo: bool = False) -> list[float]:
    """The runtime's MG-WFBP microbenchmark (`methods.mgwfbp.MGWFBP._microbenchmark`) as this
    model times it: per size, in increasing order, 1 + `reps` blocking all-reduces one after
    another, each after a barrier, and the median of the timed `reps`. The barrier: Gloo's
    dissemination barrier (gloo/barrier.cc: ceil(log2 W) rounds of empty messages) where `gloo`,
    else an all-reduce of one element (NCCL's). Through a token bucket (the emulated cluster's
    links) the order matters: the bucket starts full (the backward profile before it sends
    nothing) and refills only while the barriers run, so the first sizes pass partly on its
    tokens and the rest at the rate; the runtime's medians there are not a line with a positive
    start-up time either (32 KiB across two hosts at 100 Mbit/s: 0.4-0.7 ms, where the rate
    alone takes 2.7 ms), and it fitted a start-up time of 0 at 2 workers. This model's calls keep
    their whole start-up (the link's alpha: commbench's mean small all-reduce, slow tail
    included, where the runtime fits medians), so its fit can still read one where the runtime
    read 0 (`benchmarks/predict_validation.py` prints, per run, whether the groups agree)."""
    bucket = ring_bucket(cluster, workers, algorithm)
    barrier_s = cluster.broadcast_s(0, workers, binomial=True) if gloo else cluster.allreduce_s(4, workers, algorithm)
    now, out = 0.0, []
    for size in sizes:
        base_s, timed = cluster.allreduce_s(size, workers, algorithm), []
        for rep in range(1 + reps):
            now += barrier_s
            dur = bucket.duration_s(now, ring_link_bytes(size, workers), base_s) if bucket else base_s
            now += dur
            if rep:
                timed.append(max(MIN_CALL_S, dur))
        out.append(statistics.median(timed))
    return out


def runs_bytescheduler_queue(cfg: dict) -> bool:
    """Whether the method schedules through ByteScheduler's queue: the study's ByteScheduler-PS
    (`scheduler: byteps`) is BytePS's server schedule behind WFBP-PS's pushes instead."""
    return cfg["schedule"] == "bytescheduler" and cfg.get("scheduler") != "byteps"


def plan_for(method: str, profile: Profile, cluster: Cluster, workers: int, opts: Options) -> Plan:
    cfg = method_config(method, opts.bytescheduler_ps)
    if method == "ddp":
        first = grouped_messages(profile, DDP_FIRST_BUCKET_BYTES, by_bytes=True)[0]
        taken = set(first)
        order = [i for i in reversed(range(len(profile.names))) if i not in taken]
        cap = int(cfg["bucket_cap_mb"]) << 20
        rest = fuse_by_threshold([profile.numels[i] * profile.element_size for i in order], cap)
        return Plan([first] + [[order[j] for j in g] for g in rest], buffer_sync=True)
    if cfg["schedule"] == "bsp":
        return Plan(grouped_messages(profile, int(cfg["fusion_elems"])), eager=False, ps=cfg["architecture"] == "ps")
    if cfg["schedule"] == "wfbp":
        return Plan(grouped_messages(profile, 0), ps=cfg["architecture"] == "ps")
    if cfg["schedule"] == "mgwfbp":
        if opts.mgwfbp_group_bytes is not None:
            return Plan(run_groups(profile, opts.mgwfbp_group_bytes))
        a, b = mgwfbp_alpha_beta(cluster, workers, cfg, opts)
        order, tensor_bytes = profile.ready_order(), profile.tensor_bytes
        groups = merge_groups(profile.tb_s(), [tensor_bytes[i] for i in order], a, b,
                              [profile.numels[i] for i in order], int(cfg.get("min_group_numel", 0)))
        return Plan([[order[j] for j in g] for g in groups])
    if cfg["schedule"] == "bytescheduler":
        if not runs_bytescheduler_queue(cfg):
            return Plan(grouped_messages(profile, 0), ps=True, server_schedule=True)
        return Plan([], bytescheduler=True, ps=cfg["architecture"] == "ps")
    raise ValueError(f"method {method!r} has schedule {cfg['schedule']!r}, unknown to the predictor")


def run_groups(profile: Profile, group_bytes) -> list[list[int]]:
    """MG-WFBP's groups as a run recorded them (bytes per group, in send order) as the profile's
    parameter indices: consecutive runs of the gradient-ready order, each adding up to its
    group's bytes. The run merged with its own start-up timings of backward, which a profile
    measured apart from it can tip the other way at a group's edge; to predict that run, its
    groups are a fact of its configuration, as its alpha and beta are. Raises where the bytes
    do not partition this profile's gradients (another model or batch, or a record cut short)."""
    order, tensor_bytes = profile.ready_order(), profile.tensor_bytes
    groups, j = [], 0
    for want in group_bytes:
        group, got = [], 0
        while j < len(order) and got < want:
            group.append(order[j])
            got += tensor_bytes[order[j]]
            j += 1
        if got != want or not group:
            break
        groups.append(group)
    if len(groups) == len(group_bytes) and j == len(order):
        return groups
    raise ValueError(f"MG-WFBP groups {list(group_bytes)!r} (bytes, in send order) do not partition {profile.model}'s "
                     f"{len(order)} gradients ({sum(tensor_bytes)} B) in their ready order; accepted: consecutive "
                     f"groups that add up to them")


@dataclass
class Result:
    method: str
    workers: int
    period_s: float
    compute_s: float
    busy_s: float = 0.0  # the cores' time on the iteration's messages (`messages_cpu_s`)

    def samples_per_sec(self, local_batch: int) -> float:
        return self.workers * local_batch / self.period_s


def simulate(method: str, profile: Profile, cluster: Cluster, workers: int, opts: Options | None = None,
             plan: Plan | None = None) -> Result:
    """The steady-state iteration time of `method` on `workers` workers of `cluster` (`plan`:
    the method's messages, decided beforehand; by default `plan_for` decides). Where the profile
    says how much slower compute comes back after its workers idled (`Profile.after_idle`, the
    run's compute probe), an iteration of several workers also pays that for the time it
    spends beyond its compute (what its workers wait for communication), once: every one of
    them starts the next iteration's compute after that wait."""
    r = _simulate(method, profile, cluster, workers, opts, plan)
    if workers > 1 and profile.after_idle:
        r = replace(r, period_s=r.period_s + profile.idle_extra_s(r.period_s - r.compute_s - r.busy_s))
    return r


def messages_cpu_s(p: Plan, profile: Profile, cluster: Cluster, workers: int, opts: Options,
                   cfg: dict | None = None) -> float:
    """How long the cores the workers share (`Cluster.host_cpu`) are busy with one iteration's
    messages, beyond the compute: every message's CPU as make commbench measured it on these
    cores (all-reduce: `HostCpu.allreduce_s` per worker, and what the runtime's launch from a
    gradient hook adds, `Options.launch_s`; PS: as `host_cpu_s` counts it), at the workers'
    share of the cores, W / cores, whenever the message leaves (BSP's too). Waiting on those
    messages is no idle for `simulate`'s after-idle charge: the cores run Gloo's threads, the
    servers and the kernel's networking meanwhile, and only a core with nothing to run sleeps
    and comes back slower (the compute probe's after-idle steps slept). Local 2-worker WFBP-A2A
    of tiny-resnet on 2 cores: 26 ms an iteration, 14 of it beyond the compute and every bit
    of that the messages' CPU (the cores 1.8-1.9 busy), where the idle charge had added 6 ms.
    0 without `host_cpu`, or where commbench measured no CPU for the method's messages. `cfg`,
    the method's config: for PS and ByteScheduler (their partitions and units)."""
    hc = cluster.host_cpu
    if hc is None or workers < 2:
        return 0.0
    if p.ps:  # every message, as host_cpu_s counts those that leave during backward
        return host_cpu_s(replace(p, eager=True), profile, cluster, workers, cfg, opts)
    if hc.allreduce_s(0, workers) is None:
        return 0.0
    esize = profile.element_size
    numels = bytescheduler_units(profile, cfg)[0] if p.bytescheduler else message_numels(profile, p.messages)
    ordered = leader_orders(p, opts)
    # DDP's reducer launches its buckets from C++, ByteScheduler from its own thread: not the hooks
    launch_s = opts.launch_s if p.eager and not p.buffer_sync and not p.bytescheduler else 0.0
    return workers * sum(hc.allreduce_s(n * esize, workers, ordered) + launch_s for n in numels) / hc.cores


def _simulate(method: str, profile: Profile, cluster: Cluster, workers: int, opts: Options | None = None,
              plan: Plan | None = None) -> Result:
    opts = opts or Options()
    cfg = method_config(method, opts.bytescheduler_ps)
    if workers == 1 and not one_worker_works(cfg, opts):
        return Result(method, 1, profile.compute_s, profile.compute_s)
    cluster.nodes(workers)  # validates the worker count against the network
    p = plan or plan_for(method, profile, cluster, workers, opts)
    compute_s = profile.compute_s
    busy_s = messages_cpu_s(p, profile, cluster, workers, opts, cfg)
    wait = profile.sync_factor(workers) if opts.stragglers else 1.0
    if wait > 1:
        profile = profile.slower(wait)  # every step waits for the slowest worker's compute
    cpu_s = host_cpu_s(p, profile, cluster, workers, cfg, opts)
    if cpu_s and not p.ps and starves(cluster, workers, opts.algorithm, p.bytescheduler):
        cpu_s = 0.0  # the workers hold every core: no all-reduce runs during backward
    elif cpu_s and not p.ps and not p.bytescheduler:  # only what runs during backward takes its cores
        cpu_s = allreduce_cpu_in_backward_s(p, profile, cluster, workers, cfg, opts)
    if p.bytescheduler:
        cpu_s += opts.bytescheduler_cpu_s  # measured beside the other workers: one worker's own share
    if cpu_s:
        profile = stretched_backward(profile, cpu_s)
    if p.ps and not p.bytescheduler and opts.server_contention and fifo_pulls(cluster, workers):
        return Result(method, workers, ps_machines_period_s(p, profile, cluster, workers, cfg, opts), compute_s, busy_s)
    n = len(profile.names)
    tensor_bytes = profile.tensor_bytes
    units = [0] * n  # ByteScheduler's units per parameter
    if p.bytescheduler:
        for i in bytescheduler_units(profile, cfg)[1]:
            units[i] += 1
    order_by_need = sorted(range(n), key=profile.need_s.__getitem__)
    sync_s = buffer_sync_s(profile, cluster, workers, opts) if p.buffer_sync else 0.0
    starts = []
    f0 = 0.0
    launches: list[tuple[float, int]] = []  # ByteScheduler: (launch, parameter) of the last backward's updates
    # Without ByteScheduler every iteration ends in a barrier (all updated, then the next forward),
    # so one iteration is the steady state, but for the links' token buckets (`kept_bucket`: each
    # iteration starts with the tokens the one before left); ByteScheduler's overlap needs a few
    # to settle.
    buckets: dict = {}
    for k in range(ITERATIONS):
        if k and not (p.bytescheduler or any(b.depth for b in buckets.values())):
            break
        starts.append(f0)
        if p.bytescheduler:  # each layer waits for its own parameters' updates
            b0 = forward_with_updates(profile, order_by_need, f0 + sync_s, launches)
        else:  # everything was updated before this forward
            b0 = f0 + sync_s + profile.forward_s
        b_end = b0 + profile.backward_s
        done = _communicate(p, profile, cluster, workers, cfg, opts, b0, b_end, buckets=buckets)
        if p.bytescheduler:
            # each parameter's update is launched as its last partition lands, in landing order,
            # after the machinery of its units (one thread); it runs on the device (forward_with_updates)
            cursor, launches = 0.0, []
            for i in sorted(range(n), key=done.__getitem__):
                cursor = max(cursor, done[i]) + opts.bytescheduler_unit_s * units[i]
                launches.append((cursor, i))
            f0 = b_end
        else:
            f0 = max(b_end, max(done)) + unpack_s(p, profile) + sum(profile.update_s)
    starts.append(f0)
    floor_s = cpu_floor_s(p, profile, cluster, workers, opts, busy_s)
    return Result(method, workers, max(starts[-1] - starts[-2], floor_s), compute_s, busy_s)


def message_numels(profile: Profile, messages) -> list[int]:
    """Each message's elements: the sum over the parameters it carries."""
    return [sum(profile.numels[i] for i in m) for m in messages]


def cpu_floor_s(p: Plan, profile: Profile, cluster: Cluster, workers: int, opts: Options,
                messages_s: float | None = None) -> float:
    """Where eager all-reduces starve (`starves`: the workers hold every core of the machine
    they share), an iteration takes at least its compute (measured beside the others, so
    already their share of the cores) plus every message's CPU at that share, W / cores: the
    machine's busy CPU per worker that make commbench's bursts measured (`HostCpu.allreduce_s`:
    Gloo's threads, the kernel's networking, commbench's own launch) and what the runtime's
    launch adds to that (`Options.launch_s`): `messages_cpu_s`, given as `messages_s` where the
    caller has it; and, once, what make commbench found an all-reduce costs after compute beyond
    back to back (`allreduce_after_compute_s`), which the timeline charges its first message too:
    commbench's rounds that price the messages' CPU run back to back, and an iteration's messages
    do not (five local benches' 2-worker runs of tiny-resnet, predicted against measured:
    MG-WFBP's +10 to +18% without it, +7 to +16% with; WFBP-A2A's +1 to +6%, -1 to +5%). The lanes (`Lanes.starve`) time those all-reduces
    after backward; this bounds the whole. Local 2-worker WFBP-A2A runs of tiny-resnet on 2
    cores: an iteration was the rank's whole CPU to 1-2 ms (its record's per-thread CPU: the main
    thread 2.5-4.75 ms more than BSP-A2A's, Gloo's loop threads 6-8 ms), where the lanes alone
    had 7 ms after backward. DDP's buckets count commbench's part only: its reducer launches them
    from C++, not through the runtime's hooks. 0 elsewhere (PS, BSP, ByteScheduler: their CPU is
    charged as `host_cpu_s` says), and where commbench measured no all-reduce CPU."""
    hc = cluster.host_cpu
    if not p.eager or p.ps or p.bytescheduler or workers < 2 or hc is None or \
            not starves(cluster, workers, opts.algorithm) or hc.allreduce_s(0, workers) is None:
        return 0.0
    if messages_s is None:  # `messages_cpu_s`, where the caller has not already
        messages_s = messages_cpu_s(p, profile, cluster, workers, opts)
    # an iteration's messages follow its compute, and the first of them comes cold, as the
    # timeline charges it (`AfterCompute`): its cost after compute beyond back to back, which
    # commbench timed with its W ranks on these cores (their wall: the cores' share is in it)
    return profile.compute_s + messages_s + allreduce_after_compute_s(cluster, workers, opts.algorithm)


def forward_with_updates(profile: Profile, order_by_need: list[int], f0: float,
                         launches: list[tuple[float, int]], updated: list[float] | None = None) -> float:
    """ByteScheduler's next forward on the device it shares with the updates: when the forward
    ends. One stream runs everything in the order it was issued (the study's updates and compute
    share the default CUDA stream; this runtime's, the CPU's cores). The device is free at `f0`
    (the backward before has ended: updates launched during it queue behind its work). The
    forward runs in pieces, one from each parameter's first use to the next (`need_s`); a piece
    is issued once its parameter's update was launched (ByteScheduler's lock per parameter) and
    the piece before it was issued; an update (`launches`: (launch time, parameter)) is issued
    at its launch. Every update runs before the forward ends, since the last piece waits for
    the last launch. Sets `updated[i]`, where given, when parameter i's update ends."""
    launched = {i: t for t, i in launches}
    needs = [profile.need_s[i] for i in order_by_need] + [profile.forward_s]
    issued = f0
    work = [(f0, 1, needs[0], -1)]  # (issued at, updates first on a tie, duration, parameter or -1)
    for k, i in enumerate(order_by_need):
        issued = max(issued, launched.get(i, f0))
        work.append((issued, 1, needs[k + 1] - needs[k], -1))
    work += [(t, 0, profile.update_s[i], i) for t, i in launches]
    t = f0
    for at, _, duration, i in sorted(work, key=lambda w: (w[0], w[1])):
        t = max(t, at) + duration
        if i >= 0 and updated is not None:
            updated[i] = t
    return t


def buffer_sync_s(profile: Profile, cluster: Cluster, workers: int, opts: Options) -> float:
    """DDP's broadcast of the module's buffers from rank 0 before every forward (on by default,
    `profile.buffer_buckets`), waited for before the forward starts. c10d's broadcast_coalesced
    keeps two buckets' broadcasts in flight: Gloo's process group runs them on its two worker
    threads at once (Gloo's binomial tree: a pair pays its rounds' start-ups once and both
    buckets' bytes), NCCL's stream one after another (its chain). The buffers are small, so the
    emulated links' token buckets are left out here. With Gloo, where make commbench timed an
    all-reduce right after compute at this worker count (`Cluster.after_compute_s`), the first
    pair pays that too: it starts right after the update's compute, the stream idle since the
    last bucket landed (a traced 2-worker local DDP run's forward, the broadcast in it, took
    0.8 ms longer than BSP-A2A's, where the broadcast's fit gives 0.06 ms)."""
    sizes = profile.buffer_bytes
    if not sizes:
        return 0.0
    if opts.backend == "gloo":
        return sum(cluster.broadcast_s(sum(sizes[i:i + 2]), workers, binomial=True) for i in range(0, len(sizes), 2)) \
            + cluster.after_compute_s.get(workers, 0.0)
    return sum(cluster.broadcast_s(n, workers, binomial=False) for n in sizes)


def one_worker_works(cfg: dict, opts: Options) -> bool:
    """Whether one worker of this method does more than compute: this runtime pushes through
    its servers even then, and runs ByteScheduler (its machinery, and its updates as gradients
    land); the study's one-GPU runs did neither (BytePS not distributed, ByteScheduler off at
    size 1)."""
    from ddlbench.config import compute_only_at_one_worker

    return opts.stack == "ddlbench" and not compute_only_at_one_worker(cfg["name"])


def calibrate_unit_s(method: str, profile: Profile, cluster: Cluster, one_worker_period_s: float,
                     opts: Options) -> float:
    """ByteScheduler's machinery per unit in this runtime (`Options.bytescheduler_unit_s`), from a
    one-worker run of the method: the cost at which the model's one-worker iteration equals the
    measured one (bisection: the iteration grows with it), in the ddlbench stack (the runtime
    that ran it). 0 where the run was no slower than the model without it. Its source is a
    one-worker run of the method, never a multi-worker result."""
    opts = replace(opts, stack="ddlbench", bytescheduler_unit_s=0.0)  # the runtime whose one worker ran
    if not runs_bytescheduler_queue(method_config(method, opts.bytescheduler_ps)):
        raise ValueError(f"method {method!r} (bytescheduler_ps={opts.bytescheduler_ps!r}) has no ByteScheduler "
                         f"queue to calibrate; accepted: bytescheduler-a2a, or bytescheduler-ps with its worker queue")
    plan = plan_for(method, profile, cluster, 1, opts)

    def period(unit_s: float) -> float:
        return simulate(method, profile, cluster, 1, replace(opts, bytescheduler_unit_s=unit_s), plan).period_s
    lo, hi = 0.0, one_worker_period_s
    if period(0.0) >= one_worker_period_s:
        return 0.0
    for _ in range(50):  # to a 2^-50 share of the period; the period grows with the unit, >= it
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if period(mid) < one_worker_period_s else (lo, mid)
    return (lo + hi) / 2


def bytescheduler_units(profile: Profile, cfg: dict) -> tuple[list[int], list[int]]:
    """ByteScheduler's units: each parameter cut into `partition_params` pieces, in forward
    order, and the parameter each unit belongs to."""
    pp = int(cfg["partition_params"])
    parts, param_of = [], []
    for i, numel in enumerate(profile.numels):
        for start in range(0, numel, pp):
            parts.append(min(numel, start + pp) - start)
            param_of.append(i)
    return parts, param_of


def leader_orders(p: Plan, opts: Options) -> bool:
    """This runtime's ByteScheduler-A2A: its leader tells the other ranks each choice, a message of
    its own, before they launch it (`Cluster.order_s`, and the ordered rounds' CPU in
    `host_cpu_s`); the study's Horovod has no leader, and PS pushes need no common order."""
    return p.bytescheduler and not p.ps and opts.stack == "ddlbench"


def host_cpu_s(p: Plan, profile: Profile, cluster: Cluster, workers: int, cfg: dict, opts: Options) -> float:
    """The CPU of one iteration's messages on a machine whose cores every worker and server
    share (`Cluster.host_cpu`), as the time the workers' compute waits for it. PS: every
    pusher's messages (a machine's leader, or every worker per-gpu; each partition one message,
    `ps.plan`) over the cores; where commbench's node bursts measured a per-machine node of the
    run's g workers on these cores, every machine's messages at that node's CPU per message (its
    reduce and broadcast over the g workers included). All-reduce: every worker's all-reduces
    (`HostCpu.allreduce_s`, at the run's worker count; this runtime's ByteScheduler-A2A's at the
    cost of an all-reduce launched in its leader's order) over the cores, but those that leave with
    backward's last gradient, when no compute is left to wait (the PS messages' rule still
    counts them): ByteScheduler's charge, and the bound that `allreduce_cpu_in_backward_s`
    refines for the other all-reduce methods. Only for messages
    that leave during backward (WFBP, MG-WFBP, DDP's buckets, ByteScheduler): BSP's leave after
    it, when no compute needs the cores, and their cost is the link's, timed on the same cores.
    0 elsewhere."""
    hc = cluster.host_cpu
    if hc is None or not (p.eager or p.bytescheduler):
        return 0.0
    numels = bytescheduler_units(profile, cfg)[0] if p.bytescheduler else message_numels(profile, p.messages)
    esize = profile.element_size
    if not p.ps:
        if workers == 1 or hc.allreduce_s(0, workers) is None:
            return 0.0
        # what leaves with backward's last gradient finds no compute left to take the cores from
        ready = [profile.ready_s[i] for i in bytescheduler_units(profile, cfg)[1]] if p.bytescheduler else \
            [max(profile.ready_s[i] for i in m) for m in p.messages]
        last, ordered = max(ready), leader_orders(p, opts)
        return workers * sum(hc.allreduce_s(n * esize, workers, ordered)
                             for n, t in zip(numels, ready) if t < last) / hc.cores
    machines, g = cluster.nodes(workers)
    parts = plan(numels, esize, int(cfg["partition_bytes"]), opts.servers or machines)
    if g > 1 and not per_gpu(cfg, opts) and g in hc.node_ps:  # the node's whole path per message, measured
        return machines * sum(hc.node_message_s(part.numel * esize, g) for ps in parts for part in ps) / hc.cores
    per_pusher = sum(hc.message_s(part.numel * esize) for ps in parts for part in ps)
    return pushers(cluster, workers, cfg, opts) * per_pusher / hc.cores


CPU_FIXED_POINT_STEPS = 30   # `allreduce_cpu_in_backward_s`' iterations at most
CPU_FIXED_POINT_TOL_S = 1e-7


def allreduce_cpu_in_backward_s(p: Plan, profile: Profile, cluster: Cluster, workers: int, cfg: dict,
                                 opts: Options) -> float:
    """`host_cpu_s` for all-reduces that leave during backward (WFBP, MG-WFBP, DDP's buckets),
    counting each one's CPU (`HostCpu.allreduce_s`, spread evenly over the time it runs, from
    its start on its stream or lane to its end, not from its launch) only for the share that
    runs before backward ends: what runs after it finds no compute to take the cores from.
    Backward, stretched by the charge, overlaps more of them, so the charge is the fixed point
    of charge -> that share's CPU, reached from 0 (the least one; each step adds less than the
    last)."""
    hc = cluster.host_cpu
    sync_s = buffer_sync_s(profile, cluster, workers, opts) if p.buffer_sync else 0.0
    charge = 0.0
    for _ in range(CPU_FIXED_POINT_STEPS):
        stretched = stretched_backward(profile, charge) if charge else profile
        b0 = sync_s + stretched.forward_s
        b_end = b0 + stretched.backward_s
        spans: list = []
        _communicate(p, stretched, cluster, workers, cfg, opts, b0, b_end, spans)
        cpu = 0.0
        for start, end, nbytes in spans:
            share = (max(0.0, min(end, b_end) - max(start, b0)) / (end - start) if end > start
                     else float(start < b_end))
            cpu += hc.allreduce_s(nbytes, workers) * share
        new = workers * cpu / hc.cores
        if abs(new - charge) <= CPU_FIXED_POINT_TOL_S:
            return new
        charge = new
    return charge


def stretched_backward(profile: Profile, extra_s: float) -> Profile:
    """`profile` with backward `extra_s` longer, every gradient appearing proportionally later."""
    k = (profile.backward_s + extra_s) / profile.backward_s if profile.backward_s > 0 else 1.0
    return replace(profile, backward_s=profile.backward_s + extra_s, ready_s=[t * k for t in profile.ready_s])


def _communicate(p: Plan, profile: Profile, cluster: Cluster, workers: int, cfg: dict, opts: Options,
                 b0: float, b_end: float, spans: list | None = None, buckets: dict | None = None) -> list[float]:
    """One iteration's communication from backward start b0: when each parameter's averaged
    gradient is in place (absolute times). `spans`, where given, gets each all-reduce's
    (start, end, bytes): from when it starts running, not from its launch. `buckets`: the links'
    token buckets as the iteration before left them (`kept_bucket`), where given."""
    sim = Sim()
    n = len(profile.names)
    done = [b_end] * n
    ready = [b0 + t for t in profile.ready_s]
    esize = profile.element_size

    if p.bytescheduler and workers == 1 and not p.ps:
        return ready  # one worker alone: each gradient is its own average as it appears
    if p.bytescheduler:
        parts, param_of = bytescheduler_units(profile, cfg)
        queue = CreditQueue(int(cfg["credit_params"]), parts)
        left = [0] * n
        for i in param_of:
            left[i] += 1
        if p.ps:
            comm = PSComm(sim, cluster, workers, parts, esize, cfg, opts, server_schedule=False, buckets=buckets)
        else:
            comm = allreduce_comm(sim, cluster, workers, opts, horovod_defaults=True, buckets=buckets)
            if starves(cluster, workers, opts.algorithm, queue=True):
                # its all-reduces overlap the next forward too, whose pieces hold the cores as
                # backward does: as if the forward computed first, then the messages ran
                comm.starve(b_end + profile.forward_s)

        def landed(pid):
            i = param_of[pid]
            left[i] -= 1
            if left[i] == 0:
                done[i] = sim.now

        def release(pid):
            queue.release(pid)
            dispatch()

        # this runtime's A2A leader tells the others its choices before it launches them, one
        # message at a time (`Cluster.order_s`: commbench's ordered round); the study's Horovod
        # has no leader
        message_s = cluster.order_s.get(workers, 0.0) if leader_orders(p, opts) else 0.0
        telling = [False]

        def launch(pid):
            if p.ps:
                comm.send(pid, lambda pid=pid: release(pid), lambda pid=pid: landed(pid))
            else:
                comm.send(parts[pid] * esize, 0.0, lambda pid=pid: (release(pid), landed(pid)))

        def told(pids):
            telling[0] = False
            for pid in pids:
                launch(pid)
            dispatch()

        def dispatch():
            while not telling[0] and (pid := queue.pop()) is not None:
                if message_s:  # every partition that can go now, in one message; the credit is
                    chosen = [pid]  # taken as it chooses, the launches wait for the telling
                    while len(chosen) < MAX_CHOICES and (pid := queue.pop()) is not None:
                        chosen.append(pid)
                    telling[0] = True
                    sim.at(sim.now + message_s, told, chosen)
                else:
                    launch(pid)

        first_pid = 0
        for i in range(n):
            pids = list(range(first_pid, first_pid + left[i]))
            first_pid += left[i]

            def grad_ready(pids=pids):
                for pid in pids:
                    queue.push(pid)
                dispatch()
            sim.at(ready[i], grad_ready)
        sim.run()
        return done

    messages = p.messages
    if p.ps:
        comm = PSComm(sim, cluster, workers, message_numels(profile, messages), esize, cfg, opts,
                      p.server_schedule, buckets)
    else:
        comm = allreduce_comm(sim, cluster, workers, opts, buckets=buckets)
        if starves(cluster, workers, opts.algorithm):
            comm.starve(b_end)
    for g, members in enumerate(messages):
        launch = max(ready[i] for i in members) if p.eager else b_end
        nbytes = sum(profile.numels[i] for i in members) * esize
        pack = copy_s(nbytes, len(members), profile)

        def finished(members=members):
            for i in members:
                done[i] = sim.now
        if p.ps:
            sim.at(launch + pack, comm.send, g, None, finished)
        elif spans is None:
            sim.at(launch, comm.send, nbytes, pack, finished)
        else:
            span = [0.0, 0.0, nbytes]
            spans.append(span)

            def started(now, span=span):
                span[0] = now

            def ended(members=members, span=span):
                span[1] = sim.now
                finished(members)
            sim.at(launch, comm.send, nbytes, pack, ended, started)
    sim.run()
    return done


# -- what dominates --------------------------------------------------------------------------
def explain(method: str, profile: Profile, cluster: Cluster, workers: int, opts: Options | None = None) -> dict:
    """Where the predicted iteration goes: compute, and the exposed communication attributed by
    re-simulating without each cost in turn: latency (every alpha 0), bandwidth (every beta 0),
    server (servers as fast as one machine's link and summing free), cpu (messages free of the
    cores that workers and servers share, `Cluster.host_cpu`: no CPU charged to compute, no
    all-reduce waiting out compute, `starves`), scheduler (ByteScheduler's
    own machinery free, `Options.bytescheduler_unit_s` and `bytescheduler_cpu_s`), stragglers (no worker waits for a
    slower one, `Options.stragglers`). Each share is what the
    iteration would lose without that cost alone; shares overlap and need not add up."""
    opts = opts or Options()
    plan = plan_for(method, profile, cluster, workers, opts)  # the same decisions in every what-if
    base = simulate(method, profile, cluster, workers, opts, plan).period_s

    def link(l, alpha=True, beta=True):
        return None if l is None else replace(l, alpha_s=l.alpha_s if alpha else 0.0,
                                              beta_s_per_byte=l.beta_s_per_byte if beta else 0.0)

    def without(**terms) -> float:
        what_if = replace(cluster, **{k: link(getattr(cluster, k), **terms) for k in ("intra", "inter", "ps")},
                          measured={c: {w: link(l, **terms) for w, l in by_ranks.items()}
                                    for c, by_ranks in cluster.measured.items()})
        return max(0.0, base - simulate(method, profile, what_if, workers, opts, plan).period_s)

    shares = {"compute": profile.compute_s,
              "latency": without(alpha=False),
              "bandwidth": without(beta=False),
              "server": max(0.0, base - simulate(method, profile, cluster, workers,
                                                 replace(opts, server_contention=False), plan).period_s),
              "cpu": max(0.0, base - simulate(method, profile, replace(cluster, host_cpu=None), workers, opts,
                                              plan).period_s),
              "scheduler": max(0.0, base - simulate(method, profile, cluster, workers,
                                                    replace(opts, bytescheduler_unit_s=0.0, bytescheduler_cpu_s=0.0),
                                                    plan).period_s)
              if (opts.bytescheduler_unit_s or opts.bytescheduler_cpu_s) and plan.bytescheduler else 0.0,
              "stragglers": max(0.0, base - simulate(method, profile, cluster, workers,
                                                     replace(opts, stragglers=False), plan).period_s)
              if opts.stragglers and profile.sync_factor(workers) > 1 else 0.0}
    exposed = max(0.0, base - profile.compute_s)
    comm = {k: v for k, v in shares.items() if k != "compute"}
    dominant = "compute" if profile.compute_s >= exposed or not any(comm.values()) else max(comm, key=comm.get)
    return {"period_s": base, "exposed_comm_s": exposed, "shares_s": shares, "dominant": dominant}


def mape(pairs) -> float:
    """Median absolute percentage error of (predicted, measured) pairs."""
    errs = [abs(p - m) / m for p, m in pairs]
    return statistics.median(errs) if errs else math.nan
