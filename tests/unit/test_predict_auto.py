"""METHOD=auto (resolution and the record field), commbench's network fit, the measured profile."""
import json
import time
from dataclasses import replace

import pytest
import yaml

from ddlbench import config, launch
from ddlbench.predict import auto, cli, network, profile, simulate
from ddlbench.predict.network import Cluster, Link
from ddlbench.predict.profile import Profile


def toy_profile(model="tiny-resnet", batch=4):
    # 3 tensors of 1,000,000 elements; forward 0.1 s, backward 0.3 s (gradients at 0.1, 0.2, 0.3)
    n = 1_000_000
    return profile.Profile(model, batch, ["a", "b", "c"], [n, n, n], 4, ["c", "b", "a"], [0.3, 0.2, 0.1],
                           [0.0, 0.03, 0.06], 0.1, 0.3, [0.0, 0.0, 0.0], "test", batch / 0.4)


def test_network_for_each_cluster(tmp_path, monkeypatch):
    assert network.local_network_name("Node_7.example.org") == "local-node_7"
    assert auto.network_for("local", None, "100gbib") == "100gbib"  # NETWORK= overrides
    assert auto.network_for("emulated", "1gbit") == "emulated-1gbit"
    monkeypatch.setattr(network, "local_network_name", lambda: "local-box")
    assert auto.network_for("local", directory=tmp_path) == network.DEFAULT_LOCAL_NETWORK
    (tmp_path / "local-box.yaml").write_text("name: local-box\n")
    assert auto.network_for("local", directory=tmp_path) == "local-box"  # commbench's, once written
    with pytest.raises(ValueError, match="needs LINK"):
        auto.network_for("emulated")
    # CLUSTER=slurm: the partition's own fit, once make commbench CLUSTER=slurm has written it
    with pytest.raises(ValueError, match=r"PARTITION=gpu has no network config slurm-gpu yet; accepted: `make commbench"):
        auto.network_for("slurm", directory=tmp_path, partition="gpu")
    (tmp_path / "slurm-gpu.yaml").write_text("name: slurm-gpu\n")
    assert auto.network_for("slurm", directory=tmp_path, partition="gpu") == "slurm-gpu"
    with pytest.raises(ValueError, match="no default network"):
        auto.network_for("slurm", directory=tmp_path)


def test_auto_picks_the_predicted_fastest_and_says_so():
    # A slow link (1 Gb/s, 1 ms): 12 MB per iteration dwarfs 0.4 s of compute, so BSP (no overlap)
    # cannot win; whatever wins is the max of the predictions, which are all there.
    slow = Cluster("slow", intra=None, inter=Link(1e-3, 8e-9), gpus_per_node=1)
    choice = auto.resolve("tiny-resnet", 2, 4, slow, "derived", prof=toy_profile())
    assert choice["predicted"][choice["method"]] == max(choice["predicted"].values())
    assert choice["method"] not in ("bsp-a2a", "bsp-ps")
    assert choice["samples_per_sec"] == choice["predicted"][choice["method"]] and choice["network"] == "slow"
    assert choice["dominant"] in ("compute", "latency", "bandwidth", "server")
    override = auto.hydra_prediction(choice)
    assert " " not in override and override.startswith("prediction={method:'")


def test_auto_with_per_gpu_ps_predicts_it_and_runs_a_ps_winner_so(monkeypatch, capsys):
    """PS_TOPOLOGY=per-gpu: the PS methods are predicted with every worker pushing, and a PS winner
    runs with method.ps_topology=per-gpu (an all-reduce winner has no such setting)."""
    two_nodes = network.with_nodes(Cluster("two", intra=None, inter=Link(1e-3, 8e-9), gpus_per_node=1), 2,
                                   Link(1e-5, 1e-10), "test")
    prof = toy_profile()
    machine = auto.resolve("tiny-resnet", 4, 4, two_nodes, "derived", prof=prof, methods=("bsp-ps", "bsp-a2a"))
    gpu = auto.resolve("tiny-resnet", 4, 4, two_nodes, "derived", prof=prof, methods=("bsp-ps", "bsp-a2a"),
                       ps_topology="per-gpu")
    assert gpu["predicted"]["bsp-ps"] < machine["predicted"]["bsp-ps"]  # 4 pushers on 2 machines' links, not 2
    assert gpu["predicted"]["bsp-a2a"] == machine["predicted"]["bsp-a2a"]
    assert auto.resolve("tiny-resnet", 4, 4, two_nodes, "derived", prof=prof, methods=("bsp-ps",),
                        ps_topology="per-gpu")["overrides"] == ["method=bsp-ps", "method.ps_topology=per-gpu"]
    assert auto.resolve("tiny-resnet", 4, 4, two_nodes, "derived", prof=prof, methods=("bsp-a2a",),
                        ps_topology="per-gpu")["overrides"] == ["method=bsp-a2a"]
    assert machine["overrides"] == [f"method={machine['method']}"]
    # the command line: the overrides, the prediction last (make reproduce splits at its last space)
    seen, real = {}, auto.resolve

    def resolve(*a, **k):
        seen.update(k)
        return {**real("tiny-resnet", 4, 4, two_nodes, "derived", prof=prof, methods=("bsp-ps",),
                               ps_topology=k["ps_topology"]), "profile_source": "test"}
    monkeypatch.setattr(auto, "resolve", resolve)
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--network", "loopback", "--ps-topology", "per-gpu"]) == 0
    words = capsys.readouterr().out.split()
    assert seen["ps_topology"] == "per-gpu"
    assert words[:2] == ["method=bsp-ps", "method.ps_topology=per-gpu"] and words[2].startswith("prediction={")
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--ps-topology", "per-node"]) == 2
    assert "--ps-topology='per-node' (PS_TOPOLOGY with make) is unknown; accepted: per-machine, per-gpu" in \
        capsys.readouterr().err


def test_make_reproduce_passes_the_ps_topology_to_ps_methods_only():
    import subprocess

    from helpers import REPO

    def make(*args):
        return subprocess.run(["make", "-n", "reproduce", *args, "-o", ".venv/.installed"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    out = make("METHOD=auto", "PS_TOPOLOGY=per-gpu")
    assert out.returncode == 0 and "--ps-topology per-gpu" in out.stdout and '"${choice##* }"' in out.stdout
    assert "--ps-topology" not in make("METHOD=auto").stdout
    out = make("METHOD=bsp-ps,wfbp-ps", "PS_TOPOLOGY=per-gpu")
    assert "method=bsp-ps,wfbp-ps" in out.stdout and "method.ps_topology=per-gpu" in out.stdout
    out = subprocess.run(["make", "reproduce", "METHOD=all", "PS_TOPOLOGY=per-gpu", "-o", ".venv/.installed"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert ("reproduce: error: PS_TOPOLOGY=per-gpu with METHOD=all, whose bsp-a2a wfbp-a2a mg-wfbp bytescheduler-a2a "
            "ddp are not PS methods; accepted: METHOD=auto or PS methods only") in out.stderr


def test_auto_on_a_local_cluster_predicts_one_machine_of_the_runs_workers(monkeypatch, capsys):
    # the local launchers run every worker (and one PS server) on this machine; NETWORK= asks
    # for that network's own shape instead
    seen, given = [], []

    def resolve(model, workers, batch, net, *a, **k):
        seen.append(net)
        given.append(k.get("one_worker"))
        return {"method": "bsp-a2a", "overrides": ["method=bsp-a2a"], "samples_per_sec": 1.0, "network": "x",
                "dominant": "compute", "profile_source": "test", "predicted": {"bsp-a2a": 1.0}}
    monkeypatch.setattr(auto, "resolve", resolve)
    monkeypatch.setattr(auto, "network_for", lambda cluster, link=None, override=None, **k: "loopback")
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "local"]) == 0
    assert seen[-1].nodes(4) == (1, 4) and seen[-1].inter == network.load("loopback").inter
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "local", "--network", "local-box"]) == 0
    assert seen[-1].nodes(4) == (1, 4)  # NETWORK= names the links; the run still places its workers
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "emulated", "--link", "1gbit"]) == 0
    assert seen[-1].nodes(4) == (4, 1)  # (network_for is stubbed) an emulated host per worker: as configured
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "emulated", "--link", "1gbit",
                      "--workers-per-node", "2", "--intra-link", "10gbit"]) == 0
    assert seen[-1].nodes(4) == (2, 2) and seen[-1].intra.beta_s_per_byte == pytest.approx(8e-10)
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "emulated", "--link", "1gbit",
                      "--workers-per-node", "0"]) == 2
    assert "--workers-per-node=0 (GPUS_PER_NODE with make) is invalid; accepted: an integer >= 1" in capsys.readouterr().err
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--cluster", "local", "--workers-per-node", "2"]) == 0
    assert seen[-1].nodes(4) == (2, 2)  # GPUS_PER_NODE=2 locally: the PS layout of two nodes
    # ONE_WORKER: the one-worker throughput the profile is scaled to, handed to the prediction
    assert auto.main(["--model", "tiny-resnet", "--workers", "4", "--one-worker", "123"]) == 0
    assert given[-1] == 123.0 and given[0] is None


