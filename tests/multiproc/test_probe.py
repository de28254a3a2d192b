"""The driver's probes across two worker processes (Gloo on this host): the compute probe's
lock-step steps count the slowest worker's step, its free-running ones each worker's own; the
communication probe times the slowest worker's rounds; a PS run's probe goes through its servers."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ddlbench import driver
from helpers import two_ranks

SLOW_S = 0.5  # rank 1's extra time in each of its steps: far beyond a tiny-resnet step of batch 2, even on busy cores

PROBE = textwrap.dedent(f"""
    import dataclasses, json, sys, time, torch, torch.distributed as dist
    from ddlbench import config, driver, methods, models
    from ddlbench.trace import Tracer
    torch.set_num_threads(1)  # as the runs' workers: two OpenMP threads spin-wait for each other on busy cores
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
    cfg = config.resolve(config._compose(["method=bsp-a2a", "model=tiny-resnet", "workers=2", "local_batch=2",
                                          "profile.compute_probe_iters=2"]))
    real = models.build(cfg.model, cfg.local_batch, cfg.seed)

    def loss(model, batch):
        if rank == 1:
            time.sleep({SLOW_S})
        return real.loss(model, batch)

    w = dataclasses.replace(real, loss=loss)
    ctx = methods.Context(rank=rank, world=2, device=torch.device("cpu"), tracer=Tracer(rank), workload=w,
                          seed=cfg.seed)
    batches = [w.make_batch(cfg.seed, rank, b, ctx.device) for b in range(2)]
    free, lockstep, own, (after_idle, after_idle_own) = driver._Probe(w, cfg).run(ctx, batches, ctx.tracer, 0, 0)
    print(json.dumps({{"free": free, "lockstep": lockstep, "own": own, "after_idle": after_idle,
                      "after_idle_own": after_idle_own}}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


def test_the_lockstep_probe_counts_each_steps_slowest_worker():
    fast, slow = (json.loads(out.strip().splitlines()[-1]) for out in two_ranks(PROBE, timeout_s=180))
    assert len(fast["free"]) == len(fast["lockstep"]) == 2
    # free-running, each worker times its own steps: the fast one's are its own (shorter by the
    # sleeps, whatever else slows both on a busy machine)
    assert all(t >= SLOW_S for t in slow["free"]) and sum(fast["free"]) < sum(slow["free"]), (fast, slow)
    # in lock-step, both report each step's slowest worker: the fast one waited for it
    assert fast["lockstep"] == slow["lockstep"] and fast["own"] == slow["own"]
    assert all(t >= SLOW_S for t in fast["own"])
    # one machine: each step from the first start to the last end, at least the slowest worker's own
    assert all(t >= o for t, o in zip(fast["lockstep"], fast["own"]))
    # after each idle length, the means of its steps, whole and the slowest worker's own: the slow
    # one's, on both
    for key in ("after_idle", "after_idle_own"):
        assert fast[key] == slow[key] and len(fast[key]) == len(driver.PROBE_IDLE_S)
        assert all(t >= SLOW_S for t in fast[key])
    assert all(t >= o for t, o in zip(fast["after_idle"], fast["after_idle_own"]))


SLOW_LAUNCH_S = 0.2  # rank 1's delay before the first all-reduce of each round
ROUNDS = 3

COMM_PROBE = textwrap.dedent(f"""
    import json, sys, time, torch, torch.distributed as dist
    from ddlbench import config, driver, methods, models
    from ddlbench.trace import Tracer
    torch.set_num_threads(1)
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
    cfg = config.resolve(config._compose(["method=bsp-a2a", "model=tiny-resnet", "workers=2", "local_batch=2",
                                          "profile.comm_probe_rounds={ROUNDS}"]))
    w = models.build(cfg.model, cfg.local_batch, cfg.seed)
    ctx = methods.Context(rank=rank, world=2, device=torch.device("cpu"), tracer=Tracer(rank), workload=w,
                          seed=cfg.seed)
    probe = driver._CommProbe(w, cfg, ctx)
    first = probe.grads[0]
    real = dist.all_reduce

    def all_reduce(t, *args, **kwargs):  # rank 1 launches each round {SLOW_LAUNCH_S} s late
        if rank == 1 and t is first:
            time.sleep({SLOW_LAUNCH_S})
        return real(t, *args, **kwargs)

    dist.all_reduce = all_reduce
    t = probe.run(ctx, ctx.tracer, 0, 0)
    grads = [g.unique().tolist() for g in probe.grads]
    sizes = [p.numel() for p in w.model.parameters() if p.requires_grad][::-1]
    events = [e for e in ctx.tracer.events if e["name"] == "comm probe"]
    print(json.dumps({{"t": t, "grads": grads, "sizes": [g.numel() for g in probe.grads], "model_sizes": sizes,
                      "events": events}}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


def test_the_comm_probe_times_the_slowest_workers_rounds_of_the_models_all_reduces():
    """driver._CommProbe: every gradient's shape all-reduced over the group in each of its
    rounds (ones, so each round doubles them: ROUNDS + 1 rounds, the first untimed), in
    backward's order, and both workers report the slowest worker's mean round."""
    a, b = (json.loads(out.strip().splitlines()[-1]) for out in two_ranks(COMM_PROBE, timeout_s=180))
    assert a["t"] == b["t"] >= SLOW_LAUNCH_S
    assert a["sizes"] == a["model_sizes"] and len(a["sizes"]) > 1
    assert all(g == [2.0 ** (ROUNDS + 1)] for g in a["grads"] + b["grads"])
    assert len(a["events"]) == 1 and a["events"][0]["args"]["rounds"] == ROUNDS


def test_a_ps_runs_probe_pushes_commbenchs_burst_through_its_own_servers_and_stays_lossless(tmp_path):
    """driver._PSProbe in a real per-machine PS run (2 local workers, one node, its server a
    process of its own): each repeat times PS_BURST_KEYS keys of PS_BURST_BYTES[0] (make
    commbench's node burst), pushed on keys of the probe's own that the server holds beside the
    training's, ROUNDS + 1 rounds a repeat; the run's parameters are single-process SGD's still."""
    import torch

    from ddlbench.commbench.modes import PS_BURST_BYTES, PS_BURST_KEYS
    from ddlbench.trace import load as load_trace
    from helpers import ddlbench, records, reference_parameters

    ddlbench("method=wfbp-ps", "model=tiny-resnet", "workers=2", "local_batch=4", "profile.warmup_iters=1",
             "profile.measured_iters=2", "profile.repeats=2", f"profile.comm_probe_rounds={ROUNDS}", "trace=true",
             "save_params=true", results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok", rec["error"]
    assert (rec["ps_topology"], rec["servers"]) == ("per-machine", 1)
    assert len(rec["ps_probe_s"]) == 2 and all(t > 0 for t in rec["ps_probe_s"])
    assert (rec["ps_probe_keys"], rec["ps_probe_key_bytes"]) == (PS_BURST_KEYS, PS_BURST_BYTES[0])
    assert len(rec["comm_probe_s"]) == 2  # the all-reduce probe still runs beside it
    for rank in range(2):
        spans = [e for e in load_trace(rec["trace"][rank]) if e["name"] == "ps probe"]
        assert len(spans) == 2 and all(e["args"]["rounds"] == ROUNDS for e in spans)
    # the server took every probe key from the node's leader, each round of each repeat, on keys
    # after the training's, whose pushes are one per iteration (3 a repeat)
    pushes = [e["args"] for e in load_trace(rec["trace"][2]) if e["name"] == "push_received"]
    count: dict = {}
    for a in pushes:
        assert a["worker"] == 0
        count[a["key"]] = count.get(a["key"], 0) + 1
    probe_keys = sorted(count)[-PS_BURST_KEYS:]
    assert all(count[k] == 2 * (ROUNDS + 1) for k in probe_keys)
    assert all(count[k] == 2 * 3 for k in sorted(count)[:-PS_BURST_KEYS])
    assert {a["bytes"] for a in pushes if a["key"] in probe_keys} == {PS_BURST_BYTES[0]}
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
