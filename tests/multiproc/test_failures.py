"""Bad input fails before anything starts; a dead, hung or interrupted run ends in bounded time
with a failed record, and earlier records stay intact."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import REPO, ddlbench, records, two_ranks

pytestmark = pytest.mark.multiproc


@pytest.mark.parametrize(
    "args, words",
    [
        (["method=nope"], ["'nope'", "bsp-a2a"]),
        (["model=nosuch"], ["'nosuch'", "resnet50"]),
        (["nosuchkey=1"], ["'nosuchkey'", "workers"]),
        (["workers=0"], ["workers=0"]),
        (["workers=999"], ["workers=999", "accepted: 1.."]),
    ],
)
def test_bad_input_is_one_line_nonzero_and_appends_nothing(tmp_path, args, words):
    proc = ddlbench(*args, results=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddlbench: error:")
    for w in words:
        assert w in lines[0]
    assert not records(tmp_path)


LATE_S, COMM_S = 6.0, 1.5  # rank 1 reaches the rendezvous this late; the communication bound is shorter

LATE_RANK = textwrap.dedent(f"""
    import json, os, sys, time, torch, torch.distributed as dist
    from ddlbench.engines import init_process_group
    rank = int(sys.argv[1])
    if rank == 1:
        time.sleep({LATE_S})  # a rank still importing torch on a busy machine
    init_process_group("gloo", rank, 2, startup_timeout_s=120, comm_timeout_s={COMM_S},
                       init_method="tcp://127.0.0.1:" + sys.argv[2])
    if rank == 1:
        time.sleep(4 * {COMM_S})  # alive, sending nothing: rank 0's receive must time out
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.recv(torch.empty(1), src=1)
        error = None
    except RuntimeError as exc:
        error = str(exc)
    print(json.dumps({{"waited_s": time.monotonic() - t0, "error": error}}), flush=True)
    os._exit(0)
""")


def test_a_late_rank_meets_the_group_under_the_startup_bound_then_waits_fail_under_the_communication_one():
    # CI once failed a PS run with comm_timeout_s=8: one rank reached init_process_group more than
    # 8 s after the other (imports on a loaded 2-core box), and the rendezvous ran under that bound
    out = json.loads(two_ranks(LATE_RANK, timeout_s=120)[0].strip().splitlines()[-1])
    assert out["error"] is not None and "timed out" in out["error"].lower(), out
    assert COMM_S * 0.9 <= out["waited_s"] < LATE_S, out


def start_long_run(results: Path, *extra: str, method: str = "wfbp-a2a") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ddlbench", f"method={method}", "model=tiny-resnet", "workers=2",
           "profile.warmup_iters=0", "profile.measured_iters=100000", "profile.repeats=1",
           f"results_dir={results}", *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def worker_pid(results: Path, rank: int, timeout: float = 90) -> int:
    """The pid of a rank once it is iterating: the driver touches the pid file at most once a
    second while iterating, so a changed modification time means the measured loop runs."""
    deadline = time.monotonic() + timeout
    first_mtime = None
    while time.monotonic() < deadline:
        files = list(results.glob(f"runs/*/pid-*rank{rank}"))
        if files:
            mtime = files[0].stat().st_mtime_ns
            first_mtime = first_mtime or mtime
            if mtime != first_mtime:
                return pid_of(results, rank)
        time.sleep(0.1)
    raise AssertionError("the workers never started iterating")


def pid_of(results: Path, rank: int) -> int:
    """The pid a rank wrote in its pid file (`pid-<host>-rank<R>`: pid, start time)."""
    return int(next(results.glob(f"runs/*/pid-*rank{rank}")).read_text().split()[0])


def seed_earlier_record(results: Path) -> str:
    results.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"method": "bsp-a2a", "status": "ok", "note": "an earlier run"})
    (results / "runs.jsonl").write_text(line + "\n")
    return line


def finish_within(proc: subprocess.Popen, seconds: float) -> float:
    t0 = time.monotonic()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the job was still running {seconds} s later")
    return time.monotonic() - t0


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def no_worker_left(results: Path, wait_s: float = 3.0) -> bool:
    """True once no worker process is running (an unreaped zombie counts as gone)."""
    pids = [int(f.read_text().split()[0]) for f in results.glob("runs/*/pid-*rank*")]
    deadline = time.monotonic() + wait_s
    while True:
        alive = [p for p in pids if _running(p)]
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.1)


def one_failed_record(results: Path, fault: str, elapsed_s: float) -> dict:
    """The run's one failed record, checked, with the fault's time printed for the fault table
    (`pytest -s`): from the fault to the launcher's exit."""
    failed = [r for r in records(results) if r.get("status") == "failed"]
    assert len(failed) == 1, failed
    print(f"\n[fault table] {fault}: ended in {elapsed_s:.1f} s, one failed record", flush=True)
    return failed[0]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_a_killed_worker_ends_the_job_with_a_failed_record(tmp_path):
    earlier = seed_earlier_record(tmp_path)
    proc = start_long_run(tmp_path)
    os.kill(worker_pid(tmp_path, 1), signal.SIGKILL)
    elapsed = finish_within(proc, 60)
    assert proc.returncode != 0
    got = records(tmp_path)
    assert got[0] == json.loads(earlier)  # an earlier version's runs.jsonl still reads, first
    rec = got[-1]
    # rank 1 among the dead: torchrun may stop rank 0 before it reports its peer's death
    assert rec["status"] == "failed" and re.search(r"rank\(s\) (\d+, )*1(, \d+)* died", rec["error"]), rec["error"]
    one_failed_record(tmp_path, "worker killed", elapsed)
    assert no_worker_left(tmp_path)


