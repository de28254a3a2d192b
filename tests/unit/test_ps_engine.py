"""The PS engine's pure parts: BytePS's key -> engine-thread rule, the server's sum with the
per-machine push count, the node layout, CPU staging off the calling thread, and the config
keys that choose all of it."""
from __future__ import annotations

import threading

import pytest
import torch

from ddlbench import config
from ddlbench.config import ConfigError
from ddlbench.methods.ps import EngineMap, Engines
from ddlbench.methods.ps_node import Layout, nodes_of
from ddlbench.methods.ps_stage import Stager
from ddlbench.trace import NullTracer


def test_a_key_goes_to_the_least_loaded_engine_thread_at_its_first_push_and_stays():
    m = EngineMap(3)
    assert [m.thread_of(k, n) for k, n in [(0, 100), (1, 50), (2, 10), (3, 30), (4, 5)]] == [0, 1, 2, 2, 2]
    assert m.load_bytes == [100, 50, 45]
    assert m.thread_of(0, 1) == 0 and m.thread_of(2, 10_000) == 2  # cached: later pushes, any size
    assert m.load_bytes == [100, 50, 45]


def test_engine_threads_balance_bytes_within_one_key():
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 4_096_000, (200,), generator=g).tolist()
    m = EngineMap(8)
    for k, n in enumerate(sizes):
        m.thread_of(k, n)
    assert len(set(m.owner.values())) == 8
    assert max(m.load_bytes) - min(m.load_bytes) <= max(sizes)


def run_engines(pushers: int, pushes: list[tuple[int, str, float]], threads: int = 4, keys: int = 6):
    """Feed (key, sender, value) pushes of 3-element tensors; return the replies and stats."""
    replies, lock = [], threading.Lock()

    def reply(key, iteration, summed, senders):
        with lock:
            replies.append((key, iteration, summed.clone(), list(senders), threading.current_thread().name))

    eng = Engines(0, torch.float32, pushers, threads, reply, NullTracer())
    for it, (key, sender, value) in enumerate(pushes):
        eng.push(key, it, sender, torch.full((3,), value))
    stats = eng.close(10)
    return replies, stats, eng


def test_a_server_answers_once_every_machine_has_pushed_a_key():
    """Per machine: 2 pushers (the nodes' leaders) per key; each round's sum starts afresh."""
    keys = range(6)
    rounds = [(k, s, 1.0 + k + 10 * r + (s == "w2")) for r in range(2) for s in ("w0", "w2") for k in keys]
    replies, stats, eng = run_engines(2, rounds)
    assert len(replies) == 12
    for k in keys:
        mine = [r for r in replies if r[0] == k]
        assert [r[2].tolist() for r in mine] == [[2.0 * (1 + k) + 1] * 3, [2.0 * (11 + k) + 1] * 3]
        assert all(r[3] == ["w0", "w2"] for r in mine)
        assert all(r[4] == f"ps-engine{eng.map.owner[k]}" for r in mine)  # summed and answered by its owner
    assert stats["pushes"] == 24 and stats["bytes_in"] == 24 * 12 and stats["pushers_per_key"] == 2
    assert stats["engine_threads"] == 4 and sum(stats["keys_per_engine"]) == 6 and max(stats["keys_per_engine"]) < 6


def test_per_gpu_counts_wait_for_every_worker():
    replies, _, _ = run_engines(4, [(0, s, 1.0) for s in ("w0", "w1")])
    assert replies == []  # two of four pushes: no answer yet
    replies, _, _ = run_engines(4, [(0, s, 1.0) for s in ("w0", "w1", "w2", "w3")])
    assert [(r[0], r[2].tolist(), r[3]) for r in replies] == [(0, [4.0] * 3, ["w0", "w1", "w2", "w3"])]


@pytest.mark.parametrize("workers, per_node, nodes", [
    (4, 2, [[0, 1], [2, 3]]), (5, 2, [[0, 1], [2, 3], [4]]), (4, 4, [[0, 1, 2, 3]]), (3, 1, [[0], [1], [2]])])
def test_nodes_are_consecutive_ranks_and_their_leaders_push(workers, per_node, nodes):
    assert nodes_of(workers, per_node) == nodes
    machine = Layout(workers, len(nodes), "per-machine", nodes)
    assert machine.pushers == [n[0] for n in nodes]
    assert machine.describe() == {"ps_topology": "per-machine", "pushers_per_key": len(nodes),
                                  "workers_per_node": per_node if workers >= per_node else workers,
                                  "server_engine_threads": 8, "server_schedule": False}
    assert Layout(workers, 1, "per-gpu", nodes).pushers == list(range(workers))


