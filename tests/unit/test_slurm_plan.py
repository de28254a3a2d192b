"""Slurm topology and batch scripts, without a cluster (the real-Slurm runs are in tests/cluster)."""
import subprocess
import sys

import pytest

from ddlbench import config
from ddlbench.config import ConfigError
from ddlbench.launch import slurm

from helpers import REPO


@pytest.mark.parametrize("workers, servers, per_node, own, want", [
    (32, 8, 4, True, [4] * 8 + [1] * 8),   # the study: 8 worker nodes, a server node per worker node
    (32, 0, 4, True, [4] * 8),
    (6, 2, 4, True, [4, 2, 1, 1]),
    (2, 1, 2, False, [3]),                  # one node: the server shares the last worker node
    (5, 2, 4, False, [4, 3]),
])
def test_nodes_hold_contiguous_ranks_with_servers_last(workers, servers, per_node, own, want):
    counts = slurm.node_procs(workers, servers, per_node, 1, own)
    assert counts == want and sum(counts) == workers + servers


def compose(*overrides):
    return config.resolve(config._compose(["launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true", *overrides]))


def test_ps_servers_default_to_one_per_worker_node():
    assert compose("method=bsp-ps", "workers=32").servers == 8
    assert compose("method=bsp-ps", "workers=6").servers == 2
    assert compose("method=bsp-a2a", "workers=32").servers == 0


def test_missing_partition_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"launcher.partition is not set; accepted: "):
        config.resolve(config._compose(["launcher=slurm"]))
    with pytest.raises(ConfigError, match=r"launcher.workers_per_node=0 is invalid"):
        compose("launcher.workers_per_node=0")


def script(tmp_path, *overrides) -> str:
    from ddlbench import launch

    cfg = compose(*overrides)
    return slurm.batch_script(cfg, launch.base_record(cfg), tmp_path / "run")


def test_on_slurm_the_default_device_is_the_gpus_and_the_script_asks_for_them(tmp_path):
    cfg = compose("method=mg-wfbp", "workers=32")
    assert (cfg.device, cfg.backend) == ("cuda", "nccl")
    out = script(tmp_path, "method=mg-wfbp", "workers=32")
    assert "#SBATCH --gpus-per-node=4" in out and "#SBATCH --nodes=8" in out
    assert "--gpus-per-node=2" in script(tmp_path, "workers=2")  # never more GPUs than workers
    cpu = script(tmp_path, "method=mg-wfbp", "workers=32", "device=cpu")
    assert "#SBATCH --nodes=8" in cpu and "gpus" not in cpu and "gres" not in cpu
    assert compose("device=cpu").backend == "gloo"


def test_server_only_nodes_are_said_to_leave_their_gpus_idle(tmp_path):
    out = script(tmp_path, "method=bsp-ps", "workers=8")
    assert "#SBATCH --nodes=4" in out and "the last 2 node(s) run PS servers only" in out
    beside = script(tmp_path, "method=bsp-ps", "workers=8", "launcher.servers_on_own_nodes=false")
    assert "#SBATCH --nodes=2" in beside and "servers only" not in beside


def test_the_study_profile_relaunches_every_repeat_inside_the_one_job(tmp_path):
    out = script(tmp_path, "method=mg-wfbp", "workers=8", "profile=study")
    assert "every node runs it 5 times, K = 0..4" in out
    launches = [ln for ln in out.splitlines() if ln.startswith("#   node ")]
    assert len(launches) == 2 and all(f"{tmp_path / 'run' / 'launch-$K'}" in ln for ln in launches)
    assert slurm.rendezvous_port("4711", 0) != slurm.rendezvous_port("4711", 1)
    assert 20000 <= slurm.rendezvous_port("123456_7", 19) < 60000


def test_dry_run_prints_the_batch_script_and_submits_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddlbench", "method=bytescheduler-ps", "workers=32", "device=cuda",
                           "launcher=slurm", "launcher.partition=gpu", "launcher.dry_run=true", "launcher.account=proj",
                           f"results_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("#SBATCH --nodes=16", "#SBATCH --gpus-per-node=4", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj", "#SBATCH --ntasks-per-node=1"):
        assert line in out
    assert "srun " in out
    launches = [ln for ln in out.splitlines() if ln.startswith("#   node ")]
    assert len(launches) == 16
    assert all("--nproc-per-node=4" in ln for ln in launches[:8]) and all("--nproc-per-node=1" in ln for ln in launches[8:])
    assert not any(tmp_path.iterdir()), "a dry run leaves nothing behind"


def test_make_dry_run_shows_one_script_per_run_of_the_paper_sweep(tmp_path):
    # RESULTS in tmp_path: with the default, Hydra's sweep record (results/multirun/) was left in
    # the checkout by every make test
    proc = subprocess.run(["make", "-s", "reproduce-paper", "CLUSTER=slurm", "DRY_RUN=1", "PARTITION=gpu",
                           "EXPERIMENTS=fig4c-bert-large", f"RESULTS={tmp_path}", f"PY={sys.executable}",
                           "-o", f"{REPO}/.venv/.installed"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p.name for p in tmp_path.iterdir()} <= {"multirun"}  # Hydra's sweep record; no run record
    names = [ln for ln in proc.stdout.splitlines() if ln.startswith("#SBATCH --job-name=")]
    assert len(names) == 7 * 4 + 1  # seven methods x 4/8/16/32 GPUs, and the one-GPU baseline
    assert sum("-bert-large-w32-" in n for n in names) == 7
