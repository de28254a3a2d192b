"""Repeats as launches (profile.repeat_mode=launch): one directory per launch, launches in turn,
stop at the first failure, and one record merged from all of them. The multi-process run of the
same is in tests/multiproc/test_reproduce.py."""
import json

import pytest

from ddlbench import config, launch
from helpers import records


def compose(*overrides):
    return config.resolve(config._compose(["model=tiny-resnet", "workers=2", "profile.measured_iters=2", *overrides]))


def result(sps: float, block: float, hosts=("a",), consistent=True) -> dict:
    return {"samples_per_sec": sps, "samples_per_sec_std": 0.0, "samples_per_sec_per_repeat": [sps],
            "block_time_s": [block], "iter_times_s": [block / 2, block / 2], "host_busy_cores": [sps / 100],
            "iterations_total": 3,
            "params_consistent": consistent, "hosts": list(hosts), "groups": [1, 2], "world": 2}


def test_each_launch_has_a_directory_whose_config_asks_for_one_repeat(tmp_path):
    cfg = compose("profile.repeats=3", "profile.repeat_mode=launch")
    launch._prepare(cfg, tmp_path / "run")
    dirs = launch.launch_dirs(cfg, tmp_path / "run")
    assert [d.name for d in dirs] == ["launch-0", "launch-1", "launch-2"]
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / "run" / "config.yaml").profile.repeats == 3
    assert all(OmegaConf.load(d / "config.yaml").profile.repeats == 1 for d in dirs)
    process = compose("profile.repeats=3", "profile.repeat_mode=process")
    assert launch.launch_dirs(process, tmp_path / "p") == [tmp_path / "p"]


def test_launches_run_in_turn_and_none_starts_after_a_failure(tmp_path):
    cfg = compose("profile.repeats=3", "profile.repeat_mode=launch")
    started = []

    def start(k, d):
        started.append(d.name)
        return (1, "rank 1: RuntimeError: boom") if k == 1 else (0, None)

    rc, reason = launch.run_launches(cfg, tmp_path, start)
    assert started == ["launch-0", "launch-1"]
    assert rc == 1 and reason == "launch 2/3: rank 1: RuntimeError: boom"


def test_the_record_merges_every_launch_and_fails_if_one_left_no_result(tmp_path):
    cfg = compose("profile.repeats=3", "profile.repeat_mode=launch")
    run_dir = tmp_path / "run"
    launch._prepare(cfg, run_dir)
    dirs = launch.launch_dirs(cfg, run_dir)
    for d, (sps, block, host) in zip(dirs, [(100.0, 0.16, "a"), (200.0, 0.08, "b"), (150.0, 0.1, "a")]):
        (d / "result.json").write_text(json.dumps(result(sps, block, hosts=[host])))
    rec = launch.base_record(cfg)
    launch.finish(cfg, rec, run_dir, 0, None, tmp_path)
    (got,) = records(tmp_path)
    assert got["status"] == "ok" and got["repeat_mode"] == "launch" and got["repeats"] == 3
    assert got["samples_per_sec_per_repeat"] == [100.0, 200.0, 150.0]
    assert got["samples_per_sec"] == pytest.approx(150.0) and got["samples_per_sec_std"] == pytest.approx(50.0)
    assert got["block_time_s"] == [0.16, 0.08, 0.1] and len(got["iter_times_s"]) == 6
    assert got["host_busy_cores"] == [1.0, 2.0, 1.5]  # each launch's block, in turn
    assert got["hosts"] == ["a", "b"] and got["iterations_total"] == 9 and got["params_consistent"]
    assert got["launch_dirs"] == [str(d) for d in dirs] and len(got["launches"]) == 3 and "world" not in got

    (dirs[2] / "result.json").unlink()
    launch.finish(cfg, launch.base_record(cfg), run_dir, 0, None, tmp_path)
    failed = records(tmp_path)[-1]
    assert failed["status"] == "failed" and "launch-2" in failed["error"]


def test_in_process_repeats_keep_the_one_result_as_it_is(tmp_path):
    cfg = compose("profile.repeats=1", "profile.repeat_mode=process")
    run_dir = tmp_path / "run"
    launch._prepare(cfg, run_dir)
    (run_dir / "result.json").write_text(json.dumps(result(120.0, 0.1)))
    launch.finish(cfg, launch.base_record(cfg), run_dir, 0, None, tmp_path)
    (got,) = records(tmp_path)
    assert got["status"] == "ok" and got["repeat_mode"] == "process" and got["samples_per_sec"] == 120.0
    assert got["launch_dirs"] is None and got["launches"] is None


def test_the_launches_compute_probes_are_joined_repeat_by_repeat():
    """Each launch's probe fields (driver: one entry per repeat) join in launch order, the
    steps after idle too; the idle lengths, the same in every launch, are kept once."""
    cfg = compose("profile.repeats=2", "profile.repeat_mode=launch")
    probed = [{**result(100.0, 0.1), "compute_probe_s": [0.01 * k], "compute_probe_lockstep_s": [0.02 * k],
               "compute_probe_idle_s": [0.004, 0.016], "compute_probe_after_idle_s": [[0.03 * k, 0.04 * k]],
               "compute_probe_after_idle_own_s": [[0.02 * k, 0.03 * k]]} for k in (1, 2)]
    merged = launch.merge_launches(cfg, probed, ["l0", "l1"])
    assert merged["compute_probe_s"] == [0.01, 0.02] and merged["compute_probe_lockstep_s"] == [0.02, 0.04]
    assert merged["compute_probe_after_idle_s"] == [[0.03, 0.04], [0.06, 0.08]]
    assert merged["compute_probe_after_idle_own_s"] == [[0.02, 0.03], [0.04, 0.06]]
    assert merged["compute_probe_idle_s"] == [0.004, 0.016]
