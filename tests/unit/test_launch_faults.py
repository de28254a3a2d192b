"""Launcher faults without a job: pid files that name other hosts or reused pids, the watchdog's
race with vanishing files, a requeued Slurm attempt's directory, Horovod's waiting nodes, and
commbench's timeout (its end-to-end tests are in tests/multiproc/test_signals.py)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from ddlbench.launch import local, pids, slurm


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def running(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def write_pid_file(run_dir: Path, rank: int, pid: int, start, host: str | None = None) -> None:
    pids.path(run_dir, rank, host).write_text(f"{pid} {start}\n")


def test_kill_all_signals_only_this_hosts_pids_whose_start_time_matches(tmp_path):
    torchrun, own, stranger_elsewhere, stranger_reused = sleeper(), sleeper(), sleeper(), sleeper()
    try:
        write_pid_file(tmp_path, 0, own.pid, pids.start_time(own.pid))
        # a rank of another node: the same pid number there is not this host's process
        write_pid_file(tmp_path, 1, stranger_elsewhere.pid, pids.start_time(stranger_elsewhere.pid),
                       host=socket.gethostname() + "-other")
        # a pid reused since the rank wrote it: the live process started at another time
        write_pid_file(tmp_path, 2, stranger_reused.pid, pids.start_time(stranger_reused.pid) - 1)
        t0 = time.monotonic()
        local.kill_all(torchrun, tmp_path)
        print(f"\nkill_all took {time.monotonic() - t0:.2f} s")
        own.wait(timeout=10)
        assert not running(torchrun) and not running(own)
        assert running(stranger_elsewhere) and running(stranger_reused)
        assert local.worker_pids(tmp_path) == []  # the dead rank is not listed; the strangers never are
    finally:
        for p in (torchrun, own, stranger_elsewhere, stranger_reused):
            p.kill()
            p.wait()


def test_pid_files_name_host_and_rank_and_hold_the_start_time(tmp_path):
    p = pids.write(tmp_path, 7)
    assert p.name == f"pid-{socket.gethostname()}-rank7"
    (e,) = pids.entries(tmp_path)
    assert (e.host, e.rank, e.pid, e.start) == (socket.gethostname(), 7, os.getpid(), pids.start_time(os.getpid()))
    assert pids.own(tmp_path) == [e]
    (tmp_path / "pid-a-b-rank3").write_text("12")  # a host name with dashes; a file half written
    assert [x.rank for x in pids.entries(tmp_path)] == [7]
    assert local.failure_reason(tmp_path, 8, 1) == ("rank(s) 7 died without a report (killed or crashed); "
                                                     "rank(s) 0, 1, 2, 3, 4, 5, 6 never started")
    # a rank still running, silent, when a peer's error ended the job is not called dead
    assert local.failure_reason(tmp_path, 8, 1, alive=[7]) == (
        "rank(s) 7 still ran without a report when the job was ended (hung or stopped); "
        "rank(s) 0, 1, 2, 3, 4, 5, 6 never started")


def test_heartbeat_survives_a_file_vanishing_between_listing_and_stat(tmp_path, monkeypatch):
    pids.write(tmp_path, 0)
    (tmp_path / ".result.json.tmp").write_text("{}")
    listing = Path.iterdir

    def racing(self):
        entries = list(listing(self))
        (tmp_path / ".result.json.tmp").unlink()  # renamed away after the listing, before the stat
        return iter(entries)

    monkeypatch.setattr(Path, "iterdir", racing)
    beat = local.heartbeat(tmp_path)
    assert beat is not None and abs(beat - time.monotonic()) < 5
    monkeypatch.undo()
    assert local.heartbeat(tmp_path / "gone") is None


def slurm_cfg(tmp_path, *overrides):
    from ddlbench import config

    return config.resolve(config._compose(["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true",
                                           "device=cpu", "model=tiny-resnet", "workers=2",
                                           f"results_dir={tmp_path / 'results'}", *overrides]))


@pytest.mark.parametrize("mode", ["process", "launch"])
def test_a_requeued_slurm_attempt_does_not_see_the_last_attempts_files(tmp_path, monkeypatch, mode):
    """node_main on attempt 1 (SLURM_RESTART_COUNT=1) after attempt 0 left an error file, pid
    files and no result: its launches start in fresh directories with the run's config."""
    import submitit

    from ddlbench import launch

    cfg = slurm_cfg(tmp_path, f"profile.repeat_mode={mode}", "profile.repeats=2")
    run_dir = tmp_path / "run"
    launch._prepare(cfg, run_dir)
    for d in launch.launch_dirs(cfg, run_dir):  # what attempt 0 left behind
        (d / "error-rank1.json").write_text('{"rank": 1, "time": 0, "type": "X", "message": "old"}')
        write_pid_file(d, 0, 1, 1)
    seen = []

    def start(cfg_, launch_dir, env, cmd):
        seen.append(launch_dir)
        assert (launch_dir / "config.yaml").read_text() == (launch.launch_dirs(cfg, run_dir)[len(seen) - 1]
                                                           / "config.yaml").read_text()
        assert not list(launch_dir.glob("error-rank*")) and not pids.entries(launch_dir)
        return 0, None

    monkeypatch.setattr(submitit, "JobEnvironment", lambda: types.SimpleNamespace(
        node=0, job_id="4242", hostnames=[socket.gethostname()]))
    monkeypatch.setattr(local, "start", start)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with pytest.raises(RuntimeError, match="no result was written"):  # the stand-in ranks wrote none
        slurm.node_main(str(run_dir), launch.base_record(cfg))
    assert len(seen) == len(launch.launch_dirs(cfg, run_dir)) and all(d.is_relative_to(run_dir / "attempt-1")
                                                                       for d in seen)
    from helpers import records

    (rec,) = records(cfg.results_dir)
    assert rec["status"] == "failed" and rec["slurm_attempt"] == 1 and "old" not in rec["error"]


