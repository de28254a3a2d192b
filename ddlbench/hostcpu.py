"""How busy this machine's cores were: the evidence that a run sharing one machine (a local run,
the emulated cluster) was bound by its CPU, and the predictor's calibration of what messages cost
there (commbench's ps bursts, predict.network.HostCpu)."""
from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def _cpu_ticks() -> list[int] | None:
    """/proc/stat's first line, the whole machine's CPU time per state in clock ticks (user,
    nice, system, idle, iowait, irq, softirq, steal, ...); None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    return [int(v) for v in fields[1:]]


def busy_and_steal_s() -> tuple[float | None, float | None]:
    """(`busy_s`, `steal_s`) from one reading of /proc/stat."""
    ticks = _cpu_ticks()
    if ticks is None:
        return None, None
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, (ticks[7] / hz if len(ticks) > 7 else None)


def busy_s() -> float | None:
    """CPU seconds this machine's cores have been busy since boot (/proc/stat: user, nice,
    system, irq, softirq; not idle, iowait or steal): every process on the machine and the
    kernel's networking. None where there is no /proc/stat."""
    return busy_and_steal_s()[0]


def steal_s() -> float | None:
    """CPU seconds the hypervisor has taken from this machine's cores since boot (/proc/stat's
    steal: time a virtual CPU was ready to run and another guest ran instead), None where there
    is no /proc/stat or no steal field. A shared cloud VM here lost 0.5-5% of its 2 cores at
    times, and bursts of 5-14%; a run in such a burst measures the neighbour, not the method."""
    return busy_and_steal_s()[1]


def steal_mark() -> tuple[float | None, float]:
    """Where a span starts, for `stolen_share`: the steal so far and the monotonic clock."""
    return steal_s(), time.monotonic()


def stolen_share(mark: tuple[float | None, float]) -> float | None:
    """The share of this machine's cores the hypervisor gave other guests since `mark`
    (`steal_mark`); None without /proc/stat's steal."""
    steal0, t0 = mark
    steal1, wall_s = steal_s(), time.monotonic() - t0
    if steal0 is None or steal1 is None or wall_s <= 0:
        return None
    return (steal1 - steal0) / wall_s / cores()


def clock_key() -> str:
    """What names the clock this process's `time.perf_counter` reads: CLOCK_MONOTONIC on Linux,
    one per running kernel, so every process with the same key (those of one machine, the
    emulated cluster's hosts included: network namespaces share the kernel) can compare stamps.
    The kernel's boot id; the host name where there is none (a time namespace would offset the
    clock: none of our launchers makes one)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "host:" + socket.gethostname()


def cores() -> int:
    """This machine's cores, all of which `busy_s` counts (not only those this process may run
    on: under a CPU binding the others' load is still in the figure)."""
    return os.cpu_count() or 1


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds each of this process's live threads has used so far, summed by the name the
    kernel knows it by (the methods' helper threads are named there `ddlb-<name>`,
    `methods.base.name_os_thread`; torch's own threads carry theirs, e.g. gloo_tcp_loop; the
    main thread is "main"): `thread_sched_s`' first. {} where there is no /proc."""
    return {name: cpu for name, (cpu, _) in thread_sched_s().items()}


