"""Runs on the emulated cluster (launcher=emulated): one torchrun per host, rendezvous at the first
host, PS servers on hosts of their own. Lossless across namespaces, every rank on its own host,
the servers' addresses those of other hosts, links shaped, and nothing left behind on SIGTERM."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ddlbench.launch import netns
from ddlbench.trace import load_meta

from helpers import ddlbench, records, reference_parameters, terminate_once_iterating

pytestmark = pytest.mark.netns

PROTOCOL = ["model=tiny-resnet", "workers=2", "profile.warmup_iters=1", "profile.measured_iters=3",
            "profile.repeats=1", "local_batch=4", "trace=true", "save_params=true", "launcher=emulated"]


@pytest.fixture(scope="module")
def runs(emulated_cluster, tmp_path_factory) -> dict:
    """{method: record}: an all-reduce and a PS method (one server, so three hosts) on the
    session's cluster, which fits them and is reused."""
    results = tmp_path_factory.mktemp("emulated")
    ddlbench("method=bsp-a2a", *PROTOCOL, f"launcher.link={emulated_cluster.link}", results=results, check=True)
    ddlbench("method=bsp-ps", "servers=1", *PROTOCOL, f"launcher.link={emulated_cluster.link}", results=results,
             check=True)
    return {r["method"]: r for r in records(results)}


@pytest.mark.parametrize("method", ["bsp-a2a", "bsp-ps"])
def test_lossless_across_namespaces(runs, method):
    rec = runs[method]
    assert rec["status"] == "ok", rec["error"]
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{method} {name}: {m}")


@pytest.mark.parametrize("method", ["bsp-a2a", "bsp-ps"])
def test_every_rank_on_its_own_emulated_host_and_the_network_in_the_record(runs, emulated_cluster, method):
    rec = runs[method]
    ranks = rec["workers"] + rec["servers"]
    assert rec["rank_hosts"] == [f"ddlb-node{i}" for i in range(ranks)] and len(set(rec["hosts"])) == ranks
    net = rec["network"]
    assert net["emulated"] is True and net["link"] == emulated_cluster.link and len(net["measured_gbps"]) == ranks
    assert all(abs(g - 0.3) <= 0.05 * 0.3 for g in net["measured_gbps"]), net
    assert net["latency"].startswith("not emulated") and rec["env"]["GLOO_SOCKET_IFNAME"] == netns.IFNAME
    assert net["dropped_packets"] == 0  # the links' queues held every burst (a PS server's incast included)


def test_ps_servers_sit_on_other_hosts_by_their_addresses_in_the_trace(runs):
    rec = runs["bsp-ps"]
    net, W = rec["network"], rec["workers"]
    worker_addrs = {net["hosts"][h] for h in rec["rank_hosts"][:W]}
    server_addrs = [net["hosts"][h] for h in rec["rank_hosts"][W:]]
    for rank in range(W):  # each worker pushed to these addresses
        (seen,) = load_meta(rec["trace"][rank], "ps_servers")
        hosts = [a.removeprefix("tcp://").rsplit(":", 1)[0] for a in seen["addresses"]]
        assert hosts == server_addrs and not set(hosts) & worker_addrs and seen["host"] == rec["rank_hosts"][rank]
    (served,) = load_meta(rec["trace"][W], "ps_server")
    assert served["address"].startswith(f"tcp://{server_addrs[0]}:") and served["host"] == rec["rank_hosts"][W]


ALLREDUCE = textwrap.dedent("""
    import sys, time, datetime, torch, torch.distributed as dist
    rank, first, nbytes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"tcp://{first}:29400", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    x = torch.ones(nbytes // 4)
    dist.all_reduce(torch.ones(1))
    t0 = time.perf_counter()
    dist.all_reduce(x)
    dt = time.perf_counter() - t0
    assert float(x[0]) == 2.0
    print(dt, flush=True)
    dist.destroy_process_group()
""")


def test_shaping_holds_a_big_allreduce_takes_at_least_bytes_over_rate(emulated_cluster):
    """Two ranks' all-reduce sends each rank's whole tensor over its link (half in the
    reduce-scatter, half in the all-gather), so it cannot beat bytes * 8 / rate."""
    nbytes = 24 * 2 ** 20
    h0, h1 = emulated_cluster.hosts[:2]
    env = dict(os.environ, GLOO_SOCKET_IFNAME=netns.IFNAME)
    procs = [subprocess.Popen([*h.exec_prefix(), sys.executable, "-c", ALLREDUCE, str(r), h0.address, str(nbytes)],
                              stdout=subprocess.PIPE, text=True, env=env) for r, h in enumerate((h0, h1))]
    out = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    floor_s = nbytes * 8 / netns.check_rate(emulated_cluster.link)
    took_s = max(float(o) for o in out)
    assert took_s >= 0.98 * floor_s, (took_s, floor_s)  # tbf's bucket may start with a burst (< 1%)
    assert took_s < 4 * floor_s  # and the wire, not the CPU, set the pace


def test_sigterm_mid_run_records_the_failure_and_leaves_no_namespace_link_or_host_entry(emulated_cluster, tmp_path):
    """A run with a cluster of its own (the session's is taken down first), terminated while its
    ranks iterate: recorded as terminated, and `ip netns list`, `ip link` and /etc/hosts are
    as they were before it."""
    netns.down()
    before = [subprocess.run(c, capture_output=True, text=True).stdout for c in (["ip", "netns", "list"], ["ip", "-o", "link"])]
    hosts_before = Path(netns.HOSTS_FILE).read_text()
    try:
        terminate_once_iterating(["method=bsp-a2a", *PROTOCOL, f"launcher.link={emulated_cluster.link}",
                                  "profile.measured_iters=100000"], tmp_path, "pid-ddlb-node1-rank1", settle_s=2)
        (rec,) = records(tmp_path)
        assert rec["status"] == "failed" and "SIGTERM" in rec["error"] and rec["network"]["emulated"] is True
        after = [subprocess.run(c, capture_output=True, text=True).stdout for c in (["ip", "netns", "list"], ["ip", "-o", "link"])]
        assert netns.leftovers() == [] and Path(netns.HOSTS_FILE).read_text() == hosts_before
        assert after[0] == before[0] and [l.split(":")[1] for l in after[1].splitlines()] == \
            [l.split(":")[1] for l in before[1].splitlines()]
    finally:
        netns.up(len(emulated_cluster.hosts), emulated_cluster.link)
