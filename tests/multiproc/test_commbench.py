"""commbench for real: every collective correct on 2 and 3 workers on every available backend,
the fallback recorded, and the seeds' two experiments producing their numbers."""
import statistics
import subprocess
import sys

import pytest
from helpers import REPO, records

from ddlbench.commbench.backends import why_unavailable
from ddlbench.commbench.collectives import COLLECTIVES

pytestmark = pytest.mark.multiproc


def network_configs() -> dict:
    """The checkout's network configs, but the one the emulated tier's Slurm test writes on
    purpose and removes (`slurm-test-<pid>.yaml`) while this module may run beside it."""
    return {p.name: p.stat().st_mtime_ns for p in (REPO / "conf" / "network").glob("*.yaml")
            if not p.name.startswith("slurm-test-")}


def commbench(tmp_path, *args):
    """One commbench run, never writing the predictor's network config into the checkout: a
    2-worker all-reduce used to leave conf/network/local-<hostname>.yaml behind, replacing the
    user's own `make commbench` fit with a test's few bytes (METHOD=auto then read it)."""
    before = network_configs()
    proc = subprocess.run([sys.executable, "-m", "ddlbench.commbench", "--results", str(tmp_path),
                           "--network-name", "none", *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert network_configs() == before
    rows = records(tmp_path)
    return proc, rows


@pytest.mark.parametrize("backend", ["gloo", "mpi4py", "horovod"])
def test_every_collective_is_correct_on_2_and_3_workers(tmp_path, backend):
    reason = why_unavailable(backend, "cpu")
    if reason:
        pytest.skip(reason)
    proc, rows = commbench(tmp_path, "--backends", backend, "--workers", "3", "--collectives", ",".join(COLLECTIVES),
                           "--dtypes", "fp32,fp16", "--max-bytes", "64KiB", "--iters", "3", "--warmup", "1",
                           "--mode", "sizes")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Horovod has no reduce-to-one-rank: recorded as unsupported, once per dtype and worker count
    missing = {"reduce"} if backend == "horovod" else set()
    unsupported = [r for r in rows if "unsupported" in r]
    assert {(r["collective"], r["dtype"], r["workers"]) for r in unsupported} == \
        {(c, d, w) for c in missing for d in ("fp32", "fp16") for w in (2, 3)}
    rows = [r for r in rows if "unsupported" not in r]
    measured = {(r["collective"], r["dtype"], r["workers"]) for r in rows if "bytes" in r}
    assert measured == {(c, d, w) for c in COLLECTIVES if c not in missing for d in ("fp32", "fp16") for w in (2, 3)}
    for r in rows:
        assert r["backend"] == backend and "unsupported" not in r and "error" not in r
        assert r["wrong"] == 0 and r["time_us_min"] <= r["time_us_p50"] <= r["time_us_max"]
        assert r["iters"] == 3 and r["busbw_GBps"] > 0
        # ranks on this host's cores (ddlbench/hostcpu.py): Gloo's loop threads yield, each rank on its own core
        assert r["env"]["DDLBENCH_GLOO_LOOP_POLICY"] == "idle" and r["env"]["DDLBENCH_PIN_RANKS"] == "1"
    assert {r["bytes"] for r in rows if r["collective"] == "all_reduce" and r["dtype"] == "fp32"} == \
        {4 * 4**k for k in range(8)}  # 4 B .. 64 KiB in powers of 4
    assert (tmp_path / "commbench-busbw_GBps.png").stat().st_size > 5000
    # progress, a line per measurement as it lands, though no terminal shows the ranks' stderr here
    for w in (2, 3):
        assert f"[commbench {backend} x{w}] all_reduce fp32 65536 B:" in proc.stdout, proc.stdout[-2000:]


def test_a_slow_size_gets_fewer_calls_on_every_rank(tmp_path):
    """Rank 0's plan for a size, from its timed warm-up, is every rank's: a rank that made
    another number of calls would hang the next collective."""
    proc, rows = commbench(tmp_path, "--backends", "gloo", "--workers", "2", "--dtypes", "fp32", "--max-bytes", "256MiB",
                           "--iters", "10", "--seconds-per-size", "0.2", "--mode", "sizes")
    assert proc.returncode == 0, proc.stderr[-2000:]
    by_size = {r["bytes"]: r for r in rows}
    # under 20 ms a call: every call asked for. The plan comes from one timed warm-up, which a
    # busy 2-core CI box stretched past 3 ms for 4 B to 1 KiB sizes ([7, 10, 7, 9, 9] calls at a
    # 3 ms threshold), so the threshold is far above a small all-reduce, and most, not all
    small = [by_size[b]["iters"] for b in (4, 16, 64, 256, 1024)]
    assert small.count(10) >= 3, small
    # 256 MiB over loopback takes well over 20 ms a call: fewer calls, and never fewer than 3
    assert 3 <= by_size[256 << 20]["iters"] < 10, by_size[256 << 20]
    assert all(r["wrong"] == 0 for r in rows)


def test_an_unavailable_backend_falls_back_and_the_record_says_so(tmp_path):
    proc, rows = commbench(tmp_path, "--backends", "ucc", "--workers", "2", "--max-bytes", "16", "--iters", "2",
                           "--mode", "sizes")
    assert proc.returncode == 0
    assert "ucc unavailable" in proc.stderr and "falling back to gloo" in proc.stderr
    assert rows and all(r["backend"] == "gloo" and r["fallback_from"] == "ucc" for r in rows)


def test_bad_input_exits_2_with_one_line(tmp_path):
    proc, rows = commbench(tmp_path, "--dtypes", "fp64")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "'fp64'" in proc.stderr
    assert rows == []


def test_the_seeds_experiments_groups_and_fusion(tmp_path):
    after_ms = 40  # see fused_after_compute below
    window_s = 0.15  # see the rounds' CPU below
    proc, rows = commbench(tmp_path, "--backends", "gloo", "--workers", "4", "--mode", "groups,fusion",
                           "--iters", "20", "--fusion-models", "tiny-resnet", "--fusion-iters", "5",
                           "--seconds-per-size", "0.001", "--fusion-pace-ms", "2", "--after-compute-ms", str(after_ms),
                           "--cpu-window-s", str(window_s))
    assert proc.returncode == 0, proc.stderr[-2000:]
    groups = sorted((r["groups"], r["workers"]) for r in rows if r["mode"] == "groups")
    assert groups == [(1, 2), (2, 4)]  # seed 002: 1 and 2 pairs, each its own group
    fusion = {(r["strategy"], r["workers"]): r for r in rows if r["mode"] == "fusion"}
    assert {s for s, _ in fusion} == {"per_tensor", "fused", "buckets_25MiB", "per_tensor_paced", "per_tensor_ordered",
                                      "per_tensor_computing", "fused_after_compute"}
    # after 40 ms of compute on every rank, the one fused all-reduce alone, the last rank's time, no
    # CPU of its own counted. 40 ms, not the default 5: 2 ranks' fused all-reduce takes 1-6 ms here
    # (6.2 ms on a loaded CI box once), so only a time that counted the compute reaches 40 ms
    after = [fusion[("fused_after_compute", w)] for w in (2, 4)]
    assert all(r["after_compute_s"] == after_ms / 1e3 and r["messages"] == 1 and r["time_us"] > 0 and
               "cpu_busy_s" not in r for r in after)
    assert after[0]["time_us_p50"] < after_ms * 1e3
    assert "after_compute_s" not in fusion[("fused", 2)]
    # paced beside every rank's compute: the 29th launch 29 x 2 ms after the compute began, the
    # compute's CPU not counted as the messages'
    computing = [fusion[("per_tensor_computing", w)] for w in (2, 4)]
    assert all(r["pace_s"] == 0.002 and r["messages"] == 29 and r["time_us_min"] >= 29 * 2e3 and
               "cpu_busy_s" not in r for r in computing)
    fusion = {k: r for k, r in fusion.items() if k[0] not in ("fused_after_compute", "per_tensor_computing")}
    # ordered as ByteScheduler's leader orders: every rank launched all 29, in rank 0's order (else
    # the checked round would sum mismatched tensors, or hang)
    assert all(fusion[("per_tensor_ordered", w)]["order"] == "leader" and
               fusion[("per_tensor_ordered", w)]["messages"] == 29 for w in (2, 4))
    assert "order" not in fusion[("per_tensor", 2)]
    # paced: the 29th launch 28 x 2 ms after the first, so a round takes longer than that
    paced = fusion[("per_tensor_paced", 2)]
    assert paced["pace_s"] == 0.002 and paced["messages"] == 29 and paced["time_us"] >= 28 * 2e3
    assert "pace_s" not in fusion[("per_tensor", 2)]
    assert fusion[("per_tensor", 2)]["messages"] == 29 and fusion[("fused", 2)]["messages"] == 1
    assert all(r["wrong"] == 0 for r in rows)  # each mode ends with one checked round
    # each fusion round's busy CPU per worker (the predictor's all-reduce CPU on shared cores), in
    # /proc/stat's 10 ms ticks: the rounds run again till they fill --cpu-window-s, on every rank
    # alike (before, 3 rounds of a fused all-reduce took 2 x a few ms, a tick or none), after one
    # more warm-up that times a round and plans them, topped up where the plan fell short (a slow
    # planning round on a loaded CI box once left half the window empty); the rounds beside
    # compute record no CPU of their own
    bad = [(k, {f: r.get(f) for f in ("cpu_busy_s", "cpu_window_s", "cores", "warmup", "iters")})
           for k, r in fusion.items() if not (r["cpu_busy_s"] > 0 and r["cpu_window_s"] >= window_s and
                                              r["cores"] >= 1 and r["warmup"] == 3 and r["iters"] >= 3)]
    assert not bad, bad
    assert fusion[("fused", 2)]["iters"] > fusion[("per_tensor", 2)]["iters"]  # a fused round is the shorter
    assert "seed 003" in proc.stdout and "seed 002" in proc.stdout


def test_ps_mode_pushes_and_pulls_through_the_ps_engine_and_fits_the_ps_wire(tmp_path):
    """2 workers and 1 server (3 processes): every size's round is right (the workers' average)
    and the predictor's PS link is fitted from them."""
    from ddlbench.predict import network

    # a time limit per size so short that a call of a third of a millisecond gets the fewest calls
    proc, rows = commbench(tmp_path, "--workers", "2", "--mode", "ps", "--max-bytes", "64KiB", "--iters", "6",
                           "--warmup", "1", "--dtypes", "fp32", "--seconds-per-size", "0.001",
                           "--fusion-models", "tiny-resnet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = [r for r in rows if r["collective"] == "push_pull"]
    assert [r["bytes"] for r in rounds] == [4 * 4**k for k in range(8)]
    for r in rows:
        assert r["workers"] == 2 and r["servers"] == 1 and r["wire"] == "zmq"
        assert r["wrong"] == 0 and 0 < r["time_us_min"] <= r["time_us_p50"] <= r["time_us_max"]
        # the second warm-up timed, rank 0's plan for both (the landing rounds: at least PS_LANDING_ROUNDS)
        assert 3 <= r["iters"] <= (6 if r["collective"] != "push_pull_landing" else 12) and r["warmup"] == 2
    # then the bursts: 32 keys in flight per worker, the machine's busy CPU per worker-message
    from ddlbench import hostcpu
    from ddlbench.commbench.modes import PS_BURST_BYTES, PS_BURST_KEYS

    from ddlbench.commbench.modes import FUSION_PACE_S, PS_NODE_PASSES

    bursts = [r for r in rows if r["collective"] == "push_pull_burst"]
    # then the same bursts through per-machine PS: the 2 workers one node, its leader the pusher;
    # each kind back to back, then paced (one push every --fusion-pace-ms, by default FUSION_PACE_S),
    # the node's PS_NODE_PASSES times over (`pass`), for the fit's medians
    node = [r for r in rows if r["collective"] == "push_pull_node_burst"]
    assert PS_NODE_PASSES >= 3  # a median that one pass in a slow spell does not move
    assert [r["key_bytes"] for r in bursts] == list(PS_BURST_BYTES) * 2
    assert [r["key_bytes"] for r in node] == list(PS_BURST_BYTES) * 2 * PS_NODE_PASSES
    assert [r.get("pace_s") for r in bursts] == [None] * 2 + [FUSION_PACE_S] * 2
    assert [r.get("pace_s") for r in node] == ([None] * 2 + [FUSION_PACE_S] * 2) * PS_NODE_PASSES
    assert [r["pass"] for r in node] == [p for p in range(PS_NODE_PASSES) for _ in range(4)]
    assert all("pass" not in r for r in bursts)
    # and each fusion model's gradients as one push/pull after 5 ms of compute, timed by the last arrival
    (after,) = [r for r in rows if r["collective"] == "push_pull_after_compute"]
    assert after["model"] == "tiny-resnet" and after["after_compute_s"] == 0.005 and after["bytes"] == 312168
    assert after["wrong"] == 0 and after["time_us"] > 0 and 3 <= after["iters"] <= 24
    # last, the landing rounds: every worker pushing at once after a barrier, each timing its own;
    # per size how much earlier than the slowest each worker's reply landed, fastest first
    from ddlbench.commbench.modes import PS_LANDING_BYTES, PS_LANDING_ROUNDS

    landing = [r for r in rows if r["collective"] == "push_pull_landing"]
    assert [r["bytes"] for r in landing] == list(PS_LANDING_BYTES)
    for r in landing:
        assert r["wrong"] == 0 and r["iters"] == PS_LANDING_ROUNDS == len(r["rounds_s"])
        assert all(len(times) == 2 and 0 < times[0] <= times[1] for times in r["rounds_s"])
        assert r["gaps_s"] == [pytest.approx(statistics.median(t[1] - t[0] for t in r["rounds_s"])), 0.0]
        assert r["time_us"] == pytest.approx(sum(t[1] for t in r["rounds_s"]) / PS_LANDING_ROUNDS * 1e6)
    assert len(rows) == len(rounds) + len(bursts) + len(node) + 1 + len(landing)
    assert all(r["node_workers"] == 2 and r["ps_topology"] == "per-machine" for r in node)
    for r in bursts + node:
        assert r["keys"] == PS_BURST_KEYS and r["cores"] == hostcpu.cores() and r["bytes"] == 32 * r["key_bytes"]
        assert r["iters"] == 3  # 32 keys' rounds take far over 0.33 ms: the fewest calls (before: --iters, always)
        # not idle (3 processes exchanging messages), and at most every core over the window
        # (/proc/stat counts whole 10 ms ticks on each core)
        busy = r["cpu_busy_s"] * 3 * 2 * PS_BURST_KEYS
        assert 0 < busy <= r["cores"] * (r["cpu_window_s"] + 0.02)
    sizes = [{"mode": "sizes", "collective": "all_reduce", "dtype": "fp32", "workers": 2, "backend": "gloo",
              "bytes": n, "time_us": 100.0 + n / 1e3, "wrong": 0} for n in (1024, 1 << 20)]
    spec = network.commbench_network(sizes + rows, "x", "test")
    assert spec["ps"]["alpha_s"] > 0 and spec["ps"]["beta_s_per_byte"] >= 0
    assert spec["data_ps_after_compute"][2]["tiny-resnet"]["measured_s"] == pytest.approx(after["time_us"] * 1e-6)
    assert spec["data_ps_landing"][2] == {"bytes": list(PS_LANDING_BYTES), "gaps_s": [r["gaps_s"] for r in landing]}
    assert spec["host_cpu"]["cores"] == hostcpu.cores() and spec["host_cpu"]["s_per_message"] > 0
    fit = spec["inter"]["node_ps"]["by_ranks"][2]
    assert fit["alpha_s"] + fit["beta_s_per_byte"] * PS_BURST_BYTES[-1] > 0  # the node's whole path per key


def test_slurm_nodes_take_turns_one_rank_each_and_wait_for_node_0(tmp_path):
    """commbench.slurm.run_node as each task of a Slurm job runs it (here three "nodes" on this
    host, rendezvous at 127.0.0.1): measurement 0 on nodes 0-1 while node 2 sits it out, then
    measurement 1 on all three, which node 2 starts only once node 0 has finished measurement 0."""
    import json
    import random

    spec = {"collectives": ["all_reduce"], "dtypes": ["fp32"], "min_bytes": 64, "max_bytes": 256, "factor": 4,
            "iters": 2, "warmup": 1, "group_bytes": 400, "fusion_models": [], "fusion_iters": 1, "fusion_warmup": 0,
            "mode": "sizes", "backend": "gloo", "device": "cpu", "torch_backend": "gloo"}
    jobs = []
    for k, procs in enumerate((2, 3)):
        (tmp_path / f"spec-{k}.json").write_text(json.dumps({**spec, "out": str(tmp_path / f"rows-{k}.jsonl")}))
        jobs.append({"procs": procs, "spec": str(tmp_path / f"spec-{k}.json"), "mode": "sizes", "backend": "gloo",
                     "fallback_from": None, "workers": procs})
    job_id = str(random.randrange(1, 2000))  # its rendezvous ports: 20 of its own
    common = {"results": str(tmp_path / "results"), "base": {"git_commit": "test"}, "partition": "p"}
    code = ("import json, sys; from pathlib import Path; from ddlbench.commbench.slurm import run_node; "
            "run_node(Path(sys.argv[1]), int(sys.argv[2]), ['127.0.0.1'] * 3, sys.argv[3], json.loads(sys.argv[4]), "
            "120, json.loads(sys.argv[5]))")
    nodes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(n), job_id, json.dumps(jobs),
                               json.dumps(common)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for n in range(3)]
    outs = [p.communicate(timeout=300)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0, 0], outs
    done = [json.loads((tmp_path / f"done-{k}.json").read_text()) for k in range(2)]
    assert [d["rc"] for d in done] == [0, 0]
    for k, workers in enumerate((2, 3)):
        rows = done[k]["rows"]
        assert rows and all(r["workers"] == workers and r["wrong"] == 0 and r["git_commit"] == "test" for r in rows)
        assert all(r["network"] == {"emulated": False, "slurm_job": job_id, "partition": "p",
                                    "hosts": ["127.0.0.1"] * workers} for r in rows)
    assert sorted(map(json.dumps, records(tmp_path / "results"))) == sorted(json.dumps(r) for d in done for r in d["rows"])
    # node 2 sat measurement 0 out and started measurement 1 only once node 0 had finished measurement 0
    starts = [line for line in outs[2].splitlines() if "starts at" in line]
    assert len(starts) == 1 and "measurement 1 " in starts[0], outs[2]
    assert float(starts[0].split("starts at ")[1]) >= (tmp_path / "done-0.json").stat().st_mtime - 0.01


def test_a_slurm_node_stops_when_node_0_never_finishes(tmp_path, monkeypatch, capsys):
    """Node 0 gone: another node waits for its done file no longer than a measurement's timeout
    and a grace, then stops instead of dialling a rendezvous nobody hosts."""
    from ddlbench.commbench import slurm

    monkeypatch.setattr(slurm, "NODE0_GRACE_S", 0.0)
    jobs = [{"procs": 2, "spec": str(tmp_path / "spec-0.json")}, {"procs": 3, "spec": str(tmp_path / "spec-1.json")}]
    slurm.run_node(tmp_path, 2, ["127.0.0.1"] * 3, "1", jobs, 0.5, {"results": str(tmp_path), "base": {}, "partition": "p"})
    assert "node 0 did not finish measurement 0 within 0.5 s; stopping" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing ran
