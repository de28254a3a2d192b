"""The seeds' two experiments, beside the size sweep.

groups (seed 002): ranks (0,1), (2,3), ... each get a process group of their own and all pairs
all-reduce concurrently; the job runs at 2, 4, ... workers, so the time per call is reported
against the number of groups. On a machine with fewer cores than processes the growth is CPU
contention, not the network: the record says how many cores there were.

fusion (seed 003): a model's gradients (shapes from the model built on the meta device)
all-reduced three ways: one call per tensor (all launched, then all waited), fused into one
flat buffer (copies in and out included), DDP-style 25 MiB buckets, and the per-tensor calls
launched one every --fusion-pace-ms (`per_tensor_paced`, `pace_s`, FUSION_PACE_S; the worker
sleeps between launches, so the cores are the collectives'), as WFBP launches them while
backward computes, where the first way launches them at once; and paced again with every rank
computing between its launches (`per_tensor_computing`: `compute_for` in slices, the compute
ending with the last launch, the round timed from the compute's start to the last all-reduce's
end), as WFBP's launches leave while backward holds the cores: how far all-reduces get while
every rank computes (network.Cluster.starved_share). The per-tensor calls also go
a fifth way (`per_tensor_ordered`, `order`): rank 0 chooses each in turn and sends the choice
to the others over a Gloo group of its own, as ByteScheduler's leader does
(methods.bytescheduler), each rank launching it once told; its time per message is what each
choice costs (network.Cluster.order_s). And once more as one fused all-reduce after every rank
computed AFTER_COMPUTE_S (`fused_after_compute`, `after_compute_s`: training's compute leaves the
caches and the backend's threads cold), with no barrier between rounds (the ranks keep in step
through the all-reduce, as a run's iterations do), each round the time of the rank that arrived
last, which waited for nobody (`last_arrival`): what a collective costs after compute
(network.Cluster.after_compute_s). Each row also carries
the machine's busy CPU per worker and round (`cpu_busy_s`, /proc/stat between the barriers
around the timed rounds, each round's barrier included) and `cores`: what an all-reduce costs
the cores that a local run's or the emulated cluster's workers share (network.HostCpu.allreduce).
Such a row's rounds run again till they fill --cpu-window-s (worker.cpu_window_calls plans them,
worker.calls_filling_window tops them up), so that /proc/stat's 10 ms ticks resolve them.

ps: push and pull through this project's parameter-server engine on its default wire
(methods.ps_zmq: ZeroMQ, as BytePS's ps-lite), the last rank the one server, the others workers
(one per machine): per size up to one partition, one message's round, every worker pushing it,
the server summing and every worker pulling the average. The predictor's PS links are fitted
to these rounds (predict.network.commbench_network). Then bursts, as WFBP pushes during backward:
every worker pushes PS_BURST_KEYS keys back to back and waits for all, at two sizes; with the
wall time of a burst (`bytes`: all its keys) each row carries the machine's busy CPU per
worker-message (`cpu_busy_s`, from /proc/stat between the barriers around the timed bursts,
`cpu_window_s`: every process on the machine, the kernel's networking included, so the machine
should be otherwise idle), and `cores`; then the same bursts with one push every
--fusion-pace-ms (`pace_s`), as backward spaces its gradients. Where workers and servers share
one machine's cores (a local run, the emulated cluster), that CPU is taken from the workers'
compute: the predictor charges it there (network.HostCpu), at the paced bursts' cost where
there are some. Then, for each --fusion-models model, its gradients as one push/pull (up to one
partition) after every worker computed AFTER_COMPUTE_S, back to back with no barrier, each round
timed by the worker that arrived last (`push_pull_after_compute`, `after_compute_s`, `model`):
what a PS round costs after compute beyond one back to back (network.Cluster.ps_after_compute_s;
two local workers, tiny-resnet's 312 KB: a traced BSP-PS run's round took 1.6 ms, back-to-back
rounds 0.9). Last, at each of PS_LANDING_BYTES, rounds that every worker starts at once after a
barrier, each worker timing its own (`push_pull_landing`, `gaps_s`): how much earlier than the
last one each worker's reply lands, fastest first (network.Cluster.ps_landing: a server's
replies through a shaped link's one queue do not land one after another).
Where every rank is a process of this one host (`spec["one_host"]`: not across emulated hosts or
Slurm nodes), the same bursts again through the per-machine topology a local run of W workers
has (methods.ps_node: the W workers one node, its leader pushing once per key): each key's
reduce inside the node, the leader's control message, push, pull and broadcast, all on this
machine's cores (`push_pull_node_burst`, `node_workers`), PS_NODE_PASSES passes of them (`pass`),
whose medians the fit takes. A burst's time per key is the node's sustained cost per message,
which the predictor's node stage takes where it is the larger (network.Cluster.node_ps_s); the
driver's PS probe times its unpaced 256 B burst beside a run (`ps_probe_s`).

fusion's rounds and ps's rounds and bursts follow --seconds-per-size as the size sweep does
(worker.warm_up_and_plan): a slow one gets the calls that fit in it, rank 0's plan on every rank.
"""
from __future__ import annotations

