"""Resume that neither skips nor repeats (issue 13): runs are keyed by a hash of the whole
resolved configuration, tables never average different configurations, squeue failures are not
read as a finished job, and the queue is asked before the records."""
import subprocess

import pytest
from omegaconf import OmegaConf

from ddlbench import config, launch, record
from ddlbench.analysis import tables
from ddlbench.launch import slurm


def rec_of(*overrides):
    cfg = config.resolve(config._compose(["model=tiny-resnet", "workers=2", *overrides]))
    return launch.base_record(cfg)


@pytest.mark.parametrize("changed", [
    "method.transport=gloo", "method.partition_bytes=1000", "seed=1", "model.width=32",
    "launcher.threads_per_worker=1", "profile.distinct_batches=2", "optimizer.lr=0.1", "local_batch=8",
])
def test_every_setting_that_changes_the_measurement_changes_the_key(changed):
    base = rec_of("method=bsp-ps")
    other = rec_of("method=bsp-ps", changed)
    assert record.config_key(base) != record.config_key(other)


def test_bytescheduler_partition_and_credit_change_the_key():
    base = rec_of("method=bytescheduler-a2a")
    for changed in ("method.partition_params=1000", "method.credit_params=2000"):
        assert record.config_key(rec_of("method=bytescheduler-a2a", changed)) != record.config_key(base)


def test_output_paths_and_switches_do_not(tmp_path):
    base = rec_of()
    same = rec_of(f"results_dir={tmp_path}", "trace=true", "save_params=true", "skip_recorded=true",
                  "comm_timeout_s=5", "startup_timeout_s=7")
    assert base["config_hash"] and record.config_key(same) == record.config_key(base) == base["config_hash"]


def test_skip_recorded_skips_only_the_same_configuration(tmp_path):
    cfg = config.resolve(config._compose(["model=tiny-resnet", "workers=2", f"results_dir={tmp_path}"]))
    rec = launch.base_record(cfg)
    record.write(tmp_path, {**rec, "status": "ok"})
    assert launch.skip_reason(cfg, launch.base_record(cfg), tmp_path)[0].startswith("an ok record")
    other = config.resolve(config._compose(["model=tiny-resnet", "workers=2", "seed=3", f"results_dir={tmp_path}"]))
    assert launch.skip_reason(other, launch.base_record(other), tmp_path) is None  # the old key called it recorded
    # a record from before config_hash existed is keyed by its recorded config
    old = {k: v for k, v in rec.items() if k != "config_hash"}
    assert record.config_key(old) == rec["config_hash"]
    assert record.config_key({"method": "bsp-a2a"}) is None  # no config: never taken for a recorded run


def test_the_slurm_job_name_carries_the_same_hash():
    cfg = config.resolve(config._compose(["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true",
                                          "model=tiny-resnet"]))
    rec = launch.base_record(cfg)
    assert slurm.job_name(cfg, rec).endswith("-" + rec["config_hash"])


def ok(method, workers, sps, **config_changes):
    rec = rec_of(f"method={method}", f"workers={workers}", *[f"{k}={v}" for k, v in config_changes.items()])
    return {**rec, "status": "ok", "samples_per_sec": sps, "samples_per_sec_per_repeat": [sps]}


def test_tables_never_average_different_configurations():
    recs = [ok("bsp-a2a", 1, 10.0), ok("bsp-a2a", 2, 18.0), ok("bsp-a2a", 2, 22.0, **{"profile.repeats": 5}),
            ok("bsp-a2a", 2, 99.0, seed=7),
            ok("bytescheduler-a2a", 2, 30.0), ok("bytescheduler-a2a", 2, 50.0, **{"method.credit_params": 8000000})]
    setups = tables.ours(recs)
    assert len(setups) == 2  # seed=7 is a table of its own; more repeats of one configuration combine
    main = next(c for s, c in setups.items() if ("bsp-a2a", 1) in c)
    assert main[("bsp-a2a", 2)].mean == 20.0 and main[("bsp-a2a", 2)].n == 2
    variants = sorted(m for m, w in main if m.startswith("bytescheduler-a2a"))
    assert len(variants) == 2 and all(" cfg " in m for m in variants)  # credit sizes: two rows
    assert sorted(main[(m, 2)].mean for m in variants) == [30.0, 50.0]
    seed7 = next(c for s, c in setups.items() if ("bsp-a2a", 1) not in c)
    assert list(seed7.values())[0].mean == 99.0
    # records without a config group as they always did
    bare = [{k: r[k] for k in ("method", "model", "workers", "local_batch", "device", "backend", "engine", "status",
                               "samples_per_sec", "samples_per_sec_per_repeat")} for r in recs]
    assert len(tables.ours(bare)) == 1


