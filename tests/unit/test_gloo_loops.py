"""Where ranks share this machine's cores (ddlbench/hostcpu.py says why): Gloo's socket loop
threads under SCHED_IDLE, and each rank bound to its own cores; which threads and cores, when,
and what the launchers ask for."""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from ddlbench import config, hostcpu

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="thread names and SCHED_IDLE are Linux's")


def named_thread(name: str):
    """A live thread the kernel knows as `name`; returns (its tid, an event that ends it)."""
    ready, stop, tid = threading.Event(), threading.Event(), []

    def body():
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)  # PR_SET_NAME
        tid.append(threading.get_native_id())
        ready.set()
        stop.wait(30)

    threading.Thread(target=body, daemon=True).start()
    ready.wait(10)
    return tid[0], stop


def test_only_gloos_loop_threads_go_under_sched_idle():
    loop, stop_loop = named_thread(hostcpu.GLOO_LOOP_THREAD)
    other, stop_other = named_thread("gloo_tcp_lo0p")
    try:
        assert hostcpu.settle_gloo_loops({}) is None  # asked for nothing: nothing changes
        assert os.sched_getscheduler(loop) == os.SCHED_OTHER
        got = hostcpu.settle_gloo_loops({hostcpu.GLOO_LOOP_POLICY_ENV: "idle"})
        assert got == {"policy": "idle", "threads": 1}
        assert os.sched_getscheduler(loop) == os.SCHED_IDLE
        assert os.sched_getscheduler(other) == os.SCHED_OTHER
        assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # the caller too
    finally:
        stop_loop.set()
        stop_other.set()


