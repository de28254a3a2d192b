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
