"""Every config composes and resolves; bad values fail in one line naming value and choices."""
import os
import subprocess
import sys

import pytest

from ddlbench import config
from ddlbench.config import ConfigError, choices, preflight


@pytest.mark.parametrize("method", choices("method"))
@pytest.mark.parametrize("model", [m for m in choices("model") if m != "torchvision"])
@pytest.mark.parametrize("profile", choices("profile"))
def test_every_method_model_and_profile_composes(method, model, profile):
    engine = []
    if method == "horovod":  # Horovod's own optimizer exists only on its engine
        from ddlbench.engines import horovod_available

        ok, why = horovod_available()
        if not ok:
            pytest.skip(why)
        engine = ["engine=horovod", "launcher=horovodrun"]
    cfg = config.resolve(config._compose([f"method={method}", f"model={model}", f"profile={profile}", *engine]))
    assert cfg.method.name == method and cfg.model.name == model
    assert cfg.backend == "gloo" and cfg.local_batch >= 1


def test_the_study_profile_uses_the_models_batch_and_protocol():
    cfg = config.resolve(config._compose(["profile=study", "model=bert-large"]))
    assert (cfg.profile.warmup_iters, cfg.profile.measured_iters, cfg.profile.repeats) == (10, 100, 5)
    assert cfg.local_batch == 8
    cfg = config.resolve(config._compose(["profile=study", "model=resnet50", "local_batch=16"]))
    assert cfg.local_batch == 16


def test_profiles_say_how_many_batches_and_how_repeats_run():
    study = config.resolve(config._compose(["profile=study"])).profile
    assert (study.distinct_batches, study.repeat_mode) == (1, "launch")  # one reused batch; relaunched
    local = config.resolve(config._compose(["profile=local", "profile.warmup_iters=3", "profile.measured_iters=4"])).profile
    assert (local.distinct_batches, local.repeat_mode) == (7, "process")  # auto: one per iteration of a repeat
    long = config.resolve(config._compose(["profile.warmup_iters=0", "profile.measured_iters=100000"])).profile
    assert long.distinct_batches == config.AUTO_DISTINCT_BATCHES_MAX  # all held on the device: bounded


def test_device_auto_is_cpu_here_and_a_concrete_value_in_the_config():
    cfg = config.resolve(config._compose([]))
    assert (cfg.device, cfg.backend) == ("cpu", "gloo")
    assert config.default_device("local") == "cpu" and config.default_device("mpirun") == "cpu"


def test_ps_methods_default_to_one_server_per_machine_and_a2a_to_none():
    assert config.resolve(config._compose(["method=bsp-ps"])).servers == 1
    assert config.resolve(config._compose(["method=bytescheduler-a2a"])).servers == 0


def test_a_torchvision_name_becomes_the_torchvision_model():
    assert preflight(["model=vgg11"]) == ["model=torchvision", "model.arch=vgg11"]