def test_gloos_own_loop_threads_are_found_by_that_name(tmp_path):
    """A group's device starts its loop thread: if a torch release renamed it, this fails and the
    launchers' setting would silently do nothing."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        group = dist.new_group(backend="gloo")
        # at least one (a group may share a device, and its loop, with one made before it in this
        # process: under pytest-xdist a worker that had run other Gloo tests showed one for two
        # groups). A loop thread names itself once it runs: listed at once, on a loaded machine it
        # was still 'python' (the fresh-clone CI at 97b1cbe), so the names are read until it has
        # (5 s at most).
        deadline = time.monotonic() + 5.0
        while True:
            names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
            if hostcpu.GLOO_LOOP_THREAD in names or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert names.count(hostcpu.GLOO_LOOP_THREAD) >= 1, names
        got = hostcpu.settle_gloo_loops({hostcpu.GLOO_LOOP_POLICY_ENV: "idle"})
        assert got["policy"] == "idle" and got["threads"] >= 1
        # every loop thread still alive is under SCHED_IDLE (one of a group an earlier test in this
        # process destroyed may end between two listings)
        for t in os.listdir("/proc/self/task"):
            try:
                if open(f"/proc/self/task/{t}/comm").read().strip() == hostcpu.GLOO_LOOP_THREAD:
                    assert os.sched_getscheduler(int(t)) == os.SCHED_IDLE
            except (FileNotFoundError, ProcessLookupError):
                continue
        dist.destroy_process_group(group)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("value", ["fast", "19", "IDLE"])
def test_a_bad_policy_in_the_environment_is_a_one_line_error(value):
    with pytest.raises(ValueError) as err:
        hostcpu.settle_gloo_loops({hostcpu.GLOO_LOOP_POLICY_ENV: value})
    assert str(err.value) == f"{hostcpu.GLOO_LOOP_POLICY_ENV}={value!r} is invalid; accepted: idle, none"


def test_the_launchers_on_shared_cores_ask_for_it_and_slurm_does_not(monkeypatch):
    monkeypatch.delenv(hostcpu.PIN_RANKS_ENV, raising=False)
    from ddlbench.launch import mpirun, run_env

    monkeypatch.delenv(hostcpu.GLOO_LOOP_POLICY_ENV, raising=False)
    for launcher in ("local", "emulated"):
        cfg = config.resolve(config._compose(["workers=2", f"launcher={launcher}"]))
        assert run_env(cfg)[hostcpu.GLOO_LOOP_POLICY_ENV] == "idle"
    off = config.resolve(config._compose(["workers=2", "launcher.gloo_loop_policy=null"]))
    assert hostcpu.GLOO_LOOP_POLICY_ENV not in run_env(off)
    slurm = config.resolve(config._compose(["workers=2", "launcher=slurm", "launcher.partition=p"]))
    assert hostcpu.GLOO_LOOP_POLICY_ENV not in run_env(slurm, local_procs=1)
    # Open MPI passes only the variables it is told to: the setting reaches the emulated hosts' ranks
    cfg = config.resolve(config._compose(["workers=2", "launcher=emulated", "launcher.via=mpirun"]))
    monkeypatch.setattr(mpirun, "flavour", lambda exe: "openmpi")
    monkeypatch.setattr(mpirun, "executable", lambda cfg: "mpiexec")
    env = run_env(cfg)
    cmd = mpirun.command(cfg, Path("/tmp/x"), env, hosts="h0:1,h1:1")
    for key in (hostcpu.GLOO_LOOP_POLICY_ENV, hostcpu.PIN_RANKS_ENV):
        assert ["-x", key] == cmd[cmd.index(key) - 1:][:2]


def test_a_bad_launcher_setting_is_a_one_line_error_before_anything_runs():
    with pytest.raises(config.ConfigError) as err:
        config.resolve(config._compose(["workers=2", "launcher.gloo_loop_policy=low"]))
    assert str(err.value) == "launcher.gloo_loop_policy='low' is invalid; accepted: idle, null (left alone)"


# -- each rank bound to its own cores (hostcpu.pin_rank) ------------------------------------------
@pytest.mark.parametrize("rank, threads, usable, cores", [
    (0, 1, [0, 1], [0]), (1, 1, [0, 1], [1]),
    (2, 1, [0, 1], [0]), (3, 1, [0, 1], [1]),      # 4 ranks on 2 cores: two on each
    (1, 4, list(range(8)), [4, 5, 6, 7]),           # 2 workers of 4 threads on 8 cores
    (1, 3, [0, 1, 2, 3], [0, 1, 3]),                # wrapping: 3, 0, 1
    (0, 5, [2, 5], [2, 5]),                         # more threads than cores: all of them
    (1, 1, [2, 5, 7], [5]),                         # the cores it may use, not 0..n-1
])
def test_each_rank_gets_its_threads_cores_in_turn(rank, threads, usable, cores):
    assert hostcpu.rank_cores(rank, threads, usable) == cores


def test_a_pinned_process_and_the_threads_it_starts_run_on_its_cores_only():
    """Run in a child: binding is for the process's life, and pytest's own must stay free."""
    import subprocess

    usable = sorted(os.sched_getaffinity(0))
    code = ("import os, sys, threading; from ddlbench import hostcpu; got = hostcpu.pin_rank(1, int(sys.argv[1])); out = [];"
            "t = threading.Thread(target=lambda: out.append(sorted(os.sched_getaffinity(0)))); t.start(); t.join();"
            "print(got, sorted(os.sched_getaffinity(0)), out[0])")
    def child(ranks: int, pin: str) -> str:
        env = dict(os.environ, **{hostcpu.PIN_RANKS_ENV: pin, "OMP_NUM_THREADS": "1"})
        return subprocess.run([sys.executable, "-c", code, str(ranks)], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    want = [usable[1 % len(usable)]]
    assert child(2 if len(usable) >= 2 else 1, "1") == f"{want} {want} {want}"  # what it said, the process, a thread
    assert child(2, "0") == f"None {usable} {usable}"
    assert child(len(usable) + 1, "1") == f"None {usable} {usable}"  # more ranks than cores: left to the scheduler
    with pytest.raises(ValueError, match=f"{hostcpu.PIN_RANKS_ENV}='yes' is invalid; accepted: 1, 0"):
        hostcpu.pin_rank(0, 2, {hostcpu.PIN_RANKS_ENV: "yes"})


def test_the_launchers_on_shared_cores_pin_their_ranks_and_slurm_does_not(monkeypatch):
    from ddlbench.launch import run_env

    monkeypatch.delenv(hostcpu.PIN_RANKS_ENV, raising=False)
    for launcher in ("local", "emulated"):
        assert run_env(config.resolve(config._compose(["workers=2", f"launcher={launcher}"])))[hostcpu.PIN_RANKS_ENV] == "1"
    off = config.resolve(config._compose(["workers=2", "launcher.pin_ranks=false"]))
    assert hostcpu.PIN_RANKS_ENV not in run_env(off)
    slurm = config.resolve(config._compose(["workers=2", "launcher=slurm", "launcher.partition=p"]))
    assert hostcpu.PIN_RANKS_ENV not in run_env(slurm, local_procs=1)
    with pytest.raises(config.ConfigError, match="launcher.pin_ranks='often' is invalid; accepted: true, false"):
        config.resolve(config._compose(["workers=2", "launcher.pin_ranks=often"]))