class FakeSqueue:
    """subprocess.run for squeue: the answers given, in turn."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), 0

    def __call__(self, argv, **_kw):
        assert argv[0] == "squeue"
        self.calls += 1
        rc, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(argv, rc, out, err)


@pytest.fixture
def no_sleep(monkeypatch):
    waits = []
    monkeypatch.setattr(slurm.time, "sleep", waits.append)
    return waits


def test_a_failing_squeue_is_asked_again_and_never_read_as_a_finished_job(monkeypatch, no_sleep):
    fake = FakeSqueue((1, "", "slurm_load_jobs error: Socket timed out"), (1, "", "Unable to contact slurm controller"),
                      (0, "RUNNING\n", ""))
    monkeypatch.setattr(slurm.subprocess, "run", fake)
    assert slurm.queue_state("42") == "RUNNING" and fake.calls == 3 and no_sleep == [2.0, 4.0]

    monkeypatch.setattr(slurm.subprocess, "run", FakeSqueue((0, "", "")))
    assert slurm.queue_state("42") is None  # an answer with no job: gone
    monkeypatch.setattr(slurm.subprocess, "run", FakeSqueue((1, "", "slurm_load_jobs error: Invalid job id specified")))
    assert slurm.queue_state("42") is None  # the id purged from the queue: gone

    monkeypatch.setattr(slurm.subprocess, "run", FakeSqueue(*[(1, "", "Socket timed out")] * slurm.SQUEUE_TRIES))
    with pytest.raises(slurm.QueueUnreadable, match=r"failed 5 times .*Socket timed out"):
        slurm.queue_state("42")
    monkeypatch.setattr(slurm.subprocess, "run", FakeSqueue(*[(1, "", "down")] * slurm.SQUEUE_TRIES))
    with pytest.raises(slurm.QueueUnreadable):
        slurm.queued_job("ddlbench-x")


def slurm_cfg(tmp_path):
    cfg = config.resolve(config._compose(["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true",
                                          "model=tiny-resnet", "skip_recorded=true", f"results_dir={tmp_path}"]))
    cfg.launcher.dry_run = False  # submitting, as on a login node
    return cfg


def test_an_unreadable_queue_submits_nothing(tmp_path, monkeypatch, no_sleep):
    cfg = slurm_cfg(tmp_path)
    monkeypatch.setattr(slurm.subprocess, "run", FakeSqueue(*[(1, "", "down")] * slurm.SQUEUE_TRIES))
    monkeypatch.setattr(slurm, "submit", lambda *a: pytest.fail("submitted without reading the queue"))
    out = launch.run(cfg)
    assert out["status"] == "failed" and "squeue" in out["error"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "records").exists()


def test_the_queue_is_asked_before_the_records(tmp_path, monkeypatch):
    """A job that records itself and leaves the queue between the two looks is skipped, not run
    twice: asked first, the queue no longer has it, and the records then do."""
    cfg = slurm_cfg(tmp_path)

    def job_ends_now(name):
        rec = launch.base_record(cfg)
        assert name == slurm.job_name(cfg, rec)
        record.write(tmp_path, {**rec, "status": "ok"})  # the job's node 0 writes its record, then leaves
        return None

    monkeypatch.setattr(slurm, "queued_job", job_ends_now)
    monkeypatch.setattr(slurm, "submit", lambda *a: pytest.fail("the job ran twice"))
    assert launch.run(cfg)["status"] == "skipped"
    monkeypatch.setattr(slurm, "queued_job", lambda name: "77")
    out = launch.run(cfg)
    assert out["status"] == "skipped" and out["job_id"] == "77"


def test_the_hash_leaves_out_only_what_does_not_change_the_measurement():
    cfg = config.resolve(config._compose(["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true"]))
    whole = OmegaConf.to_container(cfg, resolve=True)
    for key in ("launcher.wait", "launcher.time_min", "launcher.stall_timeout_s"):
        changed = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}=7"]))
        assert record.config_hash(OmegaConf.to_container(changed)) == record.config_hash(whole)
    for key in ("launcher.workers_per_node", "launcher.servers_per_node", "launcher.cpus_per_task"):
        changed = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}=7"]))
        assert record.config_hash(OmegaConf.to_container(changed)) != record.config_hash(whole)
