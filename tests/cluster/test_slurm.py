"""Runs through a real Slurm: a single-node cluster on localhost (munged, slurmctld, slurmd from
Debian's slurm-wlm), started here and stopped by pid at the end. Skipped, with the reason, where
Slurm cannot be installed (not root, no apt-get)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers import REPO, ddlbench, records, slurm_cluster

pytestmark = pytest.mark.cluster
# One node: both workers on it, and the PS server beside them; on its CPU (this cluster has no GPUs,
# and on Slurm the default device is cuda).
ONE_NODE = ["launcher.workers_per_node=2", "launcher.servers_on_own_nodes=false", "device=cpu"]
QUICK = ["WARMUP=1", "ITERS=2", "REPEATS=1", "MODEL=tiny-resnet"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as conf:
        os.environ["SLURM_CONF"] = str(conf)  # for this process's sinfo and the CLI it starts
        try:
            yield conf.parent
        finally:
            os.environ.pop("SLURM_CONF", None)


def make(*args, timeout=600):
    return subprocess.run(["make", "-s", *args, f"PY={sys.executable}", "-o", f"{REPO}/.venv/.installed"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_make_reproduce_on_slurm_records_all_reduce_and_ps_runs(cluster, tmp_path):
    proc = make("reproduce", "METHOD=bsp-a2a,bsp-ps", "WORKERS=2", "CLUSTER=slurm", "PARTITION=debug", *QUICK,
                f"RESULTS={tmp_path}", f"OVERRIDES={' '.join(ONE_NODE)}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "as Slurm job" in proc.stdout
    recs = {(r["method"], r["workers"]): r for r in records(tmp_path)}
    assert set(recs) == {("bsp-a2a", 2), ("bsp-ps", 2), ("bsp-a2a", 1)}
    for r in recs.values():
        assert r["status"] == "ok", r["error"]
        assert r["launcher"] == "slurm" and r["job_id"] and r["samples_per_sec"] > 0
    ps = recs[("bsp-ps", 2)]
    assert ps["servers"] == 1 and ps["server_stats"] and ps["params_consistent"]
    assert "| bsp-ps" in proc.stdout  # the table


def test_a_queued_sweep_resumes_without_duplicates(cluster, tmp_path):
    args = ["method=wfbp-a2a", "model=tiny-resnet", "workers=2", "launcher=slurm", "launcher.partition=debug",
            "launcher.wait=false", "skip_recorded=true", "profile.warmup_iters=1", "profile.measured_iters=2",
            "profile.repeats=1", *ONE_NODE]
    first = ddlbench(*args, results=tmp_path, check=True)
    assert "as Slurm job" in first.stdout
    again = ddlbench(*args, results=tmp_path, check=True)  # still queued or running: not submitted twice
    recorded = records(tmp_path)
    assert "already queued as Slurm job" in again.stdout or recorded
    deadline = time.monotonic() + 180
    while not records(tmp_path) and time.monotonic() < deadline:
        time.sleep(1)
    (rec,) = records(tmp_path)  # the job recorded itself; nobody waited for it
    assert rec["status"] == "ok", rec["error"]
    third = ddlbench(*args, results=tmp_path, check=True)
    assert "skipped: an ok record" in third.stdout and len(records(tmp_path)) == 1


def test_bad_cluster_settings_fail_before_submitting(cluster, tmp_path):
    def error(*args):
        proc = ddlbench("method=bsp-a2a", "launcher=slurm", *args, results=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1
        return lines[0]

    assert "launcher.partition is not set; accepted: debug" in error()
    assert "unknown launcher.partition 'gpu'; accepted: debug" in error("launcher.partition=gpu")
    assert "need 2 nodes of partition 'debug', which has 1" in error("launcher.partition=debug", "workers=8", "device=cpu")
    assert "offer no GPUs" in error("launcher.partition=debug")  # the default on Slurm: the GPUs
    assert "offer no GPUs" in error("launcher.partition=debug", "device=cuda")
    assert "unknown engine 'mxnet'" in error("launcher.partition=debug", "engine=mxnet")
    assert not records(tmp_path)
    out = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
    assert not out.strip(), "nothing was submitted"


def test_repeats_as_launches_run_inside_the_one_job(cluster, tmp_path):
    ddlbench("method=mg-wfbp", "model=tiny-resnet", "workers=2", "launcher=slurm", "launcher.partition=debug",
             "profile.warmup_iters=1", "profile.measured_iters=2", "profile.repeats=2", "profile.repeat_mode=launch",
             *ONE_NODE, results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok", rec["error"]
    assert rec["repeat_mode"] == "launch" and len(rec["launch_dirs"]) == 2 and len(rec["samples_per_sec_per_repeat"]) == 2
    assert rec["job_id"] and all(launch["groups"] for launch in rec["launches"])  # MG-WFBP chose its groups twice


def test_horovod_runs_under_slurm_too(cluster, tmp_path):
    from ddlbench.engines import horovod_available

    ok, why = horovod_available()
    if not ok:
        pytest.skip(why)
    ddlbench("method=mg-wfbp", "engine=horovod", "model=tiny-resnet", "workers=2", "launcher=slurm",
             "launcher.partition=debug", "profile.warmup_iters=1", "profile.measured_iters=2", "profile.repeats=1",
             *ONE_NODE, results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok" and rec["engine"] == "horovod" and rec["env"]["HOROVOD_FUSION_THRESHOLD"] == "0"