def test_a_slurm_runs_nodes_come_from_a_node_config(monkeypatch):
    # make commbench CLUSTER=slurm measures one rank per node: the link inside a node is unknown
    # until INTRA names a node config; Slurm's launcher puts 4 workers on a node by default
    measured = Cluster("slurm-gpu", intra=None, inter=Link(1e-5, 1e-10), gpus_per_node=1)
    assert auto.launcher_workers_per_node("slurm") == 4 and auto.launcher_workers_per_node("local") is None
    with pytest.raises(ValueError, match=r"GPUS_PER_NODE=4 on network 'slurm-gpu', which knows no link inside a node; "
                                         r"accepted: INTRA=<a node config: pcie3x16.*>, or GPUS_PER_NODE=1"):
        auto.placed("slurm", measured, 8)
    nodes = auto.placed("slurm", measured, 8, intra="pcie3x16")
    assert nodes.nodes(8) == (2, 4) and nodes.intra == network.load("pcie3x16").intra and nodes.inter == measured.inter
    assert nodes.name == "slurm-gpu+pcie3x16"
    assert auto.placed("slurm", measured, 16, 8, intra="pcie3x16").nodes(16) == (2, 8)  # GPUS_PER_NODE=8: as asked
    cpu = auto.placed("slurm", measured, 8, 2, intra="loopback")  # CPU nodes: processes over a node's loopback
    assert cpu.nodes(8) == (4, 2) and cpu.intra == network.load("loopback").inter
    assert auto.placed("slurm", measured, 8, 1).nodes(8) == (8, 1)  # one rank per node: as measured
    study = network.load("100gbib")  # a network that knows its nodes: GPUS_PER_NODE=2 of its 4
    assert auto.placed("slurm", study, 8, 2).nodes(8) == (4, 2) and auto.placed("slurm", study, 8, 2).intra == study.intra


def test_the_record_keeps_the_prediction_beside_the_measurement_and_its_config_hash_ignores_it():
    pred = auto.hydra_prediction({"method": "wfbp-a2a", "samples_per_sec": 12.5, "network": "loopback",
                                  "dominant": "compute", "tied": ["wfbp-ps", "bytescheduler-ps"]})
    compose = lambda *o: config.resolve(config._compose(["model=tiny-resnet", "workers=2", *o]))  # noqa: E731
    rec = launch.base_record(compose("method=wfbp-a2a", pred))
    assert rec["prediction"] == {"method": "wfbp-a2a", "samples_per_sec": 12.5, "network": "loopback",
                                 "dominant": "compute", "tied": ["wfbp-ps", "bytescheduler-ps"]}
    untied = auto.hydra_prediction({"method": "wfbp-a2a", "samples_per_sec": 12.5, "network": "loopback",
                                    "dominant": "compute", "tied": []})
    assert launch.base_record(compose("method=wfbp-a2a", untied))["prediction"]["tied"] == []
    plain = launch.base_record(compose("method=wfbp-a2a"))
    assert "prediction" not in plain and plain["config_hash"] == rec["config_hash"]


def commbench_rows(a=1e-4, b=2e-9):
    rows = [{"mode": "sizes", "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
             "backend": "gloo", "bytes": n, "time_us": (a + b * n) * 1e6, "time_us_p50": (a / 2 + b * n) * 1e6,
             "wrong": 0} for n in (1024, 65536, 1 << 20, 4 << 20)]
    # ignored: another worker count, dtype, collective, a failed job, and one element per rank (no ring)
    rows += [{**rows[0], "workers": 3, "time_us": 1.0}, {**rows[1], "dtype": "fp16", "time_us": 1.0},
             {**rows[2], "collective": "broadcast", "time_us": 1.0}, {"error": "x2 job timed out"},
             {**rows[0], "bytes": 4, "time_us": 1.0}]
    return rows


def test_commbench_fit_writes_a_network_the_predictor_loads(tmp_path):
    spec = network.commbench_network(commbench_rows(), "local-box", "test data")
    path = network.write_config(spec, tmp_path)
    assert path == tmp_path / "local-box.yaml"
    loaded = yaml.safe_load(path.read_text())
    assert loaded["data"]["bytes"] == [1024, 65536, 1 << 20, 4 << 20] and "test data" in loaded["sources"]["inter"]
    assert "ps" not in loaded  # no ps-mode rows
    c = network.load("local-box", tmp_path)
    # a line fits exactly: the 2-rank all-reduce of n bytes takes 1e-4 + 2e-9 n again (the mean
    # per call: a stream of all-reduces pays the tail the median leaves out)
    assert c.allreduce_s(1 << 20, 2, "ring") == pytest.approx(1e-4 + 2e-9 * (1 << 20))
    assert c.gpus_per_node == 1 and c.nodes(4) == (4, 1)


@pytest.mark.parametrize("first", ["mpi4py", "gloo"])
def test_the_fit_is_the_methods_backends_where_it_timed_them_however_the_rows_come(first):
    """make commbench times Gloo and mpi4py alike on a CPU machine (as many sizes each); a run's
    all-reduces are Gloo's, and mpi4py's shared memory is far faster on one machine. The tie
    used to go to whichever a set listed first, which differs from one process to the next."""
    gloo = commbench_rows()[:4]
    mpi = [{**r, "backend": "mpi4py", "time_us": r["time_us"] / 40} for r in gloo]
    rows = mpi + gloo if first == "mpi4py" else gloo + mpi
    spec = network.commbench_network(rows, "local-box", "test data")
    assert spec["description"].startswith("measured by make commbench: gloo on cpu")
    assert spec["inter"]["allreduce"]["alpha_s"] == pytest.approx(1e-4)
    # where only another backend was timed, that one
    only = network.commbench_network(mpi, "local-box", "test data")
    assert only["description"].startswith("measured by make commbench: mpi4py on cpu")


