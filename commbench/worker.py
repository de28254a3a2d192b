"""One commbench job, run by every rank: under torchrun (torch.distributed backends), mpiexec
(mpi4py) or horovodrun (Horovod). Reads a JSON spec, writes one JSON line per measurement from rank 0,
as each finishes.

Per (collective, dtype, device, size): `warmup` untimed calls, then `iters` calls back to back
(fewer of each for a size whose calls are slow: `calls_for`, planned by rank 0 for every rank)
with a timestamp after each one's wait (a CUDA event on GPU), so a call's time runs from the
previous call's completion to its own and the times sum to the loop's. As in nccl-tests, the
reported time is the slowest rank's mean; min, max and p50 are that rank's. (The mean of
per-call maxima would be biased upward by noise on every call.)
Then fresh buffers, one more call, and `wrong` counts the elements that differ from the exact
expected result, summed over ranks.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch

from ddlbench import hostcpu, metrics
from ddlbench.commbench.collectives import COLLECTIVES, DTYPES, result_of


SECONDS_PER_SIZE = 2.0  # default --seconds-per-size: about how long a size's timed calls take at most
MIN_ITERS = 3           # timed calls a size gets however slow its calls are (or --iters, if fewer)
PROBE_WARMUPS = 2       # warm-ups before the one whose time plans the rest: the first sets connections up


def calls_for(call_s: float, warmup: int, iters: int, budget_s: float, done: int) -> tuple[int, int]:
    """(warm-ups still to make, timed calls) for a size one of whose calls took `call_s`, after
    `done` warm-ups: `warmup` and `iters`, but where `iters` calls would take longer than
    `budget_s` (--seconds-per-size), as many as fit in it (at least MIN_ITERS), and warm-ups in
    a quarter of it. On a 100 Mbit/s link a 64 MiB all-reduce takes about 6 s: 105 calls of each
    large size made one job of make commbench LINK=100mbit outlast its 30-minute timeout."""
    warm = max(0, warmup - done)
    if not budget_s or call_s <= 0:
        return warm, iters
    return min(warm, int(budget_s / 4 / call_s)), min(iters, max(MIN_ITERS, int(budget_s / call_s)))


# The least time a round whose machine CPU is recorded (hostcpu.busy_s: /proc/stat, in clock
# ticks of 10 ms) runs for: 1 s holds 100 ticks a core, 0.5% of the busy CPU. Ten fused rounds of
# tiny-resnet's gradients at 2 workers here took 7 ms, one tick or two of the two cores: every
# bench read 0.5 or 1.0 ms of CPU per worker and round, the per-byte cost of the predictor's fit
# halved or doubled by the draw (a thousand rounds: 0.74 ms).
CPU_WINDOW_S = 1.0


def cpu_window_calls(once, share, rank0: bool, iters: int, window_s: float = CPU_WINDOW_S,
                     most: int = 100_000) -> int:
    """Timed calls for a round whose machine CPU is recorded: `iters`, or as many as fill
    `window_s` where those would not, at one more call's time (made here, warm, and timed on
    rank 0, whose plan every rank follows: `share(n)` sums n over the ranks), at most `most`."""
    t0 = time.perf_counter()
    once()
    call_s = time.perf_counter() - t0
    n = min(most, max(iters, math.ceil(window_s / call_s - 1e-9) if call_s > 0 else iters)) if rank0 else 0
    return share(int(n))


def calls_filling_window(call, share, rank0: bool, n: int, window_s: float, since: float,
                         most: int = 100_000) -> int:
    """Make `n` calls of `call()`, then more till `window_s` has passed since `since`
    (perf_counter): rank 0 plans each top-up from the mean call so far and every rank follows
    its count (`share`, as cpu_window_calls). cpu_window_calls plans from one call, and one slow
    call on a loaded CI box once left a window of 0.15 s under half full; a top-up fills it
    whatever that call took. With `window_s` 0: the `n` calls only. Returns the calls made."""
    done = 0
    while n:
        for _ in range(n):
            call()
        done += n
        if window_s <= 0:
            break
        elapsed = time.perf_counter() - since
        more = 0
        if rank0 and elapsed < window_s and done < most:
            more = min(most - done, max(1, math.ceil((window_s - elapsed) * done / elapsed))) if elapsed > 0 else 1
        n = share(int(more))
    return done


def warm_up_and_plan(once, budget_s: float, share, rank0: bool, warmup: int, iters: int) -> tuple[int, int]:
    """Warm up with `once()` (one call, back when it is done on this rank) and say how many timed
    calls to make: `warmup` and `iters` as asked; with `budget_s` (--seconds-per-size, the
    spec's `seconds_per_size`) and a warm-up asked for, the last of PROBE_WARMUPS warm-ups is
    timed and `calls_for` plans the rest, rank 0's plan on every rank (`share(n)`: n summed over
    the ranks making the calls, which must all make the same ones). Returns (warm-ups made, timed
    calls). The sizes sweep and the fusion and ps modes share it: a 2 MiB ps burst takes 0.4 s at
    100 Mbit/s, 105 of them 45 s a worker count."""
    probe = PROBE_WARMUPS if budget_s and warmup else 0
    for _ in range(warmup if not probe else probe - 1):
        once()
    if not probe:
        return warmup, iters
    t0 = time.perf_counter()
    once()
    warm, n = calls_for(time.perf_counter() - t0, warmup, iters, budget_s, probe)
    warm, n = share(warm if rank0 else 0), share(n if rank0 else 0)
    for _ in range(warm):
        once()
    return probe + warm, n


def sizes(spec) -> list[int]:
    out, s = [], spec["min_bytes"]
    while s <= spec["max_bytes"]:
        out.append(s)
        s *= spec["factor"]
    return out


def summarize(times_s: list[float], nbytes: int, collective: str, n: int) -> dict:
    mean = sum(times_s) / len(times_s)
    return {
        "bytes": nbytes, "iters": len(times_s),
        "time_us": mean * 1e6, "time_us_min": min(times_s) * 1e6, "time_us_max": max(times_s) * 1e6,
        "time_us_p50": statistics.median(times_s) * 1e6,
        "algbw_GBps": metrics.algbw_GBps(nbytes, mean), "busbw_GBps": metrics.busbw_GBps(collective, nbytes, mean, n),
    }


class Torch:
    """torch.distributed: gloo, nccl, mpi, ucc."""

    def __init__(self, spec):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", 0))
        if spec["device"] == "cuda":
            torch.cuda.set_device(local)
        self.device = torch.device("cuda", local) if spec["device"] == "cuda" else torch.device("cpu")
        dist.init_process_group(spec["torch_backend"])
        hostcpu.settle_gloo_loops()  # where commbench's launch asks (ranks sharing this machine's cores)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, coll, inp, out, group=None):
        work = coll.torch_op(self.dist, inp, out, group)
        if work is not None:
            work.wait()

    def slowest(self, times: list[float]) -> list[float]:
        """The per-call times of the rank whose mean is the largest."""
        everyone = [None] * self.n
        self.dist.all_gather_object(everyone, times)
        return max(everyone, key=lambda ts: sum(ts) / len(ts))

    def total(self, count: int) -> int:
        t = torch.tensor([count], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(t)
        return int(t.item())

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.barrier()
        self.dist.destroy_process_group()


class Mpi4py:
    def __init__(self, spec):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.n = self.comm.rank, self.comm.size
        self.device = torch.device("cpu")

    def sync(self):
        pass

    def run(self, coll, inp, out, group=None):
        coll.mpi_op(self.comm, inp.numpy(), out.numpy())

    def slowest(self, times):
        return max(self.comm.allgather(times), key=lambda ts: sum(ts) / len(ts))

    def total(self, count):
        return self.comm.allreduce(count, op=self.MPI.SUM)

    def barrier(self):
        self.comm.Barrier()

    def close(self):
        self.comm.Barrier()


class Horovod:
    """Horovod's collectives, started by horovodrun over Gloo. Horovod's fusion and cycle are
    off (set by the launcher) so each call is one collective, as on the other backends."""

    def __init__(self, spec):
        import horovod.torch as hvd

        hvd.init()
        self.hvd = hvd
        self.rank, self.n = hvd.rank(), hvd.size()
        if spec["device"] == "cuda":
            torch.cuda.set_device(hvd.local_rank())
        self.device = torch.device("cuda", hvd.local_rank()) if spec["device"] == "cuda" else torch.device("cpu")

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, coll, inp, out, group=None):
        coll.hvd_op(self.hvd, inp, out)

    def slowest(self, times):
        return max(self.hvd.allgather_object(times, name="commbench.times"), key=lambda ts: sum(ts) / len(ts))

    def total(self, count):
        return int(self.hvd.allreduce(torch.tensor([count]), op=self.hvd.Sum, name="commbench.total").item())

    def barrier(self):
        self.hvd.barrier()

    def close(self):
        self.hvd.barrier()


class HostClock:
    """A timestamp after each call: the calls run to completion on the host (gloo, MPI, Horovod)."""

    def __init__(self, iters: int):
        self.stamps = [0.0] * (iters + 1)

    def mark(self, i: int) -> None:
        self.stamps[i] = time.perf_counter()

    def durations_s(self) -> list[float]:
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]


class CudaClock:
    """A CUDA event on the current stream after each call's wait, read after one synchronize at
    the end: the host never stalls between calls, so launches pipeline as in a bare loop."""

    def __init__(self, iters: int):
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]

    def mark(self, i: int) -> None:
        self.events[i].record()

    def durations_s(self) -> list[float]:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(self.events, self.events[1:])]


def timed_calls(be, coll, inp, out, iters: int) -> list[float]:
    """`iters` back-to-back calls; call i's time runs from call i-1's completion to its own, so
    the times sum to the loop's time (nccl-tests' block mean) and the loop adds nothing but one
    timestamp per call. See benchmarks/commbench_overhead.py."""
    clock = (CudaClock if be.device.type == "cuda" else HostClock)(iters)
    run, mark = be.run, clock.mark
    mark(0)
    for i in range(1, iters + 1):
        run(coll, inp, out)
        mark(i)
    return clock.durations_s()


def measure(be, coll, dtype, nbytes: int, spec) -> dict:
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    inp, out, _ = coll.setup(numel, be.n, be.rank, dtype, be.device)

    def once() -> None:
        be.run(coll, inp, out)
        be.sync()

    # with a time limit and any warm-up asked for, at least PROBE_WARMUPS (--warmup 0: cold calls, as asked)
    warmup, iters = warm_up_and_plan(once, spec.get("seconds_per_size", 0), be.total, be.rank == 0, spec["warmup"],
                                     spec["iters"])
    be.barrier()
    times = timed_calls(be, coll, inp, out, iters)
    times = be.slowest(times)
    inp, out, expected = coll.setup(numel, be.n, be.rank, dtype, be.device)
    be.run(coll, inp, out)
    be.sync()
    wrong = 0 if expected is None else int((result_of(coll, inp, out) != expected).sum().item())
    real_bytes = numel * inp.element_size() if coll.name != "all_gather" else out.numel() * out.element_size()
    return {**summarize(times, real_bytes, coll.name, be.n), "warmup": warmup,
            "wrong": be.total(wrong)}


def sweep(be, spec, emit) -> None:
    for cname in spec["collectives"]:
        coll = COLLECTIVES[cname]
        for dname in spec["dtypes"]:
            for nbytes in sizes(spec):
                base = {"collective": cname, "dtype": dname, "device": spec["device"], "workers": be.n}
                try:
                    emit({**base, **measure(be, coll, DTYPES[dname], nbytes, spec)})
                except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
                    # the backend lacks this collective or dtype: say so once, go on
                    emit({**base, "unsupported": " ".join(str(exc).split())[:200]})
                    break


def main(spec_path: str) -> None:
    from ddlbench.launch.pids import die_with_parent

    die_with_parent()  # a killed torchrun (or mpiexec proxy) takes this rank along
    from ddlbench.launch.worker import rank_env

    hostcpu.pin_rank(*rank_env()[:2])  # where commbench's launch asks, before any thread starts
    with open(spec_path) as f:
        spec = json.load(f)
    be = {"mpi4py": Mpi4py, "horovod": Horovod}.get(spec["backend"], Torch)(spec)
    torch.set_num_threads(1)
    with open(spec["out"], "w") if be.rank == 0 else contextlib.nullcontext() as out:
        _measure(spec, be, out)
    be.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see launch/worker.py: skip torch's C++ teardown


def _measure(spec: dict, be, out) -> None:
    """Run the spec's mode, rank 0 writing each row to `out` as it finishes."""
    def emit(row):
        if be.rank == 0:
            # a line per measurement as it finishes: a sweep stopped by a signal keeps what it measured
            out.write(json.dumps(row) + "\n")
            out.flush()
            # progress, on stdout, which commbench passes through: its ranks' stderr goes to a log
            # where no terminal shows it, and a sweep at 100 Mbit/s runs for many minutes
            print(f"[commbench {spec['backend']} x{be.n}] {row['collective']} {row['dtype']} "
                  f"{row.get('bytes', '-')} B: {row.get('time_us', float('nan')):.1f} us"
                  f"{'  UNSUPPORTED: ' + row['unsupported'] if 'unsupported' in row else ''}", flush=True)

    from ddlbench.commbench import modes

    {"sizes": sweep, "groups": modes.groups, "fusion": modes.fusion, "ps": modes.ps}[spec["mode"]](be, spec, emit)


if __name__ == "__main__":
    main(sys.argv[1])