def thread_sched_s() -> dict[str, tuple[float, float]]:
    """(CPU seconds, run-queue seconds) each of this process's live threads has had so far, summed
    by name as `thread_cpu_s` names them: /proc/self/task/*/schedstat, the scheduler's own
    nanosecond clocks of time on a core and time runnable but waiting for one. The run-queue
    time tells a rank that waited for a core (its neighbours' threads held it) from one that
    waited on its peers (asleep, in neither). Where schedstat is missing, the CPU comes from
    /proc/self/task/*/stat (user + system, in clock ticks: 10 ms here, which over a block of 40
    iterations reads in steps of 0.25 ms an iteration) and the run-queue time is 0. Threads that
    ended are not counted. {} where there is no /proc."""
    out: dict[str, tuple[float, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    me = str(os.getpid())
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended since the listing
        name = "main" if tid == me else stat[stat.index("(") + 1:stat.rindex(")")]
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                on_cpu_ns, runq_ns = (int(v) for v in f.read().split()[:2])
            cpu, runq = on_cpu_ns / 1e9, runq_ns / 1e9
        except (OSError, ValueError):  # no schedstat (a kernel without it), or it ended meanwhile
            fields = stat[stat.rindex(")") + 2:].split()
            cpu, runq = (int(fields[11]) + int(fields[12])) / tick, 0.0
        had = out.get(name, (0.0, 0.0))
        out[name] = (had[0] + cpu, had[1] + runq)
    return out


def per_iteration_ms(before: dict[str, float], after: dict[str, float], iterations: int) -> dict[str, float]:
    """Each thread name's seconds between two readings (`thread_cpu_s`, or either clock of
    `thread_sched_s`), in ms per iteration, largest first, to the microsecond, names under
    0.05 ms left out (threads that started in between count from zero)."""
    ms = {name: 1e3 * (after[name] - before.get(name, 0.0)) / iterations for name in after}
    return {name: round(v, 3) for name, v in sorted(ms.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def sched_per_iteration_ms(before: dict, after: dict, iterations: int) -> tuple[dict, dict]:
    """`per_iteration_ms` of both clocks of two `thread_sched_s` readings: (CPU, run queue)."""
    return tuple(per_iteration_ms({k: v[i] for k, v in before.items()}, {k: v[i] for k, v in after.items()},
                                  iterations) for i in (0, 1))


# Gloo's TCP transport serves its sockets from one loop thread per device (`gloo_tcp_loop`), on a
# level-triggered epoll. When a socket is readable while another thread holds its pair's lock (a
# Gloo worker thread sending on that pair), the loop skips the event and asks epoll again at once
# (gloo/transport/tcp/pair.cc, Pair::handleEvents: try_to_lock, "skip handling the events until the
# next tick"): it spins. On a real host a spare core absorbs that. Where every host of a run shares
# this machine's few cores (local runs, the emulated cluster, commbench on them), the spinning loops
# hold the cores that the lock's holder needs, and it waits for the scheduler's next tick (4 ms at
# HZ=250): on this 2-core VM a 2-worker all-reduce of 4 KB took 0.3 ms at the median and 4 ms at
# p90, 29 of them at once 35 ms. Under SCHED_IDLE the loop threads yield those cores to any other
# thread that wakes (benchmarks/gloo_loop_spin.py measures it).
GLOO_LOOP_POLICY_ENV = "DDLBENCH_GLOO_LOOP_POLICY"
GLOO_LOOP_THREAD = "gloo_tcp_loop"
GLOO_LOOP_POLICIES = ("idle",)  # Linux's SCHED_IDLE; what the launchers on shared cores set (conf/launcher)
LOOP_NAMING_GRACE_S = 0.05  # a group made just before: its loop thread was still "python" in 1 of ~10 tries


def gloo_loop_policy(environ=None) -> str | None:
    """The scheduling policy the launcher asks for Gloo's loop threads (`GLOO_LOOP_POLICY_ENV`:
    `idle`, which any thread may choose for itself), or None where it asks for none."""
    environ = os.environ if environ is None else environ
    value = environ.get(GLOO_LOOP_POLICY_ENV, "").strip()
    if value in ("", "none"):
        return None
    if value not in GLOO_LOOP_POLICIES:
        raise ValueError(f"{GLOO_LOOP_POLICY_ENV}={value!r} is invalid; accepted: {', '.join(GLOO_LOOP_POLICIES)}, none")
    return value


def settle_gloo_loops(environ=None) -> dict | None:
    """Put every `gloo_tcp_loop` thread of this process under the policy the launcher asks for
    (`gloo_loop_policy`); call it once the process groups exist (each group's device has a loop
    thread of its own). Returns {"policy": ..., "threads": how many loop threads are under it},
    for the run's record, or None where none is asked for (or there is no /proc)."""
    policy = gloo_loop_policy(environ)
    if policy is None or not hasattr(os, "SCHED_IDLE"):
        return None
    time.sleep(LOOP_NAMING_GRACE_S)  # a loop thread names itself as it starts: one just started may not have yet
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    done = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != GLOO_LOOP_THREAD:
                    continue
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))  # Linux: a tid names one thread
        except OSError:
            continue  # ended since the listing
        done += 1
    return {"policy": policy, "threads": done}


# Where a run's ranks share this machine's cores, Linux places a thread that one rank wakes (a Gloo
# worker thread, as the rank starts an all-reduce and then blocks) on the core it last ran on; if
# another rank computes there, the thread waits behind it, and the core that just went idle does
# not pull it (it is cache-hot): on this 2-core VM 2-worker BSP-A2A runs of tiny-resnet gave
# 1086-1217 samples/s (std 80-176), against 1389-1398 (std 2-56) with each rank bound to its own
# core. Launchers on one machine therefore bind each rank to its cores, as mpirun --bind-to core
# and Slurm's task affinity do on a cluster (`launcher.pin_ranks`, commbench's --pin-ranks); and
# as Open MPI does, not where the ranks' threads outnumber the cores: two ranks bound to one core
# cannot use the other when one of them waits, and ByteScheduler-PS at 2 workers and a server on
# 2 cores fell from 286-295 to 233 samples/s bound.
PIN_RANKS_ENV = "DDLBENCH_PIN_RANKS"


def rank_cores(rank: int, threads: int, usable: list[int]) -> list[int]:
    """The cores rank `rank` (of all the ranks on this machine, in rank order) is bound to: its
    `threads` cores in turn from `usable` (sorted), wrapping around when the ranks' threads
    outnumber them (each core then holds the same number of ranks, give or take one)."""
    n = len(usable)
    return sorted({usable[(rank * threads + k) % n] for k in range(min(threads, n))})


def pin_rank(rank: int, ranks: int, environ=None) -> list[int] | None:
    """Bind this process (call it before it starts threads: they inherit the binding) to
    `rank_cores` of the cores it may use, its OMP_NUM_THREADS of them, where the launcher asks
    (`PIN_RANKS_ENV`=1) and the `ranks` of this machine have a core for each of their threads.
    Returns the cores, or None where it did not bind (or not on Linux)."""
    environ = os.environ if environ is None else environ
    value = environ.get(PIN_RANKS_ENV, "").strip()
    if value in ("", "0"):
        return None
    if value != "1":
        raise ValueError(f"{PIN_RANKS_ENV}={value!r} is invalid; accepted: 1, 0")
    if not hasattr(os, "sched_setaffinity"):
        return None
    threads = max(1, int(environ.get("OMP_NUM_THREADS", "1") or 1))
    usable = sorted(os.sched_getaffinity(0))
    if ranks * threads > len(usable):
        return None  # oversubscribed: the scheduler spreads the ranks better than a fixed binding
    cores = rank_cores(rank, threads, usable)
    os.sched_setaffinity(0, cores)
    return cores


# -- one measurement at a time on this machine's cores ----------------------------------------
# Anything else on the cores moves what a run or a calibration times. A validation run beside a
# bench (be50, 2026-12-03, even at SCHED_IDLE: Gloo's loop threads run there too,
# `settle_gloo_loops`) slowed the runs it overlapped by up to 36% and timed ByteScheduler's
# machinery at 0.03 ms an iteration where the machine idle gave 6.9. Runs and make commbench
# hold the machine's lock (`measuring_lock`) shared while they time (`measuring`); a calibration
# that would time the cores refuses while anyone else holds it (`refuse_if_others_measuring`).
MEASURING_ENV = "DDLBENCH_MEASURING"  # set inside a holder: its own processes are not others
MEASURING_LOCK_ENV = "DDLBENCH_MEASURING_LOCK"  # another lock file (the test suite's workers: one each)


def measuring_lock() -> Path:
    """The machine's lock file: $DDLBENCH_MEASURING_LOCK, else ddlbench-measuring.lock in the
    temporary directory."""
    return Path(os.environ.get(MEASURING_LOCK_ENV) or Path(tempfile.gettempdir()) / "ddlbench-measuring.lock")


class MachineBusy(RuntimeError):
    """A measurement of this machine's cores refused: a run or make commbench times on them now."""


def _lock_file(path: Path):
    """The lock file opened (made readable and writable by everyone, so another user's run can
    hold it too), or None where it cannot be (then nobody is told, nothing refused)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    return os.fdopen(fd, "rb")


@contextmanager
def measuring(path: Path | None = None):
    """Held while a run or make commbench times on this machine's cores: a shared lock on
    `path` (`measuring_lock`), so several may run at once, and MEASURING_ENV set for the processes
    it starts."""
    f = _lock_file(Path(path or measuring_lock()))
    old = os.environ.get(MEASURING_ENV)
    try:
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_SH)
        os.environ[MEASURING_ENV] = "1"
        yield
    finally:
        if old is None:
            os.environ.pop(MEASURING_ENV, None)
        else:
            os.environ[MEASURING_ENV] = old
        if f is not None:
            f.close()  # and the lock with it


def others_measuring(path: Path | None = None) -> bool:
    """Whether a run or make commbench other than this process's own holds `measuring`."""
    if os.environ.get(MEASURING_ENV):
        return False
    f = _lock_file(Path(path or measuring_lock()))
    if f is None:
        return False
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def refuse_if_others_measuring(what: str, path: Path | None = None) -> None:
    """Raise MachineBusy where timing `what` now would run beside a run or make commbench."""
    path = Path(path or measuring_lock())
    if others_measuring(path):
        raise MachineBusy(f"a ddlbench run or make commbench is timing on this machine's cores now "
                          f"({path} is held): measuring {what} beside it would disturb "
                          f"both; measure it once that has ended")