def test_commbench_times_more_workers_and_their_runs_are_predicted_with_it(tmp_path):
    """Four processes on a 2-core machine took 6-12 ms for a 1 KiB Gloo all-reduce, two 0.6-0.9
    ms: the 2-rank fit's links cannot extrapolate that. Where make commbench measured a worker
    count, its own fit is that count's all-reduce (by hand below), for the algorithm the backend
    runs, in the placement it was measured in; other counts still extrapolate."""
    from ddlbench.predict import simulate

    a4, b4 = 6e-3, 5e-9
    four = [{**commbench_rows()[0], "workers": 4, "bytes": n, "time_us": (a4 + b4 * n) * 1e6} for n in (1024, 1 << 20)]
    four += [{**four[0], "bytes": 16, "time_us": 1.0}]  # one element per rank: not a ring, left out
    spec = network.commbench_network(commbench_rows() + four, "local-box", "test data")
    fit = spec["inter"]["allreduce"]
    assert fit["by_ranks"] == {4: pytest.approx({"alpha_s": a4, "beta_s_per_byte": b4})}  # 3: one size, no fit
    assert fit["algorithm"] == "ring" and fit["one_machine"] and "4 workers" in spec["sources"]["by_ranks"]
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    n = 1 << 20
    assert c.allreduce_s(n, 4, "ring") == pytest.approx(a4 + b4 * n)
    link = c.inter  # 2 ranks: a = 1e-4, b = 2e-9 as per-link alpha, beta
    # the tree is not what Gloo ran: its model over 4 one-worker machines (2 log2 4 alphas)
    assert c.allreduce_s(n, 4, "tree") == pytest.approx(2 * 2 * link.alpha_s + 2 * n * link.beta_s_per_byte)
    assert c.allreduce_s(n, 8, "ring") == pytest.approx(2 * 7 * (link.alpha_s + n / 8 * link.beta_s_per_byte))
    assert c.allreduce_s(n, 2, "ring") == pytest.approx(1e-4 + 2e-9 * n)
    # a local run is 4 processes on this machine, as measured; 2 workers a host elsewhere is not
    assert network.on_one_machine(c, 4).allreduce_s(n, 4, "ring") == pytest.approx(a4 + b4 * n)
    assert network.with_nodes(c, 2, c.inter, "test").measured == {}
    across = network.commbench_network(commbench_rows() + four, "slurm-p", "test", shared_cores=False)
    network.write_config(across, tmp_path)
    assert network.on_one_machine(network.load("slurm-p", tmp_path), 4).measured == {}
    assert network.load("slurm-p", tmp_path).allreduce_s(n, 4, "ring") == pytest.approx(a4 + b4 * n)  # one per node
    # the simulator pays it, and explain's latency share is its a: one BSP all-reduce after a
    # compute-free step on 4 one-worker machines
    prof = Profile("toy", 1, ["p"], [n // 4], 4, ["p"], [0.0], [0.0], 0.0, 0.0, [0.0], "test", 1.0)
    opts = simulate.Options(stack="ddlbench", backend="gloo")
    assert simulate.simulate("bsp-a2a", prof, c, 4, opts).period_s == pytest.approx(a4 + b4 * n)
    assert simulate.explain("bsp-a2a", prof, c, 4, opts)["shares_s"]["latency"] == pytest.approx(a4)


def test_commbench_times_the_reduce_and_broadcast_inside_a_ps_machine_and_local_runs_pay_them(tmp_path):
    """Per-machine PS reduces each partition onto the machine's leader and broadcasts the pulled
    sum back (methods.ps_node: dist.reduce, dist.broadcast over the node's group). Four Gloo
    processes on this VM's 2 cores took 4-7 ms for a 1 KiB reduce, which the 2-rank links put at
    1.3 ms. Where make commbench timed them at a machine's worker count, a local run's node stage
    is that fit (by hand below); elsewhere, and for another backend's algorithm, the links'."""
    from ddlbench.predict import simulate

    (ar, br), (ab, bb), n = (5e-3, 3e-9), (1e-3, 1e-9), 1 << 20
    node = [{**commbench_rows()[0], "collective": c, "workers": w, "bytes": size, "time_us": (a + b * size) * 1e6}
            for c, a, b in (("reduce", ar, br), ("broadcast", ab, bb)) for w in (2, 4) for size in (1024, n)]
    spec = network.commbench_network(commbench_rows() + node, "local-box", "test data")
    assert spec["inter"]["reduce"]["by_ranks"] == {w: pytest.approx({"alpha_s": ar, "beta_s_per_byte": br})
                                                   for w in (2, 4)}
    assert spec["inter"]["broadcast"]["by_ranks"][4] == pytest.approx({"alpha_s": ab, "beta_s_per_byte": bb})
    assert "by_ranks" not in spec["inter"]["allreduce"]  # no all-reduce above 2 ranks was timed
    assert spec["inter"]["allreduce"]["one_machine"] and "reduce inside a machine" in spec["sources"]["reduce"]
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    here = network.on_one_machine(c, 4)  # a local run of 4: one machine of 4 workers, as measured
    assert here.node_stage_s("reduce", n, 4, "ring") == pytest.approx(ar + br * n)
    assert here.node_stage_s("broadcast", n, 4, "ring") == pytest.approx(ab + bb * n)
    links = network.with_nodes(c, 4, c.inter, "test")  # another placement: the links' model
    assert links.node_stage_s("reduce", n, 4, "ring") == links.node_stage_s("broadcast", n, 4, "ring") == \
        pytest.approx(3 * c.inter.time_s(n / 4) + c.inter.beta_s_per_byte * n / 4)
    assert here.node_stage_s("reduce", n, 4, "nccl") == pytest.approx(links.node_stage_s("reduce", n, 4, "nccl"))
    assert here.node_stage_s("reduce", n, 1, "ring") == 0.0
    # BSP-PS of one compute-free partition: reduce, then the round to the server, then broadcast;
    # the node stage is all that differs between the two placements
    prof = Profile("toy", 1, ["p"], [n // 4], 4, ["p"], [0.0], [0.0], 0.0, 0.0, [0.0], "test", 1.0)
    opts = simulate.Options(stack="ddlbench", backend="gloo")
    measured, modelled = (simulate.simulate("bsp-ps", prof, cl, 4, opts).period_s for cl in (here, links))
    assert measured - modelled == pytest.approx(ar + br * n + ab + bb * n - 2 * links.node_stage_s("reduce", n, 4, "ring"))
    what_if = simulate.explain("bsp-ps", prof, here, 4, opts)["shares_s"]
    assert what_if["latency"] >= ar + ab  # explain's latency what-if zeroes the measured a's too


def test_commbench_node_bursts_set_a_local_per_machine_ps_nodes_pace(tmp_path):
    """commbench's ps node bursts time per-machine PS's whole path per message (the node's reduce,
    the leader's control message, push, pull, broadcast) with W workers of this machine as one
    node. Where that is slower than the node's reduce and broadcast alone, a local run's node
    stage stretches to it (by hand below: BSP-PS of one compute-free partition); where it is
    faster, or in another placement, or for another algorithm, nothing changes."""
    from ddlbench.predict import simulate

    (ar, br), (ab, bb), n = (5e-3, 3e-9), (1e-3, 1e-9), 1 << 20
    node = [{**commbench_rows()[0], "collective": c, "workers": 4, "bytes": size, "time_us": (a + b * size) * 1e6}
            for c, a, b in (("reduce", ar, br), ("broadcast", ab, bb)) for size in (1024, n)]
    an, bn, keys = 2e-2, 1e-8, 32  # per key: slower than the reduce and broadcast
    burst = {"mode": "ps", "collective": "push_pull_node_burst", "device": "cpu", "workers": 4, "node_workers": 4,
             "servers": 1, "keys": keys, "wrong": 0}
    ac, bc = 2e-3, 5e-9  # the machine's busy CPU per key: 4 workers' share each
    bursts = [{**burst, "key_bytes": k, "time_us": keys * (an + bn * k) * 1e6, "cpu_busy_s": (ac + bc * k) / 4, "cores": 2}
              for k in (256, 65536)]
    bursts += [{**bursts[0], "time_us": 1.0, "wrong": 1}, {**bursts[0], "time_us": 1.0, "device": "cuda"},
               {**bursts[0], "node_workers": 3}]  # wrong, a GPU's, one size only: no fit
    spec = network.commbench_network(commbench_rows() + node + bursts, "local-box", "test data")
    assert spec["inter"]["node_ps"]["by_ranks"] == {4: pytest.approx({"alpha_s": an, "beta_s_per_byte": bn})}
    assert "ps node bursts" in spec["sources"]["node_ps"] and spec["inter"]["allreduce"]["one_machine"]
    assert spec["host_cpu"]["node_ps"] == {4: pytest.approx({"s_per_message": ac, "s_per_byte": bc})}
    # paced node bursts: their CPU per key is the charge; their wall time, mostly the pacing, no stage
    paced = [{**b, "pace_s": 4e-4, "time_us": 1e6, "cpu_busy_s": 2 * b["cpu_busy_s"]} for b in bursts[:2]]
    spec_paced = network.commbench_network(commbench_rows() + node + bursts + paced, "local-box", "test data")
    assert spec_paced["inter"]["node_ps"] == spec["inter"]["node_ps"]
    assert spec_paced["host_cpu"]["node_ps"] == {4: pytest.approx({"s_per_message": 2 * ac, "s_per_byte": 2 * bc})}
    # commbench's passes (PS_NODE_PASSES): one of three in a slow spell (1.5 times the time and the
    # CPU) moves neither the node's stage nor its CPU; the median is another pass's
    slow = [{**b, "time_us": 1.5 * b["time_us"], "cpu_busy_s": 1.5 * b["cpu_busy_s"], "pass": 2}
            for b in bursts[:2] + paced]
    passes = [{**b, "pass": p} for p in (0, 1) for b in bursts[:2] + paced] + slow
    spec_passes = network.commbench_network(commbench_rows() + node + passes, "local-box", "test data")
    assert spec_passes["inter"]["node_ps"] == spec["inter"]["node_ps"]
    assert spec_passes["host_cpu"]["node_ps"] == spec_paced["host_cpu"]["node_ps"]
    assert spec_passes["data_node_ps"] == spec["data_node_ps"]
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    here = network.on_one_machine(c, 4)
    assert here.node_ps_s(n, 4, "ring") == pytest.approx(an + bn * n)
    assert here.node_ps_s(n, 2, "ring") is None and here.node_ps_s(n, 4, "nccl") is None
    assert network.with_nodes(c, 4, c.inter, "test").node_ps_s(n, 4, "ring") is None  # another placement
    prof = Profile("toy", 1, ["p"], [n // 4], 4, ["p"], [0.0], [0.0], 0.0, 0.0, [0.0], "test", 1.0)
    opts = simulate.Options(stack="ddlbench", backend="gloo")
    without = replace(here, measured={k: v for k, v in here.measured.items() if k != "node_ps"})
    stretched, stages = (simulate.simulate("bsp-ps", prof, cl, 4, opts).period_s for cl in (here, without))
    assert stretched - stages == pytest.approx(an + bn * n - (ar + br * n + ab + bb * n))
    # WFBP-PS's one message (one partition) costs the machine the node's CPU per key, over its 2 cores;
    # per-gpu (every worker pushes, no node) it is the ps bursts' (none measured here: 0)
    cfg = simulate.method_config("wfbp-ps")
    plan = simulate.plan_for("wfbp-ps", prof, here, 4, opts)
    assert simulate.host_cpu_s(plan, prof, here, 4, cfg, opts) == pytest.approx((ac + bc * n) / 2)
    per_gpu = replace(opts, ps_topology="per-gpu")
    assert simulate.host_cpu_s(simulate.plan_for("wfbp-ps", prof, here, 4, per_gpu), prof, here, 4, cfg, per_gpu) == 0
    # a node that keeps pace with its reduce and broadcast: they stand
    fast = replace(here, measured={**here.measured, "node_ps": {4: network.Link(1e-4, 0.0)}})
    assert simulate.simulate("bsp-ps", prof, fast, 4, opts).period_s == pytest.approx(stages)
    # measured across nodes (no shared cores): no node bursts kept
    assert "node_ps" not in network.commbench_network(commbench_rows() + bursts, "slurm-p", "t", shared_cores=False)["inter"]
    bad = {**spec, "inter": {**spec["inter"], "node_ps": {"by_ranks": {1: {"alpha_s": 1e-3, "beta_s_per_byte": 0.0}}}}}
    network.write_config(bad, tmp_path)
    with pytest.raises(ValueError, match="node_ps by_ranks 1"):
        network.load("local-box", tmp_path)


def test_commbench_writes_this_machines_network_under_its_own_name(tmp_path, monkeypatch, capsys):
    # make commbench without --network-name: conf/network/local-<hostname>.yaml, which
    # CLUSTER=local then reads (network.this_machine)
    from ddlbench.commbench.cli import write_network

    monkeypatch.setattr(network, "conf_dir", lambda: tmp_path)
    monkeypatch.setattr(network, "local_network_name", lambda: "local-box")
    assert write_network(commbench_rows(), None, tmp_path) == tmp_path / "local-box.yaml"
    assert "(NETWORK=local-box)" in capsys.readouterr().out
    assert network.this_machine(tmp_path) == "local-box" and auto.network_for("local", directory=tmp_path) == "local-box"
    assert write_network(commbench_rows(), "none", tmp_path) is None


def test_commbench_ps_rounds_fit_the_simulators_ps_link(tmp_path):
    """commbench's ps mode (2 workers, 1 server) times a push/pull round of one partition; the
    fit is the simulator's round on 2 machines and 1 server (2 alpha + 4 n beta), so predicting
    that round again gives the measured line; beyond one partition the rows are left out."""
    from ddlbench.predict import simulate

    a, b = 1e-3, 4e-9
    ps_rows = [{"mode": "ps", "collective": "push_pull", "workers": 2, "servers": 1, "bytes": n, "wrong": 0,
                "partition_bytes": 4_096_000, "time_us": (a + b * n) * 1e6} for n in (1024, 65536, 1 << 20)]
    ps_rows.append({**ps_rows[0], "bytes": 16 << 20, "time_us": 1.0})  # several partitions: not fitted
    spec = network.commbench_network(commbench_rows() + ps_rows, "local-box", "test data")
    assert spec["ps"] == pytest.approx({"alpha_s": a / 2, "beta_s_per_byte": b / 4})
    assert spec["data_ps"]["bytes"] == [1024, 65536, 1 << 20]
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    assert (c.ps.alpha_s, c.ps.beta_s_per_byte) == pytest.approx((a / 2, b / 4)) and c.inter != c.ps
    # one BSP-PS message of n bytes (one partition) on 2 one-GPU machines with 1 server, after a
    # compute-free profile: the period is the round itself
    n = 1 << 20
    prof = Profile("toy", 1, ["p"], [n // 4], 4, ["p"], [0.0], [0.0], 0.0, 0.0, [0.0], "test", 1.0)
    t = simulate.simulate("bsp-ps", prof, c, 2, simulate.Options(stack="ddlbench", servers=1)).period_s
    assert t == pytest.approx(a + b * n, rel=1e-6)


def test_commbench_ps_bursts_fit_the_cpu_a_message_costs_the_shared_machine(tmp_path):
    """commbench's ps bursts: the machine's busy CPU per worker-message at two key sizes (the
    median of repeated records) give a line by hand; an emulated network nobody measured takes
    it from this machine's own config, as it takes alpha."""
    burst = {"mode": "ps", "collective": "push_pull_burst", "device": "cpu", "workers": 2, "servers": 1, "keys": 32,
             "wrong": 0, "cores": 2, "time_us": 1e4}
    rows = [{**burst, "key_bytes": 256, "cpu_busy_s": t} for t in (4e-4, 5e-4, 9e-4)]
    rows += [{**burst, "key_bytes": 65536, "cpu_busy_s": 8e-4}]
    rows += [{**burst, "key_bytes": 256, "cpu_busy_s": 1.0, "wrong": 3},  # ignored: wrong, 3 workers, a GPU's,
             {**burst, "key_bytes": 256, "workers": 3, "cpu_busy_s": 1.0},  # no CPU measured
             {**burst, "key_bytes": 256, "device": "cuda", "cpu_busy_s": 1.0}, {**burst, "key_bytes": 1024}]
    spec = network.commbench_network(commbench_rows() + rows, "loopback", "test data")
    slope = (8e-4 - 5e-4) / (65536 - 256)
    assert spec["host_cpu"] == pytest.approx({"cores": 2, "s_per_message": 5e-4 - 256 * slope, "s_per_byte": slope})
    assert "ps bursts" in spec["sources"]["host_cpu"]
    # paced bursts (one push every pace_s, as backward spaces its gradients), where there are
    # some, give the line instead: their messages do not share wake-ups
    paced = [{**burst, "key_bytes": 256, "cpu_busy_s": 7e-4, "pace_s": 4e-4},
             {**burst, "key_bytes": 65536, "cpu_busy_s": 1e-3, "pace_s": 4e-4}]
    with_paced = network.commbench_network(commbench_rows() + rows + paced, "loopback", "test data")
    slope_paced = (1e-3 - 7e-4) / (65536 - 256)
    assert with_paced["host_cpu"] == pytest.approx({"cores": 2, "s_per_message": 7e-4 - 256 * slope_paced,
                                                    "s_per_byte": slope_paced})
    assert "paced ps bursts" in with_paced["sources"]["host_cpu"]
    network.write_config(spec, tmp_path)
    c = network.load("loopback", tmp_path)
    assert c.host_cpu.message_s(65536) == pytest.approx(8e-4)
    assert network.load("emulated-300mbit", tmp_path).host_cpu == c.host_cpu
    assert "host_cpu" not in network.commbench_network(commbench_rows(), "x", "test")  # no bursts measured
    # measured across a Slurm job's nodes: workers and servers shared no machine's cores
    assert "host_cpu" not in network.commbench_network(commbench_rows() + rows, "slurm-p", "test", shared_cores=False)
    assert network.load("100gbib").host_cpu is None  # every worker a machine of its own
    (tmp_path / "bad.yaml").write_text("name: bad\ninter: {alpha_s: 1.0e-4, beta_s_per_byte: 1.0e-9}\n"
                                       "host_cpu: {cores: 0, s_per_message: 1.0e-4}\n")
    with pytest.raises(ValueError, match="cores >= 1"):
        network.load("bad", tmp_path)


def test_commbench_fusion_bursts_fit_the_cpu_an_all_reduce_costs_the_shared_machine(tmp_path):
    """commbench's fusion bursts carry the machine's busy CPU per worker and round; at each worker
    count, a (messages + 1, the round's barrier) + b bytes fits them (by hand: exact points), and
    the config keeps it beside the PS bursts' host_cpu (none measured here: a PS message 0)."""
    fits = {2: (4e-4, 1e-9), 4: (9e-4, 2e-9)}
    rows = [{"mode": "fusion", "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "backend": "gloo",
             "workers": w, "model": model, "strategy": strategy, "messages": m, "bytes": n, "wrong": 0, "cores": 2,
             "time_us": 1e4, "cpu_busy_s": a * (m + 1) + b * n}
            for w, (a, b) in fits.items()
            for model, tensors, n in (("tiny-resnet", 29, 312_168), ("resnet50", 161, 102_228_128))
            for strategy, m in (("per_tensor", tensors), ("fused", 1))]
    rows += [{**rows[0], "cpu_busy_s": 9.0, "wrong": 2}, {**rows[0], "cpu_busy_s": 9.0, "device": "cuda"},
             {**rows[0], "workers": 3}]  # wrong, a GPU's, one shape only at 3 workers: no fit
    spec = network.commbench_network(commbench_rows() + rows, "loopback", "test data")
    assert spec["host_cpu"]["s_per_message"] == 0.0 and spec["host_cpu"]["cores"] == 2
    assert spec["host_cpu"]["allreduce"] == {w: pytest.approx({"s_per_message": a, "s_per_byte": b})
                                             for w, (a, b) in fits.items()}
    assert "fusion bursts" in spec["sources"]["host_cpu_allreduce"]
    network.write_config(spec, tmp_path)
    c = network.load("loopback", tmp_path)
    assert c.host_cpu.allreduce_s(1e6, 4) == pytest.approx(9e-4 + 2e-3)
    assert c.host_cpu.allreduce_s(1e6, 4, ordered=True) == pytest.approx(9e-4 + 2e-3)  # no ordered round
    assert network.load("emulated-300mbit", tmp_path).host_cpu == c.host_cpu  # the same machine's cores
    # ordered rounds (each all-reduce launched as ByteScheduler's leader chooses it) at 2 workers:
    # their CPU less the bytes term over messages + 1, the median of two records; no other count
    ordered = [{**r, "strategy": "per_tensor_ordered", "order": "leader", "cpu_busy_s": c}
               for r, c in ((rows[0], 7e-4 * 30 + 1e-9 * 312_168), (rows[0], 9e-4 * 30 + 1e-9 * 312_168))]
    with_order = network.commbench_network(commbench_rows() + rows + ordered, "loopback", "test data")
    assert with_order["host_cpu"]["allreduce"][2] == pytest.approx(
        {"s_per_message": 4e-4, "s_per_byte": 1e-9, "ordered_s_per_message": 8e-4})
    assert "ordered_s_per_message" not in with_order["host_cpu"]["allreduce"][4]
    assert "leader's order, 0.800 ms" in with_order["sources"]["host_cpu_allreduce"]
    network.write_config(with_order, tmp_path)
    hc = network.load("loopback", tmp_path).host_cpu
    assert hc.allreduce_s(1e6, 2, ordered=True) == pytest.approx(8e-4 + 1e-3)
    assert hc.allreduce_s(1e6, 2) == pytest.approx(4e-4 + 1e-3)
    assert "host_cpu" not in network.commbench_network(commbench_rows() + rows, "slurm-p", "t", shared_cores=False)
    # a fit a constraint binds: the per-byte term alone where the per-message one would go negative
    a, b = network._nonnegative_two_term_fit([(1, 1000, 9.9), (50, 1000, 5.0)])  # exact: a = -0.1, b = 0.01
    assert a == 0.0 and b > 0
    bad = {**spec, "host_cpu": {**spec["host_cpu"], "allreduce": {2: {"s_per_message": -1.0, "s_per_byte": 0.0}}}}
    network.write_config(bad, tmp_path)
    with pytest.raises(ValueError, match="host_cpu"):
        network.load("loopback", tmp_path)


def test_commbench_fit_needs_two_sizes():
    with pytest.raises(ValueError, match="at least 2"):
        network.commbench_network(commbench_rows()[:1], "x", "test")


def test_the_intra_calibrations_of_the_study_node():
    # default: the study's 441 ms for 1.34 GB on 4 GPUs; the alternative: its code's table (277 ms)
    assert network.load("pcie3x16").allreduce_s(1.34e9, 4) == pytest.approx(0.441)
    assert network.load("pcie3x16-mgwfbp-table").allreduce_s(1.34e9, 4) == pytest.approx(4.204e-5 + 2.059e-10 * 1.34e9)
    swapped = network.with_intra(network.load("100gbib"), "pcie3x16-mgwfbp-table")
    assert swapped.intra == network.load("pcie3x16-mgwfbp-table").intra and swapped.inter == network.load("100gbib").inter


def test_measured_profile_of_a_tiny_model(tmp_path, monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(profile, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(profile, "WINDOW_S", 0.2)
    p = cli.load_profile("tiny-resnet", 2, None, "measured", "cpu")
    assert p.source.startswith("measured") and p.forward_s > 0 and p.backward_s > 0
    assert sorted(p.ready_names) == sorted(p.names) and p.ready_names[0] == p.names[-1]  # backward: last layer first
    assert p.samples_per_sec_1 == pytest.approx(2 / p.compute_s)
    assert cli.load_profile("tiny-resnet", 2, 50.0, "measured").samples_per_sec_1 == 50.0  # rescaled on request
    # at the threads one worker of the run will have (METHOD=auto on CPU: cores // workers), and
    # keyed by them even when left to the process's own setting
    import torch

    seen = []
    inner = profile._measure
    monkeypatch.setattr(profile, "_measure", lambda *a: (seen.append(torch.get_num_threads()), inner(*a))[1])
    torch.set_num_threads(2)
    try:
        one = cli.load_profile("tiny-resnet", 2, None, "measured", "cpu", threads=1)
        assert seen == [1] and torch.get_num_threads() == 2  # measured at 1, the caller's 2 back
    finally:
        torch.set_num_threads(before)
    assert "at 1 threads" in one.source
    assert {f.name for f in tmp_path.glob("*.json")} == {f"tiny-resnet-b2-cpu-t{before}-w0.2-measured.json",
                                                          "tiny-resnet-b2-cpu-t1-w0.2-measured.json"}
    with pytest.raises(ValueError, match="iters=0.*accepted: iters >= 1"):
        profile.measured("tiny-resnet", 2, iters=0, cache=False)


def test_measured_profile_of_a_worker_sharing_the_machine(tmp_path, monkeypatch):
    """METHOD=auto on CPU: W workers share this machine's cores, so the profile is measured while
    W-1 other processes run the same training step (no communication); they run during the
    measurement and are gone after it. (That two copies slow each other down is a fact of the
    machine, not asserted here: the benchmark predict_validation reports it.)"""
    import multiprocessing

    monkeypatch.setattr(profile, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(profile, "WINDOW_S", 0.2)
    alive = []
    inner = profile._measure
    monkeypatch.setattr(profile, "_measure", lambda *a: (alive.append(
        sum(c.is_alive() for c in multiprocessing.active_children())), inner(*a))[1])
    p = cli.load_profile("tiny-resnet", 2, None, "measured", "cpu", threads=1, sharers=3)
    assert alive == [2] and not multiprocessing.active_children()
    assert "beside 2 more worker(s)" in p.source and p.samples_per_sec_1 == pytest.approx(2 / p.compute_s)
    # a neighbour that dies during the measurement fails it: it was not beside W-1 workers
    real = profile._measure

    def kill_one(*a):
        out = real(*a)
        multiprocessing.active_children()[0].kill()
        multiprocessing.active_children()[0].join() if multiprocessing.active_children() else None
        return out
    monkeypatch.setattr(profile, "_measure", kill_one)
    with pytest.raises(RuntimeError, match="exited with .* during the measurement"):
        profile.measured("tiny-resnet", 2, "cpu", threads=1, sharers=2, cache=False)
    monkeypatch.setattr(profile, "_measure", real)
    assert not multiprocessing.active_children()
    assert (tmp_path / "tiny-resnet-b2-cpu-t1-s3-w0.2-measured.json").exists()
    # a neighbour that dies ends the measurement at once, with why, and none is left behind
    with pytest.raises(RuntimeError, match="neighbour worker.*exited with"):
        profile.measured("no-such-model", 2, "cpu", threads=1, sharers=2, cache=False)
    assert not multiprocessing.active_children()
    for bad, device in ((0, "cpu"), (2, "cuda")):
        with pytest.raises(ValueError, match=f"sharers={bad}.*accepted"):
            profile.measured("tiny-resnet", 2, device, sharers=bad, cache=False)
    # auto on the local and emulated clusters asks for the run's workers as sharers; not on Slurm
    seen = {}
    monkeypatch.setattr(auto, "resolve", lambda *a, **k: seen.update(k) or {
        "method": "ddp", "overrides": ["method=ddp"], "samples_per_sec": 1.0, "network": "loopback", "dominant": "compute",
        "profile_source": "x", "predicted": {"ddp": 1.0}})
    assert auto.main(["--model", "tiny-resnet", "--workers", "3", "--cluster", "local", "--network", "loopback"]) == 0
    assert seen["sharers"] == 3
    assert auto.main(["--model", "resnet50", "--workers", "8", "--cluster", "slurm", "--network", "100gbib"]) == 0
    assert seen["sharers"] == 1


def test_each_stack_and_backend_times_the_all_reduce_its_library_runs(monkeypatch):
    # the study's NCCL 2.4.8; Gloo's ring (runs here over Gloo were timed as NCCL's best of
    # ring and tree, whose tree latency grows with log2 of the hosts, not with the workers)
    assert cli.study_opts().algorithm == "nccl-2.4"
    assert cli.study_opts("local", "ddlbench", backend="gloo").algorithm == "ring"
    assert cli.study_opts("local", "ddlbench", backend="nccl").algorithm == "nccl"
    assert cli.study_opts("local", "ddlbench", "tree", backend="gloo").algorithm == "tree"  # asked for
    assert simulate.Options().algorithm == "nccl-2.4"  # one rule, also without study_opts
    assert simulate.Options(stack="ddlbench").algorithm == "nccl"
    # METHOD=auto on CPU predicts Gloo's ring: on 4 one-GPU hosts of a latency-bound link the ring
    # pays 6 alphas per all-reduce, the tree 4, so WFBP-A2A's prediction drops
    slow = Cluster("slow", intra=None, inter=Link(1e-3, 1e-10), gpus_per_node=1)
    cpu = auto.resolve("tiny-resnet", 4, 4, slow, "derived", prof=toy_profile())
    gpu = auto.resolve("tiny-resnet", 4, 4, slow, "derived", device="cuda", prof=toy_profile())
    assert cpu["predicted"]["wfbp-a2a"] < gpu["predicted"]["wfbp-a2a"]
    # METHOD=auto on Slurm predicts what the run will be: device auto there is cuda, so NCCL
    # (the Makefile passes no --device; auto took cpu, hence Gloo's ring, for a GPU run)
    seen = {}
    monkeypatch.setattr(auto, "resolve", lambda *a, **k: seen.update(device=a[5]) or {
        "method": "ddp", "overrides": ["method=ddp"], "samples_per_sec": 1.0, "network": "100gbib", "dominant": "compute",
        "profile_source": "x", "predicted": {"ddp": 1.0}})
    assert auto.main(["--model", "resnet50", "--workers", "8", "--cluster", "slurm", "--network", "100gbib"]) == 0
    assert seen["device"] == "cuda"
    assert auto.main(["--model", "tiny-resnet", "--workers", "2", "--cluster", "local", "--network", "loopback"]) == 0
    assert seen["device"] == "cpu"



def test_commbench_fusion_burst_gives_the_lane_speed_that_local_gloo_runs_use(tmp_path):
    """commbench's fusion mode launches a model's per-tensor all-reduces at once and waits: on
    Gloo's two threads they overlap. The config keeps the lane speed at which that burst, each
    all-reduce timed alone by the same worker count's fit, takes the measured time."""
    from ddlbench.commbench.modes import gradient_numels

    a, b = 1e-4, 2e-9
    alone = [a + b * 4 * n for n in gradient_numels("tiny-resnet")]
    burst_s = simulate.burst_s(alone, 2, 0.7)
    burst = {"mode": "fusion", "model": "tiny-resnet", "strategy": "per_tensor", "collective": "all_reduce",
             "dtype": "fp32", "device": "cpu", "workers": 2, "backend": "gloo", "time_us": burst_s * 1e6, "wrong": 0}
    rows = commbench_rows(a, b) + [burst, {**burst, "strategy": "fused", "time_us": 1.0},
                                   {**burst, "workers": 3}]  # 3 workers: no all-reduce fit to time it by
    spec = network.commbench_network(rows, "local-box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: pytest.approx(0.7)}
    assert spec["data_lanes"][2]["tiny-resnet"]["alone_s"] == pytest.approx(sum(alone))
    assert "fusion mode" in spec["sources"]["lanes"]
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    assert c.lane_speed == {2: pytest.approx(0.7)} and network.on_one_machine(c, 2).lane_speed == c.lane_speed
    assert "lane_speed_by_ranks" not in network.commbench_network(
        [{**r, "backend": "nccl"} for r in rows], "x", "test")["inter"]["allreduce"]  # one NCCL stream
    bad = yaml.safe_load((tmp_path / "local-box.yaml").read_text())
    bad["inter"]["allreduce"]["lane_speed_by_ranks"] = {2: 1.5}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="lane_speed_by_ranks 2: 1.5 is invalid"):
        network.load("bad", tmp_path)


def test_commbench_round_beside_compute_gives_what_starved_all_reduces_get(tmp_path):
    """commbench's per-tensor round paced beside every rank's compute (`per_tensor_computing`)
    is kept as measured (`data_lanes`: computing_measured_s, computing_pace_s); loading the
    config finds the share of a core the all-reduces get meanwhile (`Cluster.starved_share`) at
    which the simulator's round, on the lanes the burst gave, takes that time: each all-reduce's
    time alone by the fit, all of it needing a core on one machine."""
    from ddlbench.commbench.modes import gradient_numels

    a, b, pace = 1e-4, 2e-9, 4e-4
    alone = [a + b * 4 * n for n in gradient_numels("tiny-resnet")]
    burst = {"mode": "fusion", "model": "tiny-resnet", "strategy": "per_tensor", "collective": "all_reduce",
             "dtype": "fp32", "device": "cpu", "workers": 2, "backend": "gloo", "time_us": simulate.burst_s(alone, 2, 0.7) * 1e6,
             "wrong": 0}
    none_s = simulate.computing_round_s(alone, alone, 2, 0.7, 0.0, pace)
    whole_s = simulate.computing_round_s(alone, alone, 2, 0.7, 1.0, pace)
    assert whole_s < none_s
    computing = {**burst, "strategy": "per_tensor_computing", "pace_s": pace, "time_us": (none_s + whole_s) / 2 * 1e6}
    spec = network.commbench_network(commbench_rows(a, b) + [burst, computing], "local-box", "test data")
    kept = spec["data_lanes"][2]["tiny-resnet"]
    assert kept["computing_measured_s"] == pytest.approx((none_s + whole_s) / 2) and kept["computing_pace_s"] == pace
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: pytest.approx(0.7)}  # the burst's, as before
    network.write_config(spec, tmp_path)
    c = network.load("local-box", tmp_path)
    share = c.starved_share[2]
    assert 0 < share < 1 and "2 workers" in c.sources["starved_share"]
    assert share == pytest.approx(simulate.starved_share(alone, alone, (none_s + whole_s) / 2, 2, c.lane_speed[2], pace))
    assert simulate.computing_round_s(alone, alone, 2, c.lane_speed[2], share, pace) == \
        pytest.approx((none_s + whole_s) / 2, rel=1e-6)
    assert network.on_one_machine(c, 2).starved_share == c.starved_share
    # none measured: no share, and `simulate.Lanes` keeps its rule
    network.write_config(network.commbench_network(commbench_rows(a, b) + [burst], "plain", "test data"), tmp_path)
    assert network.load("plain", tmp_path).starved_share == {}
    bad = yaml.safe_load((tmp_path / "local-box.yaml").read_text())
    bad["data_lanes"][2]["tiny-resnet"]["computing_measured_s"] = 0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="computing_measured_s 0, computing_pace_s 0.0004 are invalid"):
        network.load("bad", tmp_path)


def test_a_burst_shorter_than_its_fit_allows_warns_that_the_sweep_ran_slow(tmp_path, capsys):
    """A burst of per-tensor all-reduces that took less than the size sweep's fit gives them even
    fully overlapped (both lanes at full speed, more than UNMATCHED_ROUND x) tells no lane speed:
    that sweep ran slower than its round (a disturbed machine), and predictions there would read
    too slow. The config keeps the lane speed at its ceiling and says so in `warnings`, which
    commbench prints as it writes the config; a burst the fit can explain warns of nothing."""
    from ddlbench.commbench import cli as commbench_cli
    from ddlbench.commbench.modes import gradient_numels

    a, b = 1e-4, 2e-9
    alone = [a + b * 4 * n for n in gradient_numels("tiny-resnet")]
    full_s = simulate.burst_s(alone, 2, 1.0)
    burst = {"mode": "fusion", "model": "tiny-resnet", "strategy": "per_tensor", "collective": "all_reduce",
             "dtype": "fp32", "device": "cpu", "workers": 2, "backend": "gloo", "wrong": 0,
             "time_us": full_s / 2 * 1e6}
    spec = network.commbench_network(commbench_rows(a, b) + [burst], "box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: 1.0}
    assert spec["data_lanes"][2]["tiny-resnet"]["unmatched"] == {"full_speed_s": pytest.approx(full_s),
                                                                  "measured_s": pytest.approx(full_s / 2)}
    [warning] = spec["warnings"]
    assert warning.startswith("all_reduce at 2 workers: ") and "tiny-resnet's 29 all-reduces" in warning
    assert f"{full_s * 1e3:.0f} ms even fully overlapped" in warning and "make commbench again" in warning
    network.write_config(spec, tmp_path)
    assert network.load("box", tmp_path).lane_speed == {2: 1.0}  # the config still loads
    within = {**burst, "time_us": full_s * 1e6}  # at full speed exactly: a speed, no warning
    assert "warnings" not in network.commbench_network(commbench_rows(a, b) + [within], "box", "test data")
    # a paced round the fit nearly explains, with a burst beside it that it does not (bl48's 4
    # ranks: paced 127 ms, burst 73, the fit 137 at full speed): the burst tells
    paced = {**burst, "strategy": "per_tensor_paced", "pace_s": 4e-4,
             "time_us": simulate.burst_s(alone, 2, 1.0, pace_s=4e-4) * 1e6 / 1.05}
    spec = network.commbench_network(commbench_rows(a, b) + [paced, burst], "box", "test data")
    assert spec["data_lanes"][2]["tiny-resnet"]["pace_s"] == 4e-4
    assert spec["data_lanes"][2]["tiny-resnet"]["unmatched"]["measured_s"] == pytest.approx(full_s / 2)
    assert len(spec["warnings"]) == 1
    # an emulated network's lanes are timed on its tc wire (network.emulated_lanes), not by this fit
    across = [{**r, "network": {"emulated": True, "link": "1gbit"}} for r in commbench_rows(a, b) + [burst]]
    assert "warnings" not in network.commbench_network(across, "emulated-1gbit", "test data")
    commbench_cli.write_network(commbench_rows(a, b) + [burst], "box", tmp_path, directory=tmp_path / "nets")
    assert "commbench: warning: all_reduce at 2 workers" in capsys.readouterr().err


def test_a_paced_round_by_hand_and_its_lane_speed_preferred_to_the_burst_where_it_tells_one():
    """Two lanes at half speed, three 1 s collectives launched 0.5 s apart: the first runs alone
    to 0.5, then beside the second (its last 0.5 s takes 1 s: ends 1.5); the third, launched at
    1, waits for a lane, then runs beside the second (its last 0.5 s: ends 2.5) and alone (its
    last 0.5 s: ends 3). commbench's paced rounds, where a worker count has them, give the lane
    speed instead of the bursts (the runs launch as they do), fitted with their pace."""
    from ddlbench.commbench.modes import gradient_numels

    assert simulate.burst_s([1.0] * 3, 2, 0.5, pace_s=0.5) == pytest.approx(3.0)
    assert simulate.burst_s([1.0] * 3, 2, 0.5, pace_s=2.0) == pytest.approx(5.0)  # never two at once
    assert simulate.lane_speed([1.0] * 3, 3.0, 2, pace_s=0.5) == pytest.approx(0.5)
    a, b = 1e-4, 2e-9
    alone = [a + b * 4 * n for n in gradient_numels("tiny-resnet")]
    burst = {"mode": "fusion", "model": "tiny-resnet", "strategy": "per_tensor", "collective": "all_reduce",
             "dtype": "fp32", "device": "cpu", "workers": 2, "backend": "gloo", "wrong": 0,
             "time_us": simulate.burst_s(alone, 2, 0.4) * 1e6}
    paced = {**burst, "strategy": "per_tensor_paced", "pace_s": 4e-5,
             "time_us": simulate.burst_s(alone, 2, 0.8, pace_s=4e-5) * 1e6}
    assert paced["time_us"] < burst["time_us"]
    spec = network.commbench_network(commbench_rows(a, b) + [burst], "box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: pytest.approx(0.4)}
    spec = network.commbench_network(commbench_rows(a, b) + [burst, paced], "box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: pytest.approx(0.8)}
    assert spec["data_lanes"][2]["tiny-resnet"]["pace_s"] == 4e-5
    # the burst kept beside the paced round, for an emulated network's wire (network.emulated_lanes)
    assert spec["data_lanes"][2]["tiny-resnet"]["burst_measured_s"] == pytest.approx(burst["time_us"] * 1e-6)
    assert "one every 0.04 ms where paced" in spec["sources"]["lanes"]
    # launched 4 ms apart, each all-reduce ends before the next starts at any speed: the round
    # took what its launches take and tells no speed (the fit would return its floor, 0.25), so
    # the burst's is kept; with no burst, the paced round's bound is all there is
    apart = {**paced, "pace_s": 4e-3, "time_us": simulate.burst_s(alone, 2, 1.0, pace_s=4e-3) * 1e6 + 50}
    assert simulate.burst_s(alone, 2, simulate.slowest_lane_speed(2), pace_s=4e-3) * 1e6 <= apart["time_us"]
    assert simulate.lane_speed(alone, apart["time_us"] * 1e-6, 2, pace_s=4e-3) == 0.25
    spec = network.commbench_network(commbench_rows(a, b) + [burst, apart], "box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: pytest.approx(0.4)}
    assert "pace_s" not in spec["data_lanes"][2]["tiny-resnet"]
    spec = network.commbench_network(commbench_rows(a, b) + [apart], "box", "test data")
    assert spec["inter"]["allreduce"]["lane_speed_by_ranks"] == {2: 0.25}
    assert "burst_measured_s" not in spec["data_lanes"][2]["tiny-resnet"]


def test_commbench_ordered_round_gives_the_leaders_time_per_choice(tmp_path):
    """commbench's ordered round (each per-tensor all-reduce launched once rank 0 told every rank
    to) is kept as measured (`data_order`); loading the config finds the time per choice at which
    the simulator's round (the same all-reduces, one at a time here: no lanes) takes it."""
    from ddlbench.commbench.modes import gradient_numels

    a, b = 1e-4, 2e-9
    alone = [a + b * 4 * n for n in gradient_numels("tiny-resnet")]
    measured_s = 0.002 + simulate.burst_s(alone, 1, 1.0, pace_s=0.002)  # 2 ms a choice
    ordered = {"mode": "fusion", "model": "tiny-resnet", "strategy": "per_tensor_ordered", "order": "leader",
               "messages": 29, "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
               "backend": "gloo", "wrong": 0, "time_us": measured_s * 1e6}
    spec = network.commbench_network(commbench_rows(a, b) + [ordered, {**ordered, "wrong": 3, "time_us": 1.0}],
                                     "box", "test data")
    assert spec["data_order"] == {2: {"tiny-resnet": {"messages": 29, "measured_s": pytest.approx(measured_s)}}}
    assert "ByteScheduler's order" in spec["sources"]["order"]
    network.write_config(spec, tmp_path)
    c = network.load("box", tmp_path)
    assert c.order_s == {2: pytest.approx(0.002, rel=1e-3)} and network.on_one_machine(c, 2).order_s == c.order_s
    assert "data_order" not in network.commbench_network(commbench_rows(a, b), "box", "test data")
    assert_rejected(tmp_path, "data_order", "measured_s", -1, "data_order 2 tiny-resnet.*is invalid")


def assert_rejected(tmp_path, data: str, field: str, value, match: str) -> None:
    """tmp_path/box.yaml with `data`'s 2-worker tiny-resnet `field` set to `value` (removed where
    None) fails to load with a one-line error matching `match`."""
    bad = yaml.safe_load((tmp_path / "box.yaml").read_text())
    if value is None:
        del bad[data][2]["tiny-resnet"][field]
    else:
        bad[data][2]["tiny-resnet"][field] = value
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match=match):
        network.load("bad", tmp_path)


def assert_loads_extra(tmp_path, spec, field: str, extra: dict, data: str, a: float, b: float) -> None:
    """`spec` written as tmp_path/box.yaml loads with `field` (a Cluster's after-compute extras)
    equal to `extra`, kept on one machine of 2 workers; commbench rows without such rounds write
    no `data`."""
    network.write_config(spec, tmp_path)
    c = network.load("box", tmp_path)
    assert getattr(c, field) == extra
    assert getattr(network.on_one_machine(c, 2), field) == getattr(c, field)
    assert data not in network.commbench_network(commbench_rows(a, b), "box", "test data")


def test_commbench_round_after_compute_gives_what_a_collective_pays_then(tmp_path):
    """commbench's round after compute (the model's gradients as one all-reduce once every rank
    computed) is kept as measured (`data_after_compute`); loading the config gives what it took
    beyond the config's own time for that all-reduce (a + b n at 2 ranks), none below 0."""
    a, b = 1e-4, 2e-9
    n = 312168
    after = {"mode": "fusion", "model": "tiny-resnet", "strategy": "fused_after_compute", "after_compute_s": 0.005,
             "messages": 1, "collective": "all_reduce", "dtype": "fp32", "device": "cpu", "workers": 2,
             "backend": "gloo", "wrong": 0, "bytes": n, "time_us": (a + b * n + 3e-4) * 1e6}
    quick = {**after, "workers": 3, "time_us": 1.0}  # faster than the fit: nothing to add
    spec = network.commbench_network(commbench_rows(a, b) + [after, quick, {**after, "wrong": 1, "time_us": 9e9}],
                                     "box", "test data")
    assert spec["data_after_compute"] == {
        2: {"tiny-resnet": {"bytes": n, "compute_s": 0.005, "measured_s": pytest.approx(a + b * n + 3e-4)}},
        3: {"tiny-resnet": {"bytes": n, "compute_s": 0.005, "measured_s": pytest.approx(1e-6)}}}
    assert "right after every rank computed" in spec["sources"]["after_compute"]
    assert_loads_extra(tmp_path, spec, "after_compute_s", {2: pytest.approx(3e-4, rel=1e-6), 3: 0.0},
                       "data_after_compute", a, b)
    for field, value in (("measured_s", 0), ("compute_s", None)):  # no compute: no refill to reckon with
        assert_rejected(tmp_path, "data_after_compute", field, value,
                        "data_after_compute 2 tiny-resnet.*is invalid; accepted: .*compute_s > 0")


def test_commbench_ps_round_after_compute_gives_what_a_ps_round_pays_then(tmp_path):
    """commbench's ps rounds after compute (one push/pull of a model's gradients once every worker
    computed) are kept as measured beside what the same workers' back-to-back rounds took at
    that size (the line through the two sizes around it: `data_ps_after_compute`); loading the
    config gives the difference, none below 0.
    A worker count without back-to-back rounds to compare with is left out."""
    a, b = 1e-4, 2e-9
    n = 312168

    def ps_row(workers, collective, nbytes, time_s, **extra):
        return {"mode": "ps", "collective": collective, "dtype": "fp32", "device": "cpu", "workers": workers,
                "servers": 1, "wire": "zmq", "partition_bytes": 4_096_000, "wrong": 0, "bytes": nbytes,
                "time_us": time_s * 1e6, **extra}
    pa, pb = 3e-4, 4e-9  # the back-to-back rounds: t = pa + pb n, at 2 and at 4 workers
    rows = [ps_row(w, "push_pull", m, pa + pb * m) for w in (2, 4) for m in (1024, 65536, 1048576)]
    # a size far off the line (as a token bucket bends it): the two sizes around n decide, not a fit
    rows.append(ps_row(2, "push_pull", 4_000_000, 1.0))
    after = {"model": "tiny-resnet", "after_compute_s": 0.005}
    rows += [ps_row(2, "push_pull_after_compute", n, pa + pb * n + 5e-4, **after),
             ps_row(2, "push_pull_after_compute", n, 9.0, **after, wrong=1),  # a wrong round: not read
             ps_row(3, "push_pull_after_compute", n, 1e-3, **after),  # nothing back to back to compare
             ps_row(4, "push_pull_after_compute", n, 1e-4, **after)]  # faster than back to back: 0
    spec = network.commbench_network(commbench_rows(a, b) + rows, "box", "test data")
    assert spec["data_ps_after_compute"] == {
        2: {"tiny-resnet": {"bytes": n, "compute_s": 0.005, "measured_s": pytest.approx(pa + pb * n + 5e-4),
                            "back_to_back_s": pytest.approx(pa + pb * n, rel=1e-6)}},
        4: {"tiny-resnet": {"bytes": n, "compute_s": 0.005, "measured_s": pytest.approx(1e-4),
                            "back_to_back_s": pytest.approx(pa + pb * n, rel=1e-6)}}}
    assert "push_pull_after_compute" in spec["sources"]["ps_after_compute"]
    assert_loads_extra(tmp_path, spec, "ps_after_compute_s", {2: pytest.approx(5e-4, rel=1e-4), 4: 0.0},
                       "data_ps_after_compute", a, b)
    assert_rejected(tmp_path, "data_ps_after_compute", "measured_s", 0,
                    "data_ps_after_compute 2 tiny-resnet.*is invalid; accepted: .*measured_s > 0")


def test_commbench_ps_landing_rounds_give_how_early_each_reply_lands(tmp_path):
    """commbench's landing rounds (every worker pushing at once after a barrier, each timing its
    own round) are kept per worker count and size as the median over records of each order's gap
    to the slowest (`data_ps_landing`); loading the config gives them in replies' times at the PS
    wire's rate (here the all-reduce fit's 2e-9 s/B), which the simulator takes per size on the
    line in log size; a bad profile is refused in one line."""
    a, b = 1e-4, 2e-9

    def landing(workers, nbytes, gaps, **extra):
        return {"mode": "ps", "collective": "push_pull_landing", "dtype": "fp32", "device": "cpu",
                "workers": workers, "servers": 1, "wire": "zmq", "partition_bytes": 4_096_000, "wrong": 0,
                "bytes": nbytes, "time_us": 1e3, "gaps_s": gaps, **extra}
    rows = [landing(4, 1 << 20, [6e-3, 3e-3, 1e-3, 0.0]), landing(4, 1 << 20, [8e-3, 2e-3, 1e-3, 0.0]),
            landing(4, 1 << 20, [7e-3, 4e-3, 0.0, 0.0]),
            landing(4, 1 << 16, [4e-4, 2e-4, 1e-4, 0.0]),
            landing(4, 1 << 16, [9.0, 9.0, 9.0, 0.0], wrong=1),  # a wrong round: not read
            landing(2, 1 << 16, [1e-4, 0.0])]
    spec = network.commbench_network(commbench_rows(a, b) + rows, "box", "test data")
    assert spec["data_ps_landing"] == {
        2: {"bytes": [1 << 16], "gaps_s": [[1e-4, 0.0]]},
        4: {"bytes": [1 << 16, 1 << 20], "gaps_s": [[4e-4, 2e-4, 1e-4, 0.0], [7e-3, 3e-3, 1e-3, 0.0]]}}
    assert "push_pull_landing" in spec["sources"]["ps_landing"]
    network.write_config(spec, tmp_path)
    c = network.load("box", tmp_path)
    unit_64k, unit_1m = (1 << 16) * b, (1 << 20) * b  # one reply's time at the rate
    assert c.landing_gaps(4, 1 << 16) == pytest.approx([4e-4 / unit_64k, 2e-4 / unit_64k, 1e-4 / unit_64k, 0.0])
    assert c.landing_gaps(4, 1 << 30) == pytest.approx([7e-3 / unit_1m, 3e-3 / unit_1m, 1e-3 / unit_1m, 0.0])
    assert c.landing_gaps(4, 1 << 18)[0] == pytest.approx((4e-4 / unit_64k + 7e-3 / unit_1m) / 2)  # halfway in log
    assert c.landing_gaps(3, 1 << 16) is None
    assert network.on_one_machine(c, 2).ps_landing == c.ps_landing
    assert "data_ps_landing" not in network.commbench_network(commbench_rows(a, b), "box", "test data")
    for bad in ({"bytes": [1 << 16], "gaps_s": [[1e-4]]}, {"bytes": [1 << 16], "gaps_s": [[-1e-4, 0.0]]},
                {"bytes": [1 << 20, 1 << 16], "gaps_s": [[0.0, 0.0], [0.0, 0.0]]}):
        broken = {**spec, "name": "bad", "data_ps_landing": {2: bad}}
        network.write_config(broken, tmp_path)
        with pytest.raises(ValueError, match=r"data_ps_landing 2: .* is invalid; accepted: workers >= 2"):
            network.load("bad", tmp_path)


def test_auto_names_the_methods_tied_with_its_pick(monkeypatch, capsys):
    """A link so fast that every overlapping method is compute-bound: they tie (cli.TIE_REL), the run
    takes the fastest, and the ties are printed and kept in the record's prediction."""
    fast = Cluster("fast", intra=None, inter=Link(1e-9, 1e-15), gpus_per_node=1)
    choice = auto.resolve("tiny-resnet", 2, 4, fast, "derived", prof=toy_profile(),
                          methods=("bsp-a2a", "wfbp-a2a", "mg-wfbp"))
    top = choice["predicted"][choice["method"]]
    assert choice["method"] not in choice["tied"] and choice["tied"]
    assert all(choice["predicted"][m] >= top * (1 - cli.TIE_REL) for m in choice["tied"])
    assert set(choice["tied"]) | {choice["method"]} == {m for m, v in choice["predicted"].items()
                                                          if v >= top * (1 - cli.TIE_REL)}
    monkeypatch.setattr(auto, "resolve", lambda *a, **k: {**choice, "profile_source": "test"})
    assert auto.main(["--model", "tiny-resnet", "--workers", "2", "--network", "loopback"]) == 0
    out = capsys.readouterr()
    assert (f"tied with it (within 0.1% at the model's communication and at 2x it, not ranked by the model): "
            f"{', '.join(choice['tied'])}") in out.err
    assert "tied:['" in out.out.split()[-1]


@pytest.mark.parametrize("argv, needles", [
    (["--workers", "0"], ["--workers=0", "WORKERS", "accepted: an integer >= 1"]),
    (["--workers", "-1"], ["--workers=-1", "WORKERS", "accepted: an integer >= 1"]),
    (["--workers", "abc"], ["--workers='abc'", "WORKERS", "accepted: an integer"]),
    (["--workers", "2", "--cluster", "foo"], ["--cluster='foo'", "CLUSTER", "accepted: local, emulated, slurm"]),
    (["--workers", "2", "--profile-from", "foo"], ["--profile-from='foo'", "accepted: derived, measured"]),
    (["--workers", "2", "--ps-topology", "foo"], ["--ps-topology='foo'", "accepted: per-machine, per-gpu"]),
    (["--workers", "2", "--one-worker", "x"], ["--one-worker='x'", "ONE_WORKER", "accepted: a number"]),
    (["--workers", "2", "--workers-per-node", "x"], ["--workers-per-node='x'", "GPUS_PER_NODE", "accepted: an integer"]),
    (["--workers", "2", "--local-batch", "0"], ["--local-batch=0", "accepted: an integer >= 1"]),
    (["--workers", "2", "--profile", "foo"], ["--profile='foo'", "PROFILE", "accepted: local, study"]),
    (["--workers", "2", "--device", "foo"], ["--device='foo' (DEVICE with make) is invalid", "accepted: auto, cpu, cuda"]),
    (["--workers", "2", "--model", "vgg16"], ["--model='vgg16' (MODEL with make)", "accepted: "]),
    (["--workers", "2", "--bogus"], ["unrecognized arguments: --bogus"]),
])
def test_auto_bad_inputs_are_one_line_errors_before_any_work(monkeypatch, capsys, argv, needles):
    """make reproduce METHOD=auto's bad WORKERS, CLUSTER, ...: one line naming the value and what is
    accepted, exit 2 (make stops), before a profile is measured; never a traceback or usage block."""
    monkeypatch.setattr(cli, "load_profile", lambda *a, **k: pytest.fail("profiled despite a bad input"))
    try:
        rc = auto.main(["--model", "tiny-resnet", "--network", "loopback", *argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("auto: error: "), err
    assert "accepted: " in err and "Traceback" not in err and "usage:" not in err
    for needle in needles:
        assert needle in err


def test_auto_beside_other_workers_charges_bytescheduler_its_machinery_measured_there(monkeypatch):
    """Workers sharing this machine's cores (sharers > 1): ByteScheduler's machinery, measured
    beside them at the run's threads (profile.machinery_s), slows its predictions, and only
    theirs; the eager all-reduces' launch cost is measured for them; alone (sharers 1) nothing
    is measured."""
    asked, launches = [], []
    monkeypatch.setattr(profile, "machinery_s", lambda *a, **k: asked.append(a) or {"machinery_s": 0.05})
    # and an eager all-reduce's launch (profile.measure_launch), kept in the profiles' cache
    monkeypatch.setattr(profile, "measure_launch", lambda *a, **k: launches.append((a, k)) or (1e-4, "fixed"))
    slow = Cluster("slow", intra=None, inter=Link(1e-3, 8e-9), gpus_per_node=1)
    methods = ("bytescheduler-a2a", "wfbp-a2a")
    alone = auto.resolve("tiny-resnet", 2, 4, slow, "derived", prof=toy_profile(), methods=methods)
    assert asked == [] and launches == []
    beside = auto.resolve("tiny-resnet", 2, 4, slow, "derived", prof=toy_profile(), methods=methods, threads=1,
                          sharers=2)
    assert asked == [("tiny-resnet", 4, 1, 2)]
    assert launches == [(("tiny-resnet", 4, 1), {"cache_dir": profile.CACHE_DIR})]
    auto.resolve("tiny-resnet", 2, 4, slow, "derived", prof=toy_profile(), methods=("bytescheduler-a2a", "wfbp-ps"),
                 threads=1, sharers=2)
    assert len(launches) == 1  # no eager all-reduce among them: nothing measured
    assert beside["predicted"]["wfbp-a2a"] == alone["predicted"]["wfbp-a2a"]
    opts = replace(cli.study_opts("local", "ddlbench", backend="gloo"), bytescheduler_cpu_s=0.05)
    expected = simulate.simulate("bytescheduler-a2a", toy_profile(), slow, 2, opts).samples_per_sec(4)
    assert beside["predicted"]["bytescheduler-a2a"] == pytest.approx(expected, abs=1e-3)
    assert beside["predicted"]["bytescheduler-a2a"] < alone["predicted"]["bytescheduler-a2a"]


def test_a_kept_launch_timing_is_read_back_and_a_broken_one_measured_anew(tmp_path, monkeypatch):
    """profile.measure_launch keeps its timing per model, batch, threads and rounds in
    `cache_dir` and reads it back without starting its process; a half-written or negative one
    is measured anew; fewer than three rounds (plain, WFBP and bare rotate) is refused."""
    import multiprocessing

    name = f"tiny-resnet-b4-cpu-t1-r{profile.LAUNCH_ROUNDS}x{profile.LAUNCH_ITERS}-launch.json"
    (tmp_path / name).write_text(json.dumps({"launch_s": 8e-5, "source": "kept"}))

    def no_process(*a):
        raise AssertionError("measured")
    monkeypatch.setattr(multiprocessing, "get_context", no_process)
    assert profile.measure_launch("tiny-resnet", 4, 1, cache_dir=tmp_path) == (8e-5, "kept")
    for broken in ("{", '{"launch_s": -1, "source": "x"}', '{"launch_s": 1e-4}'):
        (tmp_path / name).write_text(broken)
        with pytest.raises(AssertionError, match="measured"):
            profile.measure_launch("tiny-resnet", 4, 1, cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="measured"):  # another thread count: not this one's
        profile.measure_launch("tiny-resnet", 4, 2, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="rounds=2, iters=5 are invalid; accepted: rounds >= 3"):
        profile.measure_launch("tiny-resnet", 4, 1, rounds=2, iters=5)


def test_the_copy_fit_recovers_hand_worked_costs():
    # 2 us a tensor and 40 GB/s: 64 x 64 B take 64 x 2 us + 2 x 4096 B / 40 GB/s; 4 x 8 MiB take
    # 4 x 2 us + 2 x 32 MiB / 40 GB/s
    layouts = profile.COPY_LAYOUTS
    times = [k * 2e-6 + 2 * 4 * k * n / 40e9 for k, n in layouts]
    assert profile.fit_copy(layouts, times) == pytest.approx((2e-6, 40e9))


def test_the_copy_microbenchmark_times_the_runtimes_own_unpack(monkeypatch):
    """measure_copy times methods.grouped's pack and unpack, the code a run's fused messages go
    through: a slower unpack (1 ms more a call) shows as a per-tensor cost of about 1 ms / 2 / 64."""
    from ddlbench.methods import grouped

    per_tensor, bps, source = profile.measure_copy("cpu", 1, repeats=3)
    assert 0 <= per_tensor < 1e-4 and bps > 1e8 and "1 threads" in source
    real = grouped.unpack

    def slow(buf, tensors):
        time.sleep(1e-3)
        real(buf, tensors)
    monkeypatch.setattr(grouped, "unpack", slow)
    slowed, _, _ = profile.measure_copy("cpu", 1, repeats=3)
    assert slowed > per_tensor + 4e-6
    with pytest.raises(ValueError, match="device 'meta' is not measured for copies; accepted: cpu"):
        profile.measure_copy("meta")


def test_a_kept_copy_timing_is_read_back_not_measured_again(tmp_path, monkeypatch):
    """measure_copy with a cache_dir keeps its timing there (per device, threads, repeats) and
    returns it after without timing anything: a bench's copies as its machine gave them, the
    same at every validation of its runs. Another thread count is measured anew."""
    from ddlbench.methods import grouped

    first = profile.measure_copy("cpu", 1, repeats=3, cache_dir=tmp_path)
    assert (tmp_path / "copy-cpu-t1-r3.json").exists()

    def refuse(*a):
        raise AssertionError("timed again")
    monkeypatch.setattr(grouped, "pack", refuse)
    assert profile.measure_copy("cpu", 1, repeats=3, cache_dir=tmp_path) == first
    with pytest.raises(AssertionError, match="timed again"):
        profile.measure_copy("cpu", 2, repeats=3, cache_dir=tmp_path)
    for broken in ("{", "[1, 2]", '{"tensor_s": 1e-6, "Bps": 0, "source": "x"}'):  # half-written, or not a timing
        (tmp_path / "copy-cpu-t1-r3.json").write_text(broken)
        with pytest.raises(AssertionError, match="timed again"):  # measured anew, not read as one
            profile.measure_copy("cpu", 1, repeats=3, cache_dir=tmp_path)