@pytest.mark.parametrize(
    "override, words",
    [
        ("method=foo", ["'foo'", "bsp-a2a", "mg-wfbp", "ddp"]),
        ("model=nosuch", ["'nosuch'", "resnet50", "bert-base", "torchvision"]),
        ("workers=0", ["workers=0", ">= 1"]),
        ("workers=10000", ["workers=10000", "accepted: 1.."]),
        ("bogus=1", ["'bogus'", "workers", "method"]),
        ("method.nope=1", ["'method.nope'", "fusion_elems"]),
        ("device=tpu", ["'tpu'", "auto, cpu, cuda"]),
        ("profile.repeat_mode=twice", ["profile.repeat_mode", "'twice'", "launch, process"]),
        ("profile.distinct_batches=0", ["profile.distinct_batches=0", ">= 1"]),
        ("backend=nccl", ["nccl", "device=cuda"]),
        ("profile.repeats=0", ["profile.repeats=0", ">= 1"]),
        ("profile.comm_probe_rounds=-1", ["profile.comm_probe_rounds=-1", ">= 0"]),
        ("method=mg-wfbp method.alpha_s=-1", ["alpha_s=-1", ">= 0"]),
        ("method=mg-wfbp method.min_group_numel=-1", ["min_group_numel=-1", ">= 0"]),
        ("method=mg-wfbp method.bench_max_bytes=1024", ["bench_max_bytes=1024", ">= 32768"]),
        ("method=bsp-ps servers=0", ["servers=0", "parameter-server method needs servers"]),
        ("method=wfbp-a2a servers=2", ["servers=2", "accepted: 0"]),
        ("method=wfbp-ps method.partition_bytes=0", ["partition_bytes=0", ">= 1"]),
        ("method=bytescheduler-a2a method.partition_params=-5", ["partition_params=-5", ">= 1"]),
        ("method=bytescheduler-ps method.credit_params=0", ["credit_params=0", ">= 1"]),
        ("method=bytescheduler-a2a method.credit_params=1.5", ["credit_params=1.5", "integer"]),
        ("method=bsp-ps workers=8 servers=1", ["workers=8 + servers=1", "<= 8"]),
        ("launcher.share_gpu=true device=cuda", ["share_gpu=true", "backend=nccl", "accepted: backend=gloo"]),
        # values a worker used to crash on, after start-up, with a traceback and a failed record
        ("optimizer.lr=abc", ["optimizer.lr='abc'", "a number > 0"]),
        ("optimizer.lr=0", ["optimizer.lr=0", "a number > 0"]),
        ("optimizer.momentum=abc", ["optimizer.momentum='abc'", ">= 0 and < 1"]),
        ("optimizer.momentum=1.5", ["optimizer.momentum=1.5", ">= 0 and < 1"]),
        ("model.num_classes=0", ["model.num_classes=0", ">= 1"]),
        ("model.image_size=abc", ["model.image_size='abc'", "integer >= 1"]),
        ("model=tiny-bert model.num_attention_heads=3", ["hidden_size=32", "num_attention_heads=3"]),
        ("method=ddp method.bucket_cap_mb=abc", ["method.bucket_cap_mb='abc'", "a number > 0"]),
        ("launcher.max_workers_per_cpu=abc", ["launcher.max_workers_per_cpu='abc'", ">= 1"]),
        ("launcher.max_workers_per_cpu=0", ["launcher.max_workers_per_cpu=0", ">= 1"]),
        ("trace=maybe", ["trace='maybe'", "true, false"]),
        ("save_params=1", ["save_params=1", "true, false"]),
    ],
)
def test_bad_values_are_one_line_errors(override, words):
    with pytest.raises(ConfigError) as err:
        preflight(override.split())
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_every_value_of_a_sweep_is_checked_before_anything_runs():
    with pytest.raises(ConfigError, match="'nope'"):
        preflight(["--multirun", "method=bsp-a2a,nope"])
    with pytest.raises(ConfigError, match="workers=10000"):
        preflight(["--multirun", "method=bsp-a2a,ddp", "workers=1,10000"])
    assert preflight(["--multirun", "method=bsp-a2a,ddp", "workers=1,2"]) == ["--multirun", "method=bsp-a2a,ddp", "workers=1,2"]


def test_engine_settings_are_checked_before_anything_starts(monkeypatch):
    def bad(*overrides):
        with pytest.raises(ConfigError) as e:
            config.resolve(config._compose(list(overrides)))
        return str(e.value)

    assert "accepted: bsp-a2a, bytescheduler-a2a, horovod, mg-wfbp, wfbp-a2a" in bad("engine=horovod", "launcher=horovodrun", "method=bsp-ps")
    assert "launcher=horovodrun" in bad("engine=horovod", "method=wfbp-a2a")  # torchrun cannot start Horovod
    assert "engine=horovod only" in bad("method=horovod")
    assert "engine=horovod only" in bad("launcher=horovodrun")
    with pytest.raises(ConfigError, match=r"unknown engine 'nope'; accepted: torch, horovod"):
        config.resolve(config._compose(["engine.name=nope"]))
    # Where Horovod does not import, the error says how to install it.
    monkeypatch.setitem(sys.modules, "horovod", None)
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    assert "make horovod" in bad("engine=horovod", "launcher=horovodrun", "method=wfbp-a2a")


@pytest.mark.parametrize("override, words", [
    ("seed=-1", ["seed=-1", "integer >= 0"]),
    ("seed=abc", ["seed='abc'", "integer >= 0"]),
    ("seed=1.5", ["seed=1.5", "integer >= 0"]),
    ("comm_timeout_s=abc", ["comm_timeout_s='abc'", "seconds > 0"]),
    ("comm_timeout_s=0", ["comm_timeout_s=0", "seconds > 0"]),
    ("comm_timeout_s=inf", ["comm_timeout_s=inf", "finite"]),
    ("launcher.threads_per_worker=0", ["launcher.threads_per_worker=0", "integer >= 1"]),
    ("launcher.threads_per_worker=many", ["launcher.threads_per_worker='many'", "integer >= 1"]),
    ("method=bytescheduler-ps method.credit_params=abc", ["credit_params='abc'", "integer >= 1"]),
    ("method=bytescheduler-ps method.partition_params=0", ["partition_params=0", "integer >= 1"]),
    ("method=bsp-ps method.partition_bytes=-1", ["partition_bytes=-1", "integer >= 1"]),
])
def test_numbers_are_checked_before_anything_starts(override, words):
    test_bad_values_are_one_line_errors(override, words)


SLURM = ["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true"]