def test_a_hung_worker_ends_the_job_within_60_s(tmp_path):
    earlier = seed_earlier_record(tmp_path)
    proc = start_long_run(tmp_path)  # default comm_timeout_s (30 s)
    hung = worker_pid(tmp_path, 1)
    os.kill(hung, signal.SIGSTOP)
    try:
        elapsed = finish_within(proc, 60)
    finally:
        kill_quietly(hung)
    recs = records(tmp_path)
    assert json.dumps(recs[0]) == earlier and recs[-1]["status"] == "failed"
    assert "rank 0" in recs[-1]["error"], recs[-1]["error"]  # rank 0's collective timed out
    one_failed_record(tmp_path, "worker hung", elapsed)
    assert elapsed < 60
    assert no_worker_left(tmp_path)


def test_ctrl_c_stops_every_worker_and_records_the_interruption(tmp_path):
    proc = start_long_run(tmp_path)
    worker_pid(tmp_path, 0)
    proc.send_signal(signal.SIGINT)
    finish_within(proc, 30)
    rec = records(tmp_path)[-1]
    assert rec["status"] == "failed" and "interrupted" in rec["error"]
    assert no_worker_left(tmp_path)


@pytest.mark.parametrize("method", ["bytescheduler-ps", "wfbp-ps"])  # each worker pushes; one machine's leader does
@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_dead_or_hung_server_ends_the_job_within_60_s(tmp_path, how, method):
    # a shorter collective timeout than the default's (whose 60 s bound the hung worker proves):
    # the job must end within it plus the launcher's grace, not just within 60 s
    proc = start_long_run(tmp_path, "comm_timeout_s=8", method=method)
    worker_pid(tmp_path, 0)  # the workers iterate, so the server serves
    server = pid_of(tmp_path, 2)  # rank 2: the server
    os.kill(server, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    try:
        elapsed = finish_within(proc, 60)
    finally:
        kill_quietly(server)
    rec = records(tmp_path)[-1]
    assert rec["status"] == "failed" and rec["servers"] == 1
    if how == "killed":
        assert "2 (server 0) died" in rec["error"]
    one_failed_record(tmp_path, f"server {how}", elapsed)
    assert elapsed < 8 + 20
    assert no_worker_left(tmp_path)
