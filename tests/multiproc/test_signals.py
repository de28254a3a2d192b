"""Launchers never orphan a job: a launcher ended by SIGTERM or SIGHUP (timeout, a CI cancel, a
dropped ssh session, Slurm before its kill) stops every worker and records one failed run, and a
worker dies with its torchrun even when nobody is left to stop it."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, records
from test_failures import finish_within, no_worker_left, one_failed_record, start_long_run, worker_pid

pytestmark = pytest.mark.multiproc


def processes_of(path: Path) -> list[int]:
    """Processes whose command line names `path` (torchrun and the ranks name their run directory)."""
    out = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.fixture
def no_leftovers(tmp_path):
    """Whatever a failing test leaves running is killed, so it cannot slow the next tests."""
    yield
    for pid in processes_of(tmp_path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_launcher_stops_every_worker_and_records_one_failure(tmp_path, no_leftovers, sig):
    proc = start_long_run(tmp_path)
    worker_pid(tmp_path, 1)  # mid-run: the workers iterate
    proc.send_signal(sig)
    elapsed = finish_within(proc, 60)
    assert proc.returncode == 128 + sig  # (never read proc.stdout here: orphans would hold it open)
    rec = one_failed_record(tmp_path, f"launcher {sig.name}", elapsed)
    assert len(records(tmp_path)) == 1
    assert rec["error"] == f"terminated by {sig.name}; every worker was stopped"
    assert no_worker_left(tmp_path)
    assert processes_of(tmp_path) == []  # torchrun too
    assert elapsed < 60


def test_workers_die_with_their_torchrun(tmp_path, no_leftovers):
    """torchrun SIGKILLed while its launcher cannot act (stopped): the kernel ends the ranks
    (PR_SET_PDEATHSIG); then the launcher, resumed, records the failure."""
    proc = start_long_run(tmp_path)
    worker = worker_pid(tmp_path, 1)
    torchrun = parent_of(worker)
    assert parent_of(torchrun) == proc.pid
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        os.kill(torchrun, signal.SIGKILL)
        assert no_worker_left(tmp_path, wait_s=10), "a rank outlived its torchrun"
        print(f"\n[fault table] torchrun SIGKILLed: its ranks gone in {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    elapsed = finish_within(proc, 60)
    assert proc.returncode != 0
    assert "died without a report" in one_failed_record(tmp_path, "torchrun killed", elapsed)["error"]
    assert processes_of(tmp_path) == []


def test_a_terminated_commbench_stops_its_ranks_and_keeps_what_it_measured(tmp_path, no_leftovers):
    """SIGTERM (a CI cancel, timeout) used to kill commbench on the spot: its torchrun and ranks,
    in sessions of their own, went on measuring, an emulated cluster's namespaces stayed up, and
    the sizes the job had measured were lost with it."""
    tmp = tmp_path / "tmp"  # the job's spec and rows: the ranks' command lines name tmp_path
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "ddlbench.commbench", "--results", str(tmp_path), "--network-name",
                             "none", "--backends", "gloo", "--workers", "2", "--mode", "sizes", "--dtypes", "fp32",
                             "--max-bytes", "1GiB", "--iters", "20"], cwd=REPO, env=dict(os.environ, TMPDIR=str(tmp)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, seen = time.monotonic() + 120, ""
    while "[commbench gloo x2] all_reduce fp32 64 B" not in seen:  # its progress: a few sizes measured
        assert time.monotonic() < deadline and proc.poll() is None, seen
        if select.select([proc.stdout], [], [], 1.0)[0]:
            seen += proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    finish_within(proc, 60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in proc.stderr.read()
    assert processes_of(tmp_path) == []  # torchrun and both ranks
    sizes = {r["bytes"] for r in records(tmp_path)}
    assert {4, 16, 64} <= sizes and 1 << 30 not in sizes


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead orphan waits to be reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_profile_measured_beside_neighbours_takes_them_along_when_killed(tmp_path):
    """A profile measured beside W-1 neighbours (make predict PROFILE_FROM=measured, the benches'
    profiles): the measurer killed by SIGTERM never told them to stop, and they trained in a loop,
    a core each, for good."""
    script = ("import multiprocessing, time\nfrom ddlbench.predict import profile\n"
              "with profile._neighbours('tiny-resnet', 2, 1, 1):\n"
              "    print(*[p.pid for p in multiprocessing.active_children()], flush=True)\n"
              "    time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    deadline, line = time.monotonic() + 120, ""
    while not line:
        assert time.monotonic() < deadline and proc.poll() is None, "the neighbour never started"
        if select.select([proc.stdout], [], [], 1.0)[0]:
            line = proc.stdout.readline()
    pids = [int(p) for p in line.split()]
    assert pids and all(running(p) for p in pids)
    proc.send_signal(signal.SIGTERM)
    finish_within(proc, 10)
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if running(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left
