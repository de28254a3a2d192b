"""The multi-node launchers other than torchrun-per-host, across emulated hosts: the real Slurm
launcher on a Slurm with one slurmd per host (slurmctld on the bridge), horovodrun -H and MPICH's
mpiexec -hosts over an sshd per host. Each places its ranks on different hosts (by their host
names and addresses), stays lossless, and leaves no daemon, key or rank behind."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from ddlbench.engines import horovod_available
from ddlbench.launch import netns, sshd
from ddlbench.trace import load_meta

from helpers import REPO, ddlbench, records, reference_parameters, terminate_once_iterating

pytestmark = pytest.mark.netns

PROTOCOL = ["model=tiny-resnet", "workers=2", "profile.warmup_iters=1", "profile.measured_iters=2",
            "profile.repeats=1", "local_batch=4", "trace=true", "save_params=true"]
hvd_ok, hvd_why = horovod_available()


@pytest.fixture(scope="module")
def with_sshd():
    """OpenSSH installed (launch/install/sshd.sh), or a skip saying why it cannot be."""
    inst = subprocess.run(["bash", str(REPO / "launch" / "install" / "sshd.sh")], capture_output=True, text=True,
                          timeout=600)
    if inst.returncode == 3:
        pytest.skip(inst.stderr.strip())
    assert inst.returncode == 0 and sshd.unavailable() is None, inst.stderr[-2000:]


def assert_lossless(rec):
    assert rec["status"] == "ok", rec["error"]
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{rec['method']} {name}: {m}")


def assert_servers_on_their_own_host(rec):
    """Every worker pushed to the server's address, which is its own host's and no worker's."""
    W, hosts = rec["workers"], netns.current().hosts
    address = {h.hostname: h.address for h in hosts}
    server_addrs = [address[h] for h in rec["rank_hosts"][W:]]
    assert server_addrs and not set(server_addrs) & {address[h] for h in rec["rank_hosts"][:W]}
    for rank in range(W):
        (seen,) = load_meta(rec["trace"][rank], "ps_servers")
        assert [a.removeprefix("tcp://").rsplit(":", 1)[0] for a in seen["addresses"]] == server_addrs


def nothing_left(hosts) -> list[str]:
    """Our processes still in the hosts' namespaces (ssh servers, ranks), and ssh job directories."""
    left = [f"sshd {p} on {h.hostname}" for h in hosts for p in sshd.servers_in(h)]
    for h in hosts:
        for pid in subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "ddlbench.launch.worker" in cmd:
                left.append(f"rank {pid} on {h.hostname}")
    return left + [str(p) for p in Path("/tmp").glob("ddlbench-ssh-*")]


def test_slurm_runs_a_ps_job_across_emulated_nodes(emulated_slurm, tmp_path):
    """launcher=slurm as on a real cluster (submitit, srun, one torchrun per node, rendezvous at
    the first node by its name): two workers and the PS server on three nodes of their own."""
    ddlbench("method=bsp-ps", "servers=1", *PROTOCOL, "launcher=slurm", "launcher.partition=debug",
             "launcher.workers_per_node=1", "device=cpu", results=tmp_path, check=True, env=emulated_slurm)
    (rec,) = records(tmp_path)
    assert_lossless(rec)
    assert rec["job_id"] and rec["launcher"] == "slurm"
    nodes = [h.hostname for h in netns.current().hosts[:3]]
    assert rec["rank_hosts"] == nodes and sorted(rec["hosts"]) == nodes  # one rank per Slurm node
    assert_servers_on_their_own_host(rec)


def test_sshd_per_host_admits_the_job_key_only_and_stops_on_error(with_sshd, emulated_cluster):
    h0, h1 = emulated_cluster.hosts[:2]
    with pytest.raises(RuntimeError, match="inside the block"):
        with sshd.daemons(emulated_cluster.hosts[:2]) as ssh:
            out = subprocess.run([*h0.exec_prefix(), str(ssh.exe), h1.hostname, "hostname; hostname -I"],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            assert out.stdout.split() == [h1.hostname, h1.address]  # the other host's namespaces
            plain = subprocess.run([*h0.exec_prefix(), "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                                    "-o", "UserKnownHostsFile=/dev/null", h1.address, "true"], capture_output=True)
            assert plain.returncode != 0  # no key but the job's gets in
            raise RuntimeError("inside the block")
    assert nothing_left(emulated_cluster.hosts) == []


@pytest.mark.skipif(not hvd_ok, reason=hvd_why)
def test_horovodrun_across_hosts(with_sshd, emulated_cluster, tmp_path):
    ddlbench("method=wfbp-a2a", "engine=horovod", *PROTOCOL, "launcher=emulated",
             f"launcher.link={emulated_cluster.link}", results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert_lossless(rec)
    assert rec["config"]["launcher"]["via"] == "horovodrun" and rec["engine"] == "horovod"
    assert rec["rank_hosts"] == ["ddlb-node0", "ddlb-node1"]
    assert nothing_left(emulated_cluster.hosts) == []


def test_mpirun_across_hosts_with_the_ps_server_on_its_own(with_sshd, emulated_cluster, tmp_path):
    ddlbench("method=bsp-ps", "servers=1", *PROTOCOL, "launcher=emulated", "launcher.via=mpirun",
             f"launcher.link={emulated_cluster.link}", results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert_lossless(rec)
    assert rec["rank_hosts"] == ["ddlb-node0", "ddlb-node1", "ddlb-node2"]
    assert_servers_on_their_own_host(rec)
    assert nothing_left(emulated_cluster.hosts) == []


@pytest.mark.skipif(not hvd_ok, reason=hvd_why)
def test_sigterm_stops_every_hosts_ranks_and_ssh_servers(with_sshd, emulated_cluster, tmp_path):
    terminate_once_iterating(["method=bsp-a2a", "engine=horovod", *PROTOCOL, "launcher=emulated",
                              f"launcher.link={emulated_cluster.link}", "profile.measured_iters=100000"],
                             tmp_path, "pid-ddlb-node1-rank1")
    (rec,) = records(tmp_path)
    assert rec["status"] == "failed" and "SIGTERM" in rec["error"]
    assert nothing_left(emulated_cluster.hosts) == []
