"""Local launcher: all workers on this host under torchrun, one run record per run.

torchrun's standalone rendezvous picks a free port; OMP_NUM_THREADS is set so workers share
the cores instead of fighting over them. The launcher keeps a watchdog, because a job must end
in bounded time whatever a worker does:
  * a worker that raises leaves `error-rank<R>.json`; its peers fail their next collective
    within `comm_timeout_s`; after a short grace period everything still alive is killed;
  * a worker that hangs stops its peers' collectives, which time out the same way;
  * no rank reporting any progress for `stall_timeout_s` ends the job as well;
  * Ctrl-C stops every worker and records the run as interrupted.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    (exit code, failure reason or None)."""
    proc = subprocess.Popen(cmd or command(cfg, run_dir), env=env, start_new_session=True)
    stall_s = float(cfg.launcher.get("stall_timeout_s", 600))
    first_error_at = None
    last_progress = time.monotonic()
    try:
        while proc.poll() is None:
            time.sleep(POLL_S)
            if any(run_dir.glob("error-rank*.json")):
                first_error_at = first_error_at or time.monotonic()
                if time.monotonic() - first_error_at > GRACE_S:
                    kill_all(proc, run_dir)
                    break
            beat = heartbeat(run_dir)
            if beat is not None:
                last_progress = max(last_progress, beat)
            if time.monotonic() - last_progress > stall_s:
                kill_all(proc, run_dir)
                return 1, f"no progress from any worker for {stall_s:.0f} s (launcher.stall_timeout_s); job killed"
    except KeyboardInterrupt:
        kill_all(proc, run_dir)
        return 130, "interrupted (Ctrl-C); every worker was stopped"
    rc = proc.wait()
    return rc, None if rc == 0 else failure_reason(run_dir, cfg.workers, rc, cfg.servers)


def heartbeat(run_dir: Path) -> float | None:
    """The launcher-side monotonic time of the latest progress, from the worker pid files'
    and progress file's modification times."""
    try:
        latest = max(p.stat().st_mtime for p in run_dir.iterdir())
    except ValueError:
        return None
    return time.monotonic() - max(0.0, time.time() - latest)


def kill_all(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGTERM torchrun's process group and every worker, then SIGKILL what is left."""
    pids = [proc.pid] + worker_pids(run_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                if pid == proc.pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM and not any(_alive(p) for p in pids[1:]):
            return


def worker_pids(run_dir: Path) -> list[int]:
    out = []
    for f in run_dir.glob("pid-rank*"):
        try:
            out.append(int(f.read_text()))
        except ValueError:
            pass
    return out


def _names(ranks: list[int], workers: int) -> str:
    return ", ".join(str(r) if r < workers else f"{r} (server {r - workers})" for r in ranks)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def failure_reason(run_dir: Path, workers: int, rc: int, servers: int = 0) -> str:
    """One line: the first error, and which ranks left no report (killed or crashed). Ranks
    from `workers` on are parameter servers."""
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
    started = {int(f.name.removeprefix("pid-rank")) for f in run_dir.glob("pid-rank*")}
    silent = sorted(r for r in range(workers + servers) if r not in reported)
    parts = []
    if silent:
        never = [r for r in silent if r not in started]
        died = [r for r in silent if r in started]
        if died:
            parts.append(f"rank(s) {_names(died, workers)} died without a report (killed or crashed)")
        if never:
            parts.append(f"rank(s) {_names(never, workers)} never started")
    if errors:
        e = errors[0]
        parts.append(f"rank {_names([e['rank']], workers)}: {e['type']}: {e['message']}")
    return "; ".join(parts) or f"the launcher exited with code {rc}"