def test_cpu_staging_pushes_the_tensor_itself_and_copies_pulls_off_the_calling_thread():
    errors = []
    stager = Stager(torch.device("cpu"), errors.append)
    grad = torch.arange(6, dtype=torch.float32)
    seen = []
    stager.to_host(grad[2:5], None, None, lambda data: seen.append((data, threading.current_thread())))
    (data, thread), = seen
    assert data.data_ptr() == grad[2:5].data_ptr() and thread is threading.current_thread()  # no copy, no hop
    done = threading.Event()
    where = []
    stager.to_device(torch.full((3,), 8.0), grad[2:5], 4, None,
                     lambda: (where.append(threading.current_thread().name), done.set()))
    assert done.wait(10) and where == ["ps-h2d"] and not errors
    assert grad.tolist() == [0, 1, 2, 2, 2, 5]
    stager.close(10)


def resolved(*overrides):
    return config.resolve(config._compose(list(overrides)))


def test_servers_default_to_one_per_node_and_local_runs_to_one_node():
    assert resolved("method=bsp-ps", "workers=4").servers == 1
    cfg = resolved("method=bsp-ps", "workers=4", "launcher.workers_per_node=2")
    assert cfg.servers == 2 and cfg.launcher.workers_per_node == 2
    cfg = resolved("method=wfbp-ps", "workers=3")  # null = all on this machine
    assert cfg.launcher.workers_per_node is None and config.workers_per_node(cfg) == 3 and cfg.servers == 1
    assert resolved("method=wfbp-ps", "workers=5", "launcher.workers_per_node=2").servers == 3
    cfg = resolved("method=bsp-ps")
    assert (cfg.method.ps_topology, cfg.method.server_engine_threads) == ("per-machine", 8)


@pytest.mark.parametrize("overrides, words", [
    (["method=wfbp-ps", "method.ps_topology=per-node"], ["'per-node'", "per-machine, per-gpu"]),
    (["method=bsp-ps", "method.server_engine_threads=0"], ["server_engine_threads=0", ">= 1"]),
    (["method=bsp-ps", "launcher.workers_per_node=0"], ["workers_per_node=0", ">= 1"]),
])
def test_bad_ps_topology_settings_fail_in_one_line(overrides, words):
    with pytest.raises(ConfigError) as err:
        resolved(*overrides)
    for w in words:
        assert w in str(err.value)


def test_byteps_server_schedule_takes_the_key_with_the_fewest_pushes_first():
    """BYTEPS_SERVER_ENABLE_SCHEDULE=1 (byteps/server/queue.h), hand-worked with 3 pushers:
    pushes queued as k1, k1, k2, k2, k3 leave as k1, k2, k3 (each a key's first push of the
    round), then k1, k2 (second pushes), oldest first within a count; FIFO would keep them as
    they came."""
    from ddlbench.methods.ps import ScheduledQueue

    q = ScheduledQueue(pushers=3)
    for n, key in enumerate((1, 1, 2, 2, 3)):
        q.put((key, 0, f"w{n}", None))
    assert [q.get()[2] for _ in range(5)] == ["w0", "w2", "w4", "w1", "w3"]
    # A key's round ends with its third push: the next one starts a round, counted from 0 again.
    for n, key in enumerate((5, 5, 5, 6, 6, 5)):
        q.put((key, 1, f"r{n}", None))
    assert [q.get()[2] for _ in range(6)] == ["r0", "r3", "r5", "r1", "r4", "r2"]
    q.put(None)
    q.put((7, 2, "late", None))
    assert q.get()[2] == "late" and q.get() is None  # stop only after everything queued


def test_the_study_profile_runs_byteps_server_scheduling_as_bytescheduler_ps():
    from ddlbench.methods import schedule_of

    study = resolved("method=bytescheduler-ps", "profile=study")
    assert study.method.scheduler == "byteps" and schedule_of(study.method) == "wfbp"
    local = resolved("method=bytescheduler-ps")
    assert local.method.scheduler == "worker" and schedule_of(local.method) == "bytescheduler"
    with pytest.raises(ConfigError, match=r"'nope'; accepted: worker, byteps"):
        resolved("method=bytescheduler-ps", "method.scheduler=nope")
