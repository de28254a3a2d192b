"""Local launcher: all workers on this host under torchrun, one run record per run.

torchrun's standalone rendezvous picks a free port; OMP_NUM_THREADS is set so workers share
the cores instead of fighting over them. The launcher keeps a watchdog, because a job must end
in bounded time whatever a worker does:
  * a worker that raises leaves `error-rank<R>.json`; its peers fail their next collective
    within `comm_timeout_s`; after a short grace period everything still alive is killed;
  * a worker that hangs stops its peers' collectives, which time out the same way;
  * no rank reporting any progress for `stall_timeout_s` ends the job as well;
  * Ctrl-C, SIGTERM or SIGHUP (`timeout`, a CI cancel, a dropped ssh session, Slurm) stops
    every worker and records the run as interrupted or terminated; whatever else ends the
    launcher, the workers are stopped on the way out (try/finally), and each worker also dies
    with its torchrun (PR_SET_PDEATHSIG), should the launcher be SIGKILLed.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import pids

GRACE_S = 5.0  # after the first worker error, how long the others get to exit by themselves
POLL_S = 0.2
SYMPTOMS = ("Connection closed by peer", "Connection reset", "Timed out", "timed out", "no pull from server")


def torchrun(nproc: int, target: list[str], rendezvous: list[str] = ("--standalone",)) -> list[str]:
    """torchrun starting `nproc` processes of `target` on this host: no restarts, and a worker's
    exit noticed within half a second."""
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous, f"--nproc-per-node={nproc}",
            "--max-restarts=0", "--monitor-interval=0.5", *target]


def command(cfg, run_dir: Path, env: dict | None = None) -> list[str]:
    from . import worker_args

    return torchrun(cfg.workers + cfg.servers, worker_args(run_dir))


def start(cfg, run_dir: Path, env: dict, cmd: list[str] | None = None) -> tuple[int, str | None]:
    """Run the workers (torchrun, or another launcher's `cmd`) under the watchdog; return
    (exit code, failure reason or None). Whatever ends the launch (an interrupt, a termination
    signal, an error in the launcher itself) stops every worker first; interrupts and errors
    then propagate, for the caller to record."""
    proc = subprocess.Popen(cmd or command(cfg, run_dir), env=env, start_new_session=True)
    stall_s = float(cfg.launcher.get("stall_timeout_s", 600))
    first_error_at = None
    last_progress = time.monotonic()
    alive: list[int] = []  # ranks still running when a peer's error made the launcher end the job
    try:
        while proc.poll() is None:
            time.sleep(POLL_S)
            if any(run_dir.glob("error-rank*.json")):
                first_error_at = first_error_at or time.monotonic()
                if time.monotonic() - first_error_at > GRACE_S:
                    alive = [e.rank for e in pids.own(run_dir)]
                    kill_all(proc, run_dir)
                    break
            beat = heartbeat(run_dir)
            if beat is not None:
                last_progress = max(last_progress, beat)
            if time.monotonic() - last_progress > stall_s:
                kill_all(proc, run_dir)
                return 1, f"no progress from any worker for {stall_s:.0f} s (launcher.stall_timeout_s); job killed"
        rc = proc.wait()
    finally:
        # torchrun gone or not, no rank of this host outlives the launch (a rank whose torchrun
        # died is also killed by the kernel: see pids.die_with_parent)
        with deferred_signals():
            kill_all(proc, run_dir)
    return rc, None if rc == 0 else failure_reason(run_dir, cfg.workers, rc, cfg.servers, alive)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (timeout, a CI cancel, a dropped ssh session, Slurm before its kill),
    raised where the launcher is, so it is handled as Ctrl-C is: workers stopped, run recorded."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def terminations():
    """Within the block, SIGTERM and SIGHUP raise `Terminated` and Ctrl-C KeyboardInterrupt, once:
    a second signal while the launcher cleans up is ignored, so the cleanup and the record finish
    (within kill_all's bounded grace)."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred_signals():
    """Hold SIGINT/SIGTERM/SIGHUP back during the block (killing workers, writing the record),
    delivering any that came once it ends."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (AttributeError, OSError, ValueError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def signal_of(exc: KeyboardInterrupt) -> signal.Signals:
    """The signal behind a `terminations()` exception: SIGTERM or SIGHUP (`Terminated`), else Ctrl-C's."""
    return signal.Signals(exc.signum) if isinstance(exc, Terminated) else signal.SIGINT


def interruption(exc: BaseException) -> tuple[int, str]:
    """(exit code, reason) for a launch ended by `exc`: 128 + the signal for a signal, as a shell reports it."""
    if isinstance(exc, Terminated):
        return 128 + signal_of(exc), f"terminated by {signal_of(exc).name}; every worker was stopped"
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal_of(exc), "interrupted (Ctrl-C); every worker was stopped"
    return 1, f"the launcher failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}; every worker was stopped"


def heartbeat(run_dir: Path) -> float | None:
    """The launcher-side monotonic time of the latest progress, from the worker pid files'
    and progress file's modification times."""
    latest = None
    try:
        for p in run_dir.iterdir():
            try:
                mtime = p.stat().st_mtime
            except OSError:  # gone between the listing and the stat (a temporary file renamed)
                continue
            latest = mtime if latest is None else max(latest, mtime)
    except OSError:  # the directory itself is gone or unreadable: no sign of life
        return None
    if latest is None:
        return None
    return time.monotonic() - max(0.0, time.time() - latest)


def kill_all(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGTERM torchrun's process group and every rank this host started, then SIGKILL what is
    left. Ranks are found by their pid files, and only this host's, still the same processes
    (`pids.own`): a pid from another node or a reused pid is never signalled."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is None:  # once reaped, its pid (the group's id) may be someone else's
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for e in pids.own(run_dir):
            pids.send(e, sig)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        if wait_gone(run_dir, GRACE_S):
            return


def wait_gone(run_dir: Path, wait_s: float) -> bool:
    """True once no rank of this host runs, waiting up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while pids.own(run_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S / 4)
    return True


def worker_pids(run_dir: Path) -> list[int]:
    """The pids of the ranks this host started that still run."""
    return [e.pid for e in pids.own(run_dir)]


def _names(ranks: list[int], workers: int) -> str:
    return ", ".join(str(r) if r < workers else f"{r} (server {r - workers})" for r in ranks)


def failure_reason(run_dir: Path, workers: int, rc: int, servers: int = 0, alive=()) -> str:
    """One line: the first error, and which ranks left no report: gone before the end (killed or
    crashed), or still running, silent, when the launcher ended the job (`alive`: hung or
    stopped). Ranks from `workers` on are parameter servers."""
    errors = []
    for f in run_dir.glob("error-rank*.json"):
        try:
            errors.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    # A peer's death shows up everywhere else as a closed connection or a timeout: report the
    # error that is not such a symptom first.
    errors.sort(key=lambda e: (any(m in e["message"] for m in SYMPTOMS), e["time"]))
    reported = {e["rank"] for e in errors}
    started = {e.rank for e in pids.entries(run_dir)}
    silent = sorted(r for r in range(workers + servers) if r not in reported)
    parts = []
    if silent:
        never = [r for r in silent if r not in started]
        hung = [r for r in silent if r in started and r in alive]
        died = [r for r in silent if r in started and r not in alive]
        if died:
            parts.append(f"rank(s) {_names(died, workers)} died without a report (killed or crashed)")
        if hung:
            parts.append(f"rank(s) {_names(hung, workers)} still ran without a report when the job was ended "
                         f"(hung or stopped)")
        if never:
            parts.append(f"rank(s) {_names(never, workers)} never started")
    if errors:
        e = errors[0]
        parts.append(f"rank {_names([e['rank']], workers)}: {e['type']}: {e['message']}")
    stacks = sorted(f.name for f in run_dir.glob("stacks-rank*.txt") if f.stat().st_size)
    if stacks:
        parts.append(f"where terminated ranks waited: {run_dir}/{{{','.join(stacks)}}}")
    return "; ".join(parts) or f"the launcher exited with code {rc}"
