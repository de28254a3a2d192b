"""How busy this machine's cores were: the evidence that a run sharing one machine (a local run,
the emulated cluster) was bound by its CPU, and the predictor's calibration of what messages cost
there (commbench's ps bursts, predict.network.HostCpu)."""
from __future__ import annotations

import os


def busy_s() -> float | None:
    """CPU seconds this machine's cores have been busy since boot (/proc/stat: user, nice,
    system, irq, softirq; not idle, iowait or steal): every process on the machine and the
    kernel's networking. None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def cores() -> int:
    """This machine's cores, all of which `busy_s` counts (not only those this process may run
    on: under a CPU binding the others' load is still in the figure)."""
    return os.cpu_count() or 1


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds each of this process's live threads has used so far, summed by the name the
    kernel knows it by (/proc/self/task/*/stat: user + system; the methods' helper threads are
    named there `ddlb-<name>`, `methods.base.name_os_thread`; torch's own threads carry theirs,
    e.g. gloo_tcp_loop; the main thread is "main"). Threads that ended are not counted. {} where
    there is no /proc."""
    out: dict[str, float] = {}
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
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def per_iteration_ms(before: dict[str, float], after: dict[str, float], iterations: int) -> dict[str, float]:
    """Each thread name's CPU between two `thread_cpu_s` readings, in ms per iteration, largest
    first, names under 0.05 ms left out (threads that started in between count from zero)."""
    ms = {name: 1e3 * (after[name] - before.get(name, 0.0)) / iterations for name in after}
    return {name: round(v, 2) for name, v in sorted(ms.items(), key=lambda kv: -kv[1]) if v >= 0.05}