import itertools
import os
import statistics
import time

import torch

from ddlbench import hostcpu
from ddlbench.commbench.collectives import pattern
from ddlbench.commbench.worker import (CPU_WINDOW_S, calls_filling_window, cpu_window_calls, sizes, summarize,
                                       warm_up_and_plan)
from ddlbench.methods.bytescheduler import MAX_CHOICES, hear, tell
from ddlbench.methods.grouped import fuse_by_threshold, pack, unpack


def groups(be, spec, emit) -> None:
    dist = be.dist
    n_groups = be.n // 2
    mine = None
    for g in range(n_groups):  # every rank creates every group, in the same order
        pg = dist.new_group([2 * g, 2 * g + 1])
        if be.rank in (2 * g, 2 * g + 1):
            mine = pg
    hostcpu.settle_gloo_loops()  # each new group's Gloo loop thread, as the runs have theirs
    x = torch.randn(max(1, spec["group_bytes"] // 4), device=be.device)
    times = []
    be.barrier()
    for i in range(spec["warmup"] + spec["iters"]):
        t0 = time.perf_counter()
        if mine is not None:
            dist.all_reduce(x, group=mine)
        be.sync()
        if i >= spec["warmup"]:
            times.append(time.perf_counter() - t0)
    times = be.slowest(times)
    # then one checked call: each pair must hold the sum of its own two ranks' values
    wrong = 0
    if mine is not None:
        pair = 2 * (be.rank // 2)
        x = pattern(x.numel(), be.rank, torch.float32, be.device)
        dist.all_reduce(x, group=mine)
        expected = pattern(x.numel(), pair, torch.float32, be.device) + pattern(x.numel(), pair + 1, torch.float32, be.device)
        wrong = int((x != expected).sum().item())
    emit({"mode": "groups", "collective": "all_reduce", "dtype": "fp32", "device": spec["device"],
          "workers": be.n, "groups": n_groups, "cores": os.cpu_count(), "wrong": be.total(wrong),
          **summarize(times, x.numel() * 4, "all_reduce", 2)})


def gradient_numels(model_name: str) -> list[int]:
    from ddlbench import models

    w = models.on_meta(model_name)
    return [p.numel() for p in w.model.parameters() if p.requires_grad][::-1]  # gradient-ready order


# The paced round's launch interval: about a backward pass's time per gradient tensor (tiny-resnet
# on this project's 2 cores, 10.4 ms for 29 tensors: 0.36 ms; ResNet-50 on a GPU, tens of ms for
# 161). The predictor fits the lane speed with the same pace, so it need not match a run's.
FUSION_PACE_S = 4e-4


def pace_to(start: float, k: int, pace_s: float) -> None:
    """Sleep (not spin: the cores stay the messages' own) until the k-th launch of a round paced
    at one every `pace_s` from `start`."""
    wait = start + k * pace_s - time.perf_counter()
    if wait > 0:
        time.sleep(wait)


def order_choice(control, rank: int, n: int, msg: torch.Tensor, k: int) -> int:
    """ByteScheduler's order protocol, the runtime's own (methods.bytescheduler: `tell`, `hear`):
    rank 0 sends its choice `k` to every other rank over the Gloo `control` group, one blocking
    send each; the others receive it. Gloo sends a message only once its receiver has posted
    the receive, so the leader's next choice waits for every follower to have taken this one."""
    if rank == 0:
        tell(control, list(range(1, n)), [k])
        return k
    return hear(control, 0, msg)[0]


# fused_after_compute's compute before each round: about a small CNN's step here (tiny-resnet on
# this project's CPU, 4.5-5 ms), and as training leaves the ranks' caches: it streams through more
# memory than they hold. Two local ranks' 312 KB all-reduce took 0.18 ms back to back, 0.36 ms
# after 5 ms of 128 x 128 matrix products (whose data stays in cache), 0.54 ms after this
# compute and 0.60 ms after a tiny-resnet training step (the shortest of the two ranks' times,
# medians of 40).
AFTER_COMPUTE_S = 5e-3
AFTER_COMPUTE_ROUNDS = 4  # times fusion's rounds
_COMPUTE_BYTES = 16 << 20  # each of two buffers: beyond a CPU's last-level cache share per core
_compute_buffers: dict = {}
_compute_at: dict = {}  # device -> where the next slice of `compute_for(fine=True)` starts
COMPUTE_SLICE_BYTES = 256 << 10


def compute_for(seconds: float, device, fine: bool = False) -> None:
    """Compute on `device` (this rank's cores or its GPU) for `seconds` of wall time as training
    does between two rounds of communication: copies through buffers larger than the caches,
    each followed by a 128 x 128 matrix product. `fine`: in slices of COMPUTE_SLICE_BYTES, each
    next one further through the buffers, so that it ends within a slice's time (about 0.1 ms on
    a CPU core, where a whole copy takes 2-6) of `seconds`."""
    key = str(device)
    if key not in _compute_buffers:  # made once: a fresh 16 MB would fault its pages in every round
        _compute_buffers[key] = (torch.empty(_COMPUTE_BYTES // 4, device=device),
                                 torch.ones(_COMPUTE_BYTES // 4, device=device), torch.randn(128, 128, device=device))
    dst, src, a = _compute_buffers[key]
    end = time.perf_counter() + seconds
    step = COMPUTE_SLICE_BYTES // 4
    while time.perf_counter() < end:
        if fine:  # the next slice; the product once a pass through the buffers
            at = _compute_at.get(key, 0)
            dst[at:at + step].copy_(src[at:at + step])
            _compute_at[key] = (at + step) % dst.numel()
        else:
            dst.copy_(src)
        if not fine or _compute_at[key] == 0:
            a @ a
        if a.device.type == "cuda":
            torch.cuda.synchronize(a.device)


def last_arrival(be, times: list[float]) -> list[float]:
    """Per round, the shortest of the ranks' times: the rank that came last waited for nobody,
    so its time is the collective's own, without the others' wait for it (their compute ends
    apart where ranks share cores)."""
    everyone = [None] * be.n
    be.dist.all_gather_object(everyone, times)
    return [min(ts) for ts in zip(*everyone)]


def fusion(be, spec, emit) -> None:
    dist = be.dist
    # ByteScheduler's order: its leader's choices go over a Gloo group of their own (the runtime's
    # control group, on the CPU whatever the device)
    control = dist.new_group(backend="gloo") if be.n > 1 else None
    hostcpu.settle_gloo_loops()
    for model in spec["fusion_models"]:
        numels = gradient_numels(model)
        grads = [torch.ones(n, device=be.device) for n in numels]
        total = sum(numels)
        per_tensor = [[i] for i in range(len(numels))]
        strategies = {
            "per_tensor": per_tensor,
            "fused": [list(range(len(numels)))],
            "buckets_25MiB": fuse_by_threshold([4 * n for n in numels], 25 * 2**20),  # DDP's default cap
        }
        pace_s = float(spec.get("fusion_pace_s") or 0.0)
        if pace_s:  # as WFBP launches them while backward computes: one every pace_s
            strategies["per_tensor_paced"] = per_tensor
            if be.n > 1:  # and again with every rank computing between its launches, as backward does
                strategies["per_tensor_computing"] = per_tensor
        if control is not None:  # as ByteScheduler's leader orders them: a choice a message
            strategies["per_tensor_ordered"] = per_tensor
        after_s = float(spec.get("after_compute_s") or 0.0)
        if after_s and be.n > 1:  # as BSP sends its fused gradients: after every rank computed
            strategies["fused_after_compute"] = strategies["fused"]
        for name, groups_ in strategies.items():
            buffers = [torch.empty(sum(numels[i] for i in g), device=be.device) if len(g) > 1 else None for g in groups_]
            pace = pace_s if name in ("per_tensor_paced", "per_tensor_computing") else 0.0
            computing = name == "per_tensor_computing"
            ordered = name == "per_tensor_ordered"
            compute_s = after_s if name == "fused_after_compute" else 0.0

            def all_reduce_once() -> tuple[float, float] | None:
                """One round; where it first computes (`compute_s`), when its all-reduce began (its
                buffer packed) and when it ended (before the copies back)."""
                if compute_s:
                    compute_for(compute_s, be.device)
                span = []
                works = []
                start = time.perf_counter()
                choice = torch.zeros(MAX_CHOICES + 1, dtype=torch.int64) if ordered else None
                for k, (g, buf) in enumerate(zip(groups_, buffers)):
                    if computing:  # this rank's cores busy with compute till the next launch
                        compute_for(start + (k + 1) * pace - time.perf_counter(), be.device, fine=True)
                    elif pace:
                        pace_to(start, k, pace)
                    if ordered:  # rank 0 chooses, each other rank launches what it was told
                        g = [order_choice(control, be.rank, be.n, choice, k)]
                    flat = grads[g[0]] if buf is None else pack([grads[i] for i in g], buf)  # as the methods do
                    span.append(time.perf_counter())
                    works.append(dist.all_reduce(flat, async_op=True))
                for g, buf, w in zip(groups_, buffers, works):
                    w.wait()
                    span.append(time.perf_counter())
                    if buf is not None:  # copy the sums back into the gradients
                        unpack(buf, [grads[i] for i in g])
                be.sync()
                return (span[0], span[-1]) if compute_s else None

            def round_once() -> None:
                be.barrier()
                all_reduce_once()

            warmup, iters = warm_up_and_plan(round_once, spec.get("seconds_per_size", 0), be.total, be.rank == 0,
                                             spec["fusion_warmup"],
                                             # a round after compute varies more and is short: more of them
                                             spec["fusion_iters"] * (AFTER_COMPUTE_ROUNDS if compute_s else 1))
            measures_cpu = not (compute_s or computing) and hostcpu.busy_s() is not None
            window_s = float(spec.get("cpu_window_s", CPU_WINDOW_S))
            if measures_cpu and window_s > 0:  # rounds enough that the CPU's clock ticks resolve them
                iters = cpu_window_calls(round_once, be.total, be.rank == 0, iters, window_s)
                warmup += 1
            times = []
            busy0, window0 = hostcpu.busy_s(), time.perf_counter()

            def timed_round() -> None:
                if not compute_s:  # a round after compute starts as a run's iteration does: in step
                    be.barrier()   # since the last all-reduce, apart by what each rank's compute took
                t0 = time.perf_counter()
                span = all_reduce_once()
                times.append(span[1] - span[0] if span else time.perf_counter() - t0)

            # the planned rounds, then (CPU recorded) more till they fill the window
            iters = calls_filling_window(timed_round, be.total, be.rank == 0, iters,
                                         window_s if measures_cpu else 0, window0)
            be.barrier()  # every worker's last round is done
            busy1 = hostcpu.busy_s()
            # the machine's busy CPU per worker and round (each round's barrier included; not where
            # the round computes, whose CPU is the compute's)
            cpu = {"cpu_busy_s": (busy1 - busy0) / (iters * be.n),
                   "cpu_window_s": time.perf_counter() - window0, "cores": hostcpu.cores()} \
                if measures_cpu and busy1 is not None and iters else {}
            times = last_arrival(be, times) if compute_s else be.slowest(times)
            # then one checked round: rank r gives r + 1 everywhere, so every element must sum to n(n+1)/2
            for grad in grads:
                grad.fill_(be.rank + 1)
            all_reduce_once()
            wrong = sum(int((grad != be.n * (be.n + 1) // 2).sum().item()) for grad in grads)
            emit({"mode": "fusion", "model": model, "strategy": name, "messages": len(groups_), "tensors": len(numels),
                  **({"pace_s": pace} if pace else {}), **({"order": "leader"} if ordered else {}),
                  **({"after_compute_s": compute_s} if compute_s else {}),
                  "collective": "all_reduce", "dtype": "fp32", "device": spec["device"], "workers": be.n,
                  "wrong": be.total(wrong), **cpu, **summarize(times, total * 4, "all_reduce", be.n), "warmup": warmup})


PS_PARTITION_BYTES = 4_096_000  # BytePS's partition, as conf/method/*-ps.yaml
PS_BURST_KEYS = 32               # keys per burst: about a small CNN's tensors, pushed one each by WFBP
PS_BURST_BYTES = (256, 65_536)   # the two sizes of a burst's keys: the fit's per-message and per-byte CPU
PS_LANDING_BYTES = (4096, 16_384, 65_536, 262_144, 1_048_576)  # the landing rounds' sizes (one partition each)
PS_LANDING_ROUNDS = 12           # at least this many landing rounds a size: medians of order statistics
# The node bursts' passes, each every row again (`pass`), whose medians the predictor's fit takes:
# on this 2-core machine a node of 4 workers' burst cost 0.75-0.84 ms of CPU a key in some spells
# and 1.16-1.26 in others, seconds to minutes long, within one launch too (bl56: its unpaced rows
# 0.84, then its paced ones 1.26, where they are 10-20% apart otherwise).
PS_NODE_PASSES = 3


def ps(be, spec, emit) -> None:
    import torch.distributed as dist

    from ddlbench.methods import ps_node, ps_zmq
    from ddlbench.trace import NullTracer

    W = be.n - 1  # the last rank serves
    workers = dist.new_group(list(range(W)))
    hostcpu.settle_gloo_loops()
    layout = ps_node.per_gpu(W, 1, comm_timeout_s=60)  # every worker pushes, one machine each
    if be.rank == W:
        ps_zmq.serve(be.rank, layout, NullTracer())
    else:
        _ps_rounds_and_bursts(be, spec, emit, workers, layout)
    if spec.get("one_host") and W >= 2:
        # every rank builds the node's groups (dist.new_group), the server too
        node = ps_node.setup({"ps_topology": "per-machine"}, W, 1, W, 60, 600, None)
        hostcpu.settle_gloo_loops()
        if be.rank == W:
            ps_zmq.serve(be.rank, node, NullTracer())
        else:
            _ps_node_bursts(be, spec, emit, workers, node)


def _ps_context(be, workers):
    from ddlbench.methods import Context
    from ddlbench.trace import NullTracer

    return Context(rank=be.rank, world=be.n - 1, device=be.device, tracer=NullTracer(), group=workers,
                   extra={"comm_timeout_s": 60})


def _ps_report(be, spec, emit, workers, collective: str, wrong: int, times: list[float], nbytes: int,
               last_arrival: bool = False, **extra) -> None:
    """One ps row: the elements wrong on all workers, the slowest worker's mean time (or, with
    `last_arrival`, each round's shortest: the worker that came last waited for nobody)."""
    import torch.distributed as dist

    W = be.n - 1
    wrong = torch.tensor([wrong])
    dist.all_reduce(wrong, group=workers)
    everyone = [None] * W
    dist.all_gather_object(everyone, times, group=workers)
    timed = [min(ts) for ts in zip(*everyone)] if last_arrival else max(everyone, key=lambda ts: sum(ts) / len(ts))
    emit({"mode": "ps", "collective": collective, "dtype": "fp32", "device": spec["device"], "workers": W,
          "servers": 1, "wire": "zmq", "partition_bytes": PS_PARTITION_BYTES, **extra, "wrong": int(wrong.item()),
          **summarize(timed, nbytes, "push_pull", W)})


def _share(workers):
    """n summed over the workers (not the server, which only serves): `warm_up_and_plan`'s share."""
    import torch.distributed as dist

    def share(n: int) -> int:
        t = torch.tensor([n])
        dist.all_reduce(t, group=workers)
        return int(t.item())
    return share


def _bursts(be, spec, workers, pp, keys_per_size, first_iteration: int, passes: int = 1):
    """Every worker pushes each burst's keys back to back and waits for all, at each of
    PS_BURST_BYTES, then again with one push every `fusion_pace_s` (as WFBP pushes while
    backward computes; none where it is 0): yield (key bytes, keys, tensors, times, warm-ups,
    the row's fields: the pace where paced, the busy CPU per worker-message). A paced message costs the machine more CPU than
    one of a burst (1 Gbit/s, 2 workers: 0.70 ms against 0.47-0.50 at 256 B, 0.96 against 0.92
    at 64 KiB): its wake-ups are its own, not shared with the keys beside it."""
    import torch.distributed as dist

    W = be.n - 1
    it = first_iteration
    paces = [0.0] + ([float(spec["fusion_pace_s"])] if spec.get("fusion_pace_s") else [])
    for pass_, pace, (nbytes, keys) in itertools.product(range(passes), paces, zip(PS_BURST_BYTES, keys_per_size)):
        xs = [torch.ones(nbytes // 4, device=be.device) for _ in keys]

        def burst() -> None:
            nonlocal it
            hs, start = [], time.perf_counter()
            for k, (x, g) in enumerate(zip(xs, keys)):
                if pace:
                    pace_to(start, k, pace)
                hs.append(pp.reduce_async(x, iteration=it, tensors=["x"], group=g))
            for h in hs:
                h.wait()
            it += 1

        def synced_burst() -> None:
            dist.barrier(group=workers)
            burst()

        warmup, iters = warm_up_and_plan(synced_burst, spec.get("seconds_per_size", 0), _share(workers), be.rank == 0,
                                         spec["warmup"], spec["iters"])
        times = []
        busy0, window0 = hostcpu.busy_s(), time.perf_counter()
        for _ in range(iters):
            dist.barrier(group=workers)
            t0 = time.perf_counter()
            burst()
            times.append(time.perf_counter() - t0)
        dist.barrier(group=workers)  # every worker's last burst is back
        busy1, window_s = hostcpu.busy_s(), time.perf_counter() - window0
        cpu = {"cpu_busy_s": (busy1 - busy0) / (iters * W * len(keys)), "cpu_window_s": window_s,
               "cores": hostcpu.cores()} if busy0 is not None and busy1 is not None else {}
        yield nbytes, keys, xs, times, warmup, {**({"pace_s": pace} if pace else {}),
                                                **({"pass": pass_} if passes > 1 else {}), **cpu}


def _ps_rounds_and_bursts(be, spec, emit, workers, layout) -> None:
    import torch.distributed as dist

    from ddlbench.methods import ps_zmq

    W = be.n - 1
    ctx = _ps_context(be, workers)
    pp = ps_zmq.TRANSPORT(ctx, layout, PS_PARTITION_BYTES)
    todo = [n for n in sizes(spec) if n <= PS_PARTITION_BYTES]  # one partition each: what the fit reads
    bursts = [[len(todo) + j * PS_BURST_KEYS + k for k in range(PS_BURST_KEYS)] for j in range(len(PS_BURST_BYTES))]
    after_s = float(spec.get("after_compute_s") or 0.0)
    # after compute: each fusion model's gradients as one message, up to one partition
    after = [(model, min(4 * sum(gradient_numels(model)), PS_PARTITION_BYTES))
             for model in (spec.get("fusion_models") or [] if after_s else [])]
    first_after = len(todo) + len(PS_BURST_BYTES) * PS_BURST_KEYS
    first_landing = first_after + len(after)
    pp.prepare([max(1, n // 4) for n in todo] + [n // 4 for n in PS_BURST_BYTES for _ in range(PS_BURST_KEYS)]
               + [n // 4 for _, n in after] + [n // 4 for n in PS_LANDING_BYTES])
    it = 0

    def report(collective: str, wrong: int, times: list[float], nbytes: int, **extra) -> None:
        _ps_report(be, spec, emit, workers, collective, wrong, times, nbytes, **extra)

    for m, nbytes in enumerate(todo):
        x = torch.ones(max(1, nbytes // 4), device=be.device)

        def round_once() -> None:
            nonlocal it
            pp.reduce_async(x, iteration=it, tensors=["x"], group=m).wait()
            it += 1

        dist.barrier(group=workers)
        warmup, iters = warm_up_and_plan(round_once, spec.get("seconds_per_size", 0), _share(workers), be.rank == 0,
                                         spec["warmup"], spec["iters"])
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            round_once()
            times.append(time.perf_counter() - t0)
        # then one checked round: the average of every worker's pattern
        x = pattern(x.numel(), be.rank, torch.float32, be.device)
        pp.reduce_async(x, iteration=it, tensors=["x"], group=m).wait()
        it += 1
        expected = sum(pattern(x.numel(), r, torch.float32, be.device) for r in range(W)) / W
        report("push_pull", int((~torch.isclose(x, expected)).sum().item()), times, x.numel() * 4, warmup=warmup)
    for nbytes, keys, xs, times, warmup, fields in _bursts(be, spec, workers, pp, bursts, it):
        # every key pushed ones by every worker: their average is ones
        report("push_pull_burst", sum(int((x != 1).sum().item()) for x in xs), times, nbytes * len(keys),
               keys=len(keys), key_bytes=nbytes, warmup=warmup, **fields)
        it += warmup + len(times)  # the bursts numbered their rounds on from `it`
    for m, (model, nbytes) in enumerate(after):
        # as BSP-PS pushes its fused gradients: after every worker computed, the rounds back to back
        # with no barrier (the pulls keep the workers in step, as a run's iterations), each round
        # timed by the worker that arrived last (`_ps_report`'s last_arrival)
        x = torch.ones(nbytes // 4, device=be.device)

        def after_once() -> float:
            nonlocal it
            compute_for(after_s, be.device)
            t0 = time.perf_counter()
            pp.reduce_async(x, iteration=it, tensors=["x"], group=first_after + m).wait()
            it += 1
            return time.perf_counter() - t0

        dist.barrier(group=workers)
        warmup, iters = warm_up_and_plan(after_once, spec.get("seconds_per_size", 0), _share(workers), be.rank == 0,
                                         spec["warmup"], spec["iters"] * AFTER_COMPUTE_ROUNDS)
        times = [after_once() for _ in range(iters)]
        # every round pushed ones by every worker: their average is ones
        report("push_pull_after_compute", int((x != 1).sum().item()), times, nbytes, last_arrival=True, model=model,
               after_compute_s=after_s, warmup=warmup)
    for m, nbytes in enumerate(PS_LANDING_BYTES):
        it = _landing_rounds(be, spec, emit, workers, pp, first_landing + m, nbytes, it)
    pp.close()


def _landing_rounds(be, spec, emit, workers, pp, key: int, nbytes: int, it: int) -> int:
    """Rounds of one partition of `nbytes`, each after a barrier of the workers, so that every
    worker pushes at once; each worker times its own round, to its own reply (no clock is shared).
    The server answers once every push is in, the same moment for all, so within a round the k-th
    fastest worker's time short of the slowest's is how much earlier its reply landed than the
    last one: the servers' replies' landing profile (`push_pull_landing`, `gaps_s`: the median
    over rounds, fastest worker first, the slowest's 0), which the predictor's per-machine PS
    takes in place of replies one after another (network.Cluster.ps_landing). Returns the next
    round's number."""
    import torch.distributed as dist

    W = be.n - 1
    x = torch.ones(nbytes // 4, device=be.device)

    def once() -> float:
        nonlocal it
        dist.barrier(group=workers)
        t0 = time.perf_counter()
        pp.reduce_async(x, iteration=it, tensors=["x"], group=key).wait()
        it += 1
        return time.perf_counter() - t0

    warmup, iters = warm_up_and_plan(once, spec.get("seconds_per_size", 0), _share(workers), be.rank == 0,
                                     spec["warmup"], spec["iters"])
    times = [once() for _ in range(max(iters, PS_LANDING_ROUNDS))]
    wrong = torch.tensor([int((x != 1).sum().item())])  # every round pushed ones by every worker
    dist.all_reduce(wrong, group=workers)
    everyone = [None] * W
    dist.all_gather_object(everyone, times, group=workers)
    rounds = [sorted(ts) for ts in zip(*everyone)]  # per round, the workers' times, fastest first
    gaps = [statistics.median(r[-1] - r[k] for r in rounds) for k in range(W)]
    emit({"mode": "ps", "collective": "push_pull_landing", "dtype": "fp32", "device": spec["device"], "workers": W,
          "servers": 1, "wire": "zmq", "partition_bytes": PS_PARTITION_BYTES, "warmup": warmup,
          "wrong": int(wrong.item()), "gaps_s": gaps, "rounds_s": rounds,
          **summarize([r[-1] for r in rounds], nbytes, "push_pull", W)})
    return it


def _ps_node_bursts(be, spec, emit, workers, node) -> None:
    """The bursts through the per-machine topology: the W workers one node (ps_node.NodeLayer
    around the same wire), its leader the one pusher."""
    from ddlbench.methods import ps_node, ps_zmq

    W = be.n - 1
    ctx = _ps_context(be, workers)
    pp = ps_node.wrap(ctx, ps_zmq.TRANSPORT(ctx, node, PS_PARTITION_BYTES), node)
    bursts = [[j * PS_BURST_KEYS + k for k in range(PS_BURST_KEYS)] for j in range(len(PS_BURST_BYTES))]
    pp.prepare([n // 4 for n in PS_BURST_BYTES for _ in range(PS_BURST_KEYS)])
    for nbytes, keys, xs, times, warmup, fields in _bursts(be, spec, workers, pp, bursts, 0, PS_NODE_PASSES):
        report_extra = {"keys": len(keys), "key_bytes": nbytes, "node_workers": W, "ps_topology": "per-machine",
                        "warmup": warmup, **fields}
        _ps_report(be, spec, emit, workers, "push_pull_node_burst", sum(int((x != 1).sum().item()) for x in xs),
                   times, nbytes * len(keys), **report_extra)
    pp.close()
