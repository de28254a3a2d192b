"""BytePS's topology on this host: 4 CPU workers laid out as 2 nodes of 2 (local launcher,
`launcher.workers_per_node=2`), with the per-machine default (reduce in the node, the node's
leader pushes and pulls, broadcast in the node) and the per-gpu option (every worker pushes).

Both stay lossless; servers default to one per node; only the nodes' leaders (ranks 0 and 2)
push, so the servers take in half the bytes per iteration that per-gpu sends them; and the
record says which topology ran. Also: a server waits for its first push under
`startup_timeout_s`, not the communication timeout, on both wires.
"""
from __future__ import annotations

import os
import socket
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from ddlbench.trace import load as load_trace
from helpers import REPO, ddlbench, iterations, records, reference_parameters

pytestmark = pytest.mark.multiproc

METHODS = ["bsp-ps", "wfbp-ps", "bytescheduler-ps"]
LAYOUT = ["model=tiny-resnet", "workers=4", "launcher.workers_per_node=2"]
PROTOCOL = ["profile.warmup_iters=1", "profile.measured_iters=3", "profile.repeats=1", "local_batch=4",
            "trace=true", "save_params=true"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{(method, topology): record}: 4 workers as 2 nodes of 2, 6 processes on this host."""
    out = {}
    for topology in ("per-machine", "per-gpu"):
        results = tmp_path_factory.mktemp(topology)
        ddlbench("--multirun", f"method={','.join(METHODS)}", f"method.ps_topology={topology}", *LAYOUT, *PROTOCOL,
                 results=results, check=True, timeout=600)
        for r in records(results):
            out[(r["method"], topology)] = r
    return out


def model_bytes(rec) -> int:
    return sum(p.numel() * p.element_size() for p in reference_parameters(Path(rec["run_dir"])).values())


def server_events(rec, name: str) -> list[dict]:
    return [e for r in range(rec["workers"], rec["workers"] + rec["servers"])
            for e in load_trace(rec["trace"][r]) if e["name"] == name]


@pytest.mark.parametrize("topology", ["per-machine", "per-gpu"])
@pytest.mark.parametrize("method", METHODS)
def test_lossless_on_two_nodes_of_two(runs, method, topology):
    rec = runs[(method, topology)]
    assert rec["status"] == "ok", rec["error"]
    assert rec["params_consistent"]
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{method} {topology} {name}: {m}")


@pytest.mark.parametrize("method", METHODS)
def test_per_machine_is_the_default_recorded_with_one_server_per_node(runs, method):
    rec = runs[(method, "per-machine")]
    assert rec["servers"] == 2 and rec["config"]["launcher"]["workers_per_node"] == 2
    assert (rec["ps_topology"], rec["pushers_per_key"], rec["workers_per_node"]) == ("per-machine", 2, 2)
    assert rec["server_engine_threads"] == 8 and rec["ps_wire"] == "zmq"
    assert all(s["pushers_per_key"] == 2 and s["engine_threads"] == 8 for s in rec["server_stats"])
    other = runs[(method, "per-gpu")]
    assert (other["ps_topology"], other["pushers_per_key"], other["servers"]) == ("per-gpu", 4, 2)


@pytest.mark.parametrize("method", METHODS)
def test_only_the_node_leaders_push_and_servers_take_half_the_bytes_of_per_gpu(runs, method):
    machine, gpu = runs[(method, "per-machine")], runs[(method, "per-gpu")]
    assert {e["args"]["worker"] for e in server_events(machine, "push_received")} == {0, 2}
    assert {e["args"]["worker"] for e in server_events(gpu, "push_received")} == {0, 1, 2, 3}
    model = model_bytes(machine)
    for rec, pushers in ((machine, 2), (gpu, 4)):
        per_iter = sum(s["bytes_in"] for s in rec["server_stats"]) / rec["iterations_total"]
        assert per_iter == pushers * model  # nodes x model bytes; per-gpu: workers x model bytes
        assert all(e["args"]["pushes"] <= pushers for e in server_events(rec, "sum"))
    for rank in (1, 3):  # followers never talk to the servers
        assert not [e for e in load_trace(machine["trace"][rank]) if e["name"] == "push_pull"]


@pytest.mark.parametrize("method", METHODS)
def test_each_message_is_reduced_in_the_node_pushed_by_its_leader_then_broadcast(runs, method):
    """The pipeline in the leader's trace: node reduce issued before its pushes leave, every
    pull landed before the node's broadcast; every rank reduces and broadcasts every message."""
    rec = runs[(method, "per-machine")]
    for rank in range(4):
        for it, cats in iterations(rec, rank).items():
            by = defaultdict(lambda: defaultdict(list))
            for e in cats["comm"]:
                by[e["args"]["group"]][e["name"]].append(e)
            assert by, f"rank {rank} iteration {it} communicates"
            for g, ev in by.items():
                assert len(ev["node_reduce"]) == len(ev["node_broadcast"]) == 1
                assert ev["node_reduce"][0]["args"]["leader"] == (0 if rank < 2 else 2)
                if rank in (0, 2):
                    assert ev["push_pull"], f"leader {rank} pushes message {g}"
                    reduce_ts = ev["node_reduce"][0]["ts"]
                    bcast_ts = ev["node_broadcast"][0]["ts"]
                    assert all(reduce_ts <= p["ts"] and p["ts"] + p["dur"] <= bcast_ts for p in ev["push_pull"])
                else:
                    assert not ev["push_pull"]


def test_servers_sum_on_engine_threads_keys_spread_over_them(runs):
    rec = runs[("wfbp-ps", "per-machine")]
    for stats in rec["server_stats"]:
        assert len(stats["keys_per_engine"]) == 8 and sum(stats["keys_per_engine"]) == stats["keys"]
    used = {e["args"]["engine"] for e in server_events(rec, "sum")}
    assert len(used) > 1  # 29 tensors' keys do not all land on one thread
    owner = {}
    for e in server_events(rec, "sum"):  # a key is always summed by the same thread
        assert owner.setdefault((e["args"]["server"], e["args"]["key"]), e["args"]["engine"]) == e["args"]["engine"]


# -- start-up: the first push may come long after the server starts -----------------------------
STARTUP_JOB = r"""
import os, sys, time, torch, torch.distributed as dist
from datetime import timedelta
from ddlbench.methods import Context, ps_engine, ps_node
from ddlbench.trace import NullTracer
from omegaconf import OmegaConf

wire, delay_s, servers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
if rank == 0 and "slow-stop" in sys.argv:  # the worker's thread stalls after each non-push post
    from ddlbench.methods import ps_zmq
    post = ps_zmq.Mailbox.post
    def slow(self, item):
        post(self, item)
        if not (isinstance(item, tuple) and ps_zmq._parse(item[1])[0] == ps_zmq.PUSH):
            time.sleep(1.0)
    ps_zmq.Mailbox.post = slow
dist.init_process_group("gloo", rank=rank, world_size=1 + servers, timeout=timedelta(seconds=2))
startup = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
method = OmegaConf.create({"transport": wire, "ps_topology": "per-gpu", "server_engine_threads": 2})
layout = ps_node.setup(method, 1, servers, 1, 2, 60, startup)  # comm_timeout_s=2, startup_timeout_s=60
engine = ps_engine(method)
if rank >= 1:
    stats = engine.serve(rank, layout, NullTracer())
    print(f"served {stats['pushes']}", flush=True)  # one write: the ranks share the pipe
else:
    ctx = Context(rank=0, world=1, device=torch.device("cpu"), tracer=NullTracer(),
                  extra={"comm_timeout_s": 2, "startup_timeout_s": 60})
    pp = engine.TRANSPORT(ctx, layout, 4096)
    pp.prepare([3000])
    time.sleep(delay_s)  # a worker still busy with its first iteration (BERT-Large, cuDNN autotuning)
    x = torch.arange(3000, dtype=torch.float32)
    pp.reduce_async(x, iteration=0, tensors=["x"], group=0).wait()
    assert torch.equal(x, torch.arange(3000, dtype=torch.float32)), "one worker: the average is the push"
    pp.close()
    print("pulled", flush=True)
dist.barrier()
os._exit(0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _startup_job(tmp_path, *args, servers: int = 1):
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(STARTUP_JOB)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={1 + servers}",
                           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}", str(script), *args[:2],
                           str(servers), *args[2:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("wire", ["zmq", "gloo"])
def test_a_server_waits_for_the_first_push_under_the_startup_timeout(tmp_path, wire):
    """comm_timeout_s is 2 s and the first push comes 5 s after the server is ready."""
    proc = _startup_job(tmp_path, wire, "5")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "served 3" in proc.stdout and "pulled" in proc.stdout  # 3000 floats: 3 partitions of 4096 bytes


def test_every_server_gets_its_stop_when_the_worker_stalls_between_servers(tmp_path):
    """A worker's STOPs used to be posted one server at a time: with its thread stalled after the
    first, server 0 (all its STOPs in) answered and closed, the I/O thread took that close for a
    dead server and ended, and server 1 never got its STOP: it timed out (comm_timeout_s 2 s)
    while the workers had moved on (a CI hang). Now every STOP leaves together."""
    proc = _startup_job(tmp_path, "zmq", "0", "slow-stop", servers=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("served") == 2 and "pulled" in proc.stdout


def test_bytescheduler_ps_per_machine_launches_in_its_node_leaders_order(runs):
    """Each machine's leader decides its node's order (ByteScheduler over BytePS schedules per
    machine); per-gpu every worker orders on its own."""
    machine, gpu = runs[("bytescheduler-ps", "per-machine")], runs[("bytescheduler-ps", "per-gpu")]
    assert machine["order_leader"] == 0 and gpu["order_leader"] is None

    def chosen_order(rec, rank):
        events = [e for e in load_trace(rec["trace"][rank]) if e["name"] == "node_reduce"]
        # a leader's message carries several choices, which share its chosen_us: then launch order
        return [e["args"]["partition"] for e in sorted(events, key=lambda e: (e["args"]["chosen_us"], e["ts"]))]

    for leader, follower in ((0, 1), (2, 3)):
        assert chosen_order(machine, leader) and chosen_order(machine, follower) == chosen_order(machine, leader)



def test_the_studys_bytescheduler_ps_is_byteps_with_scheduling_servers(tmp_path):
    """scheduler=byteps: per-tensor pushes from the hooks during backward (BytePS's optimizer),
    servers taking their engine queues in BytePS's scheduled order; lossless on 2 nodes of 2."""
    ddlbench("method=bytescheduler-ps", "method.scheduler=byteps", *LAYOUT, *PROTOCOL, results=tmp_path, check=True,
             timeout=600)
    (rec,) = records(tmp_path)
    assert rec["server_schedule"] is True and rec["messages_per_iter"] == 29 and rec["ps_topology"] == "per-machine"
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6)
    its = iterations(rec)
    assert all(len([c for c in cats["comm"] if c["name"] == "push_pull"]) == 29 for cats in its.values())  # one per tensor
    # pushed from the hooks: communication starts before backward ends (6 processes share 2 cores
    # here, so a tiny backward may finish first in some iterations; in one at least it must not)
    assert any(min(c["ts"] for c in cats["comm"]) < cats["backward"][0]["ts"] + cats["backward"][0]["dur"]
               for cats in its.values())
