"""Pid files: which process runs each rank, so a launcher stops its own workers and nobody else's.

A run directory can be shared by several hosts (Slurm, mpirun over hosts), and a pid outlives its
process (the kernel reuses it), so a pid read from the directory alone can name a stranger's
process. Each rank therefore writes `pid-<host>-rank<R>` holding its pid and its start time
(field 22 of /proc/<pid>/stat, clock ticks since boot), and a launcher signals a pid only when
the file names its own host and the live process's start time still matches. The signal goes
through a pidfd where the kernel has them (Linux 5.3), so the process checked is the process
signalled. Where /proc is missing (not Linux) the start time is None on both sides: the host
check still holds, the reuse check does not.

The pid file doubles as the rank's heartbeat: the driver touches it while iterating
(`driver.heartbeat`), and the watchdog reads its modification time.
"""
from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import NamedTuple

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Entry(NamedTuple):
    host: str
    rank: int
    pid: int
    start: int | None


def path(run_dir: Path, rank: int, host: str | None = None) -> Path:
    return Path(run_dir) / f"pid-{host or socket.gethostname()}-rank{rank}"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None
    where the process or /proc is missing."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count fields after its last ")"
    return int(stat.rsplit(")", 1)[1].split()[19])


def write(run_dir: Path, rank: int) -> Path:
    """This process's pid file for `rank`, written whole (a reader never sees half a line)."""
    pid = os.getpid()
    start = start_time(pid)
    p = path(run_dir, rank)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(f"{pid} {'-' if start is None else start}\n")
    os.replace(tmp, p)
    return p


def entries(run_dir: Path) -> list[Entry]:
    """Every rank's pid file in the directory, from any host; files being written or unreadable
    are skipped."""
    out = []
    for f in Path(run_dir).glob("pid-*-rank*"):
        host, _, rank = f.name.removeprefix("pid-").rpartition("-rank")
        try:
            pid, start = f.read_text().split()
            out.append(Entry(host, int(rank), int(pid), None if start == "-" else int(start)))
        except (OSError, ValueError):
            pass
    return out


def own(run_dir: Path) -> list[Entry]:
    """The ranks this host started whose process still runs: same host, same start time."""
    return on_hosts(run_dir, [socket.gethostname()])


def on_hosts(run_dir: Path, hosts) -> list[Entry]:
    """The ranks of these hosts whose process still runs (same start time): only for hosts
    that share this kernel's process ids, as an emulated cluster's hosts do."""
    names = set(hosts)
    return [e for e in entries(run_dir) if e.host in names and _running(e)]


def _running(e: Entry) -> bool:
    try:
        state = Path(f"/proc/{e.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return start_time(e.pid) is None and e.start is None and _exists(e.pid)  # no /proc
    return state not in ("Z", "X") and start_time(e.pid) == e.start


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def send(e: Entry, sig: int) -> bool:
    """Signal the rank's process if it is still the one that wrote the file; True if sent."""
    try:
        fd = os.pidfd_open(e.pid)
    except AttributeError:  # no pidfds: check, then signal (a reuse in between is a microsecond race)
        fd = None
    except OSError:
        return False  # gone
    try:
        if start_time(e.pid) != e.start:
            return False
        if fd is None:
            os.kill(e.pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when its parent (torchrun, mpirun's proxy)
    dies, however it dies (prctl PR_SET_PDEATHSIG, Linux only), so a SIGKILLed launcher leaves
    no rank running. A parent that died before the call is seen as a changed parent pid."""
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):  # not Linux: the launcher's kill_all is all there is
        return
    if os.getppid() != parent or parent == 1:  # orphaned already: nobody will collect this rank
        os.kill(os.getpid(), sig)