def test_horovods_waiting_node_gives_up_after_the_stall_bound(tmp_path):
    """A node other than 0 waits for node 0's horovodrun; with no rank progressing it gives up
    after stall_timeout_s (it used to wait forever), and stops this host's ranks."""
    rank = sleeper()
    try:
        write_pid_file(tmp_path, 3, rank.pid, pids.start_time(rank.pid))
        os.utime(pids.path(tmp_path, 3), (time.time() - 60, time.time() - 60))  # last progress long ago
        out = []
        t = threading.Thread(target=lambda: out.append(slurm.wait_for_node0(tmp_path, 1.0)), daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(30)
        elapsed = time.monotonic() - t0
        print(f"\nthe waiting node gave up after {elapsed:.1f} s")
        assert out and out[0][0] == 1 and "no progress" in out[0][1]
        assert rank.wait(timeout=10) is not None
    finally:
        rank.kill()
        rank.wait()


def test_horovods_waiting_node_returns_when_the_launch_ends(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    assert slurm.wait_for_node0(tmp_path, 60.0) == (0, None)
    (tmp_path / "result.json").unlink()
    (tmp_path / "error-rank0.json").write_text("{}")
    assert slurm.wait_for_node0(tmp_path, 60.0)[0] == 1


def test_a_termination_signal_is_raised_once_as_an_interrupt():
    before = signal.getsignal(signal.SIGTERM)
    with local.terminations():
        with pytest.raises(local.Terminated) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        assert isinstance(exc.value, KeyboardInterrupt) and exc.value.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGHUP)  # a second signal during the clean-up is ignored
        time.sleep(0.1)
    assert local.interruption(exc.value) == (143, "terminated by SIGTERM; every worker was stopped")
    assert signal.getsignal(signal.SIGTERM) is before


def test_commbench_timeout_kills_the_launchers_whole_process_group(tmp_path):
    """The job's launcher (here a shell) and its child (a rank) both go at the timeout: killing
    only the launcher, as subprocess.run does, left the rank running."""
    from ddlbench.commbench.cli import run_jobs

    marker = tmp_path / "rank-pid"
    script = f"{sys.executable} -c 'import os, time; open(\"{marker}\", \"w\").write(str(os.getpid())); " \
             f"time.sleep(120)' & wait"
    t0 = time.monotonic()
    assert run_jobs([(["sh", "-c", script], dict(os.environ))], 3.0) is None
    print(f"\ncommbench's timed-out job ended {time.monotonic() - t0:.1f} s after its start (timeout 3 s)")
    wait_gone(int(marker.read_text()), "the job's rank outlived the timeout")
    # across emulated hosts a job is one launcher per host: one that fails ends the others (its
    # peers would wait for it until the timeout), and the failure's exit code is the job's
    marker.unlink()
    t0 = time.monotonic()
    fail_once_up = f"while [ ! -s {marker} ]; do sleep 0.1; done; exit 3"  # once the other's rank runs
    assert run_jobs([(["sh", "-c", script], dict(os.environ)), (["sh", "-c", fail_once_up], dict(os.environ))],
                    60.0) == 3
    assert time.monotonic() - t0 < 10
    wait_gone(int(marker.read_text()), "the surviving host's rank outlived its peer's failure")


def wait_gone(pid: int, why: str) -> None:
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


def test_the_submitter_reports_the_last_attempts_record(tmp_path):
    from ddlbench import launch, record

    cfg = slurm_cfg(tmp_path)
    results = tmp_path / "results"
    run_dir = tmp_path / "run"
    mine = dict(launch.base_record(cfg), run_dir=str(run_dir))
    record.write(results, dict(mine, status="ok", slurm_attempt=1, samples_per_sec=1.0, samples_per_sec_std=0.0))
    record.write(results, dict(mine, status="failed", slurm_attempt=0, error="terminated by SIGTERM"))
    assert slurm._record_unless_written(cfg, mine, run_dir, results, lambda: "never")["slurm_attempt"] == 1


def test_a_rank_terminated_mid_run_leaves_every_threads_stack_and_dies_of_the_signal(tmp_path):
    """A launcher that stops a hung job with SIGTERM learns where each rank waited."""
    import signal
    import subprocess
    import sys

    stacks = tmp_path / "stacks-rank1.txt"
    code = ("import sys, threading, time\n"
            "from pathlib import Path\n"
            "from ddlbench.launch.worker import stacks_on_sigterm\n"
            f"stacks_on_sigterm(Path({str(stacks)!r}))\n"
            "def waiting_for_a_pull(): time.sleep(60)\n"
            "threading.Thread(target=waiting_for_a_pull, daemon=True).start()\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    text = stacks.read_text()
    assert "waiting_for_a_pull" in text and "<module>" in text
    (tmp_path / "stacks-rank0.txt").write_text("")  # a rank that finished or failed on its own: nothing
    assert local.failure_reason(tmp_path, 2, 1).endswith(f"where terminated ranks waited: {tmp_path}/{{stacks-rank1.txt}}")
