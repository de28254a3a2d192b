"""One measurement at a time on this machine's cores (hostcpu.measuring): a run or make commbench
holds a shared lock while it times; a calibration that would time the cores refuses while
another process holds it. Pure: two Python processes, nothing trained or sent."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ddlbench import hostcpu

HOLD = ("import sys; from pathlib import Path; from ddlbench import hostcpu\n"
        "with hostcpu.measuring(Path(sys.argv[1])):\n"
        "    print('held', flush=True); sys.stdin.read()\n")


@pytest.fixture
def holder(tmp_path, monkeypatch):
    """A process of its own holding the lock at a path of this test's, as a run does; closing
    its stdin ends it."""
    path = tmp_path / "measuring.lock"
    monkeypatch.setenv(hostcpu.MEASURING_LOCK_ENV, str(path))  # the profile calibrations' default, as a run's
    monkeypatch.delenv(hostcpu.MEASURING_ENV, raising=False)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield path, proc
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=30)


def test_a_calibration_refuses_while_another_process_measures(holder):
    """Before, a validation beside a bench timed ByteScheduler's machinery at 0.03 ms an iteration
    (6.9 on the idle machine) and slowed the bench's runs by up to 36% (be50)."""
    path, proc = holder
    assert hostcpu.others_measuring(path)
    with pytest.raises(hostcpu.MachineBusy, match=r"a ddlbench run or make commbench is timing on this machine's "
                                                  r"cores now \(.*measuring\.lock is held\): measuring the copies "
                                                  r"beside it would disturb both"):
        hostcpu.refuse_if_others_measuring("the copies", path)
    proc.stdin.close()
    proc.wait(timeout=30)
    assert not hostcpu.others_measuring(path)  # ended: the lock went with it
    hostcpu.refuse_if_others_measuring("the copies", path)


def test_several_runs_measure_at_once_and_their_own_processes_are_not_others(tmp_path, monkeypatch):
    """The lock is shared: a second run may hold it beside the first. Inside a holder (its
    environment carries MEASURING_ENV, as the processes it starts do) nothing is refused."""
    path = tmp_path / "measuring.lock"
    monkeypatch.delenv(hostcpu.MEASURING_ENV, raising=False)
    with hostcpu.measuring(path):
        with hostcpu.measuring(path):  # a second holder does not wait for the first
            assert not hostcpu.others_measuring(path)
        assert hostcpu.MEASURING_ENV in os.environ
    assert hostcpu.MEASURING_ENV not in os.environ
    assert not hostcpu.others_measuring(path)


def test_the_profile_calibrations_refuse_but_read_what_they_kept(holder, tmp_path):
    """measure_copy, measure_launch, machinery_s and measured time the cores only where nothing is
    kept: a kept calibration is read back while a run measures, a missing one is refused."""
    from ddlbench.predict import profile

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "copy-cpu-t1-r3.json").write_text('{"tensor_s": 1e-6, "Bps": 1e9, "source": "kept"}')
    assert profile.measure_copy("cpu", 1, repeats=3, cache_dir=kept) == (1e-6, 1e9, "kept")
    with pytest.raises(hostcpu.MachineBusy, match="measuring a fused message's copies beside it"):
        profile.measure_copy("cpu", 2, repeats=3, cache_dir=kept)
    with pytest.raises(hostcpu.MachineBusy, match="measuring an all-reduce's launch in tiny-resnet beside it"):
        profile.measure_launch("tiny-resnet", 4, threads=1, cache_dir=kept)
    with pytest.raises(hostcpu.MachineBusy, match="measuring ByteScheduler's machinery in tiny-resnet beside it"):
        profile.machinery_s("tiny-resnet", 4, threads=1, cache_dir=kept)
    with pytest.raises(hostcpu.MachineBusy, match="measuring tiny-resnet's profile beside it"):
        profile.measured("tiny-resnet", 4, threads=1, cache_dir=kept)


def test_the_validation_says_so_in_one_line_and_exits_non_zero(holder, tmp_path, monkeypatch, capsys):
    """predict_validation --calibrate-only beside a run: its first calibration to time the cores
    refuses, and the validation says so in one line and exits 2."""
    from pathlib import Path

    from ddlbench.predict import profile

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import predict_validation as pv

    monkeypatch.setattr(pv, "calibrate", lambda results: profile.measure_copy("cpu", 1, repeats=3, cache_dir=tmp_path))
    assert pv.main(["--calibrate-only", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("predict_validation: error: a ddlbench run or make commbench is timing on this machine's "
                          "cores now") and err.count("\n") == 1


ASK = ("import os, sys; from pathlib import Path; from ddlbench import hostcpu\n"
       "os.environ.pop(hostcpu.MEASURING_ENV, None)\n"
       "print(hostcpu.others_measuring(Path(sys.argv[1])))\n")


def test_a_local_run_holds_the_lock_while_it_launches(tmp_path, monkeypatch):
    """launch.run holds the lock around its launches (here stood in for: nothing is started), so
    another process asking sees it held; once the run returns, no longer. The launches' own
    processes carry MEASURING_ENV and are not others."""
    from ddlbench import config, launch

    path = tmp_path / "measuring.lock"
    monkeypatch.setenv(hostcpu.MEASURING_LOCK_ENV, str(path))
    monkeypatch.delenv(hostcpu.MEASURING_ENV, raising=False)
    seen = {}

    def launches(cfg, rec, run_dir, results_dir, start):
        seen["env"] = os.environ.get(hostcpu.MEASURING_ENV)
        seen["held"] = subprocess.run([sys.executable, "-c", ASK, str(path)], capture_output=True, text=True,
                                      timeout=60).stdout.strip()
        rec["status"] = "ok"
    monkeypatch.setattr(launch, "launch_and_record", launches)
    cfg = config.resolve(config._compose(["model=tiny-resnet", "workers=2", f"results_dir={tmp_path / 'results'}"]))
    launch.run(cfg)
    assert seen == {"env": "1", "held": "True"}
    assert not hostcpu.others_measuring(path) and hostcpu.MEASURING_ENV not in os.environ