@pytest.mark.parametrize("override, words", [
    ("launcher.stall_timeout_s=-1", ["launcher.stall_timeout_s=-1", "seconds > 0"]),
    ("launcher.stall_timeout_s=soon", ["launcher.stall_timeout_s='soon'", "seconds > 0"]),
    ("workers=1000000000", ["workers=1000000000", "250000000 nodes", "at most 16384 nodes"]),
    ("method=bsp-ps workers=4 servers=100000", ["servers=100000", "at most 16384 nodes"]),
])
def test_slurm_numbers_are_checked_before_anything_is_built(override, words):
    with pytest.raises(ConfigError) as err:
        preflight(SLURM + override.split())
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words)


def test_workers_1e9_on_slurm_fails_without_building_a_node_list(monkeypatch):
    from ddlbench.launch import slurm

    monkeypatch.setattr(slurm, "node_procs", lambda *a, **k: pytest.fail("a per-node list was built"))
    with pytest.raises(ConfigError, match="at most 16384 nodes"):
        config.resolve(config._compose(SLURM + ["workers=1000000000"]))


@pytest.mark.parametrize("name", ["with space", "per%cent", "job_%j"])
def test_slurm_paths_with_spaces_or_percent_are_refused(tmp_path, name):
    with pytest.raises(ConfigError) as err:
        preflight(SLURM + [f"results_dir={tmp_path / name}"])
    msg = str(err.value)
    assert "\n" not in msg and name in msg and "without spaces or '%'" in msg
    assert config.resolve(config._compose([f"results_dir={tmp_path / name}"]))  # fine for the local launcher


def test_a_results_dir_that_is_a_file_or_under_one_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(ConfigError) as err:
            preflight([f"results_dir={bad}"])
        assert f"{tmp_path / 'file'} exists and is not a directory" in str(err.value)
        assert "accepted: a directory path" in str(err.value)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "records").write_text("x")
    with pytest.raises(ConfigError, match="records exists and is not a directory"):
        preflight([f"results_dir={tmp_path / 'res'}"])
    assert preflight([f"results_dir={tmp_path / 'new' / 'deeper'}"])  # creatable: fine, nothing created yet
    assert not (tmp_path / "new").exists()


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this user cannot write: chmod 555, or for root (whom modes do not stop) a
    read-only tmpfs."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"root, and cannot mount a read-only tmpfs: {proc.stderr.strip()}")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def test_an_unwritable_results_dir_is_refused(read_only_dir):
    for bad, where in ((read_only_dir, f"{read_only_dir} is not writable"),
                       (read_only_dir / "a" / "b", f"would be created under {read_only_dir}, which is not writable")):
        with pytest.raises(ConfigError) as err:
            preflight([f"results_dir={bad}"])
        msg = str(err.value)
        assert "\n" not in msg and where in msg and "accepted: a directory you can write" in msg


def test_threads_follow_the_cores_this_process_may_use_not_the_machines(monkeypatch):
    """Affinity (taskset, cpusets) and Slurm's allotment on the node bound the cores; the whole
    machine's count oversubscribed shared nodes."""
    from ddlbench import config as c

    monkeypatch.setattr(c.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    assert c.usable_cores() == 8
    monkeypatch.setattr(c.os, "sched_getaffinity", lambda pid: {2, 3})
    assert c.usable_cores() == 2
    monkeypatch.setattr(c.os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "3")
    assert c.usable_cores() == 3
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "")  # not set by this Slurm: affinity alone
    assert c.usable_cores() == 8

    from ddlbench.launch import run_env

    cfg = config.resolve(config._compose(["workers=2"]))
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "2")
    assert run_env(cfg, local_procs=2)["OMP_NUM_THREADS"] == "1"  # not 8 // 2
    # an explicit setting wins on every launcher; it was ignored where the host's process count
    # is known (Slurm nodes, emulated hosts)
    cfg = config.resolve(config._compose(["workers=2", "launcher.threads_per_worker=3"]))
    assert run_env(cfg, local_procs=2)["OMP_NUM_THREADS"] == "3"
    assert run_env(cfg)["OMP_NUM_THREADS"] == "3"


def test_the_launchers_own_process_checks_every_method_without_importing_torch():
    # Every launch starts the launcher, torchrun and the ranks: torch's import costs each of them
    # about 2 s of CPU, and the launcher (which only checks, writes and waits) needs none of it.
    code = """
import sys
from ddlbench import cli, launch, record
from ddlbench.config import choices, preflight
from ddlbench.launch import local
preflight(["--multirun", "method=" + ",".join(m for m in choices("method") if m != "horovod"), "workers=4"])
loaded = sorted(m for m in ("torch", "numpy") if m in sys.modules)
print("loaded:", ",".join(loaded) or "none")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded: none", out.stdout
