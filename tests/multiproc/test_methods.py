"""Every method, run for real (CPU workers, Gloo): lossless against single-process SGD, and
its schedule as the timeline trace shows it.

Runs are shared: each (model, workers) setup runs every method once, with a trace and the
final parameters saved. tiny-resnet (BatchNorm) runs on 2 workers with MG-WFBP's start-up time
fixed small so it forms several groups; tiny-bert (dropout) runs on 3 workers with alpha and
beta fitted at start-up.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from ddlbench.config import choices
from ddlbench.trace import CATEGORIES
from ddlbench.trace import load as load_trace

from helpers import ddlbench, iterations, peak_bytes_in_flight, records, reference_parameters, scheduled_messages

pytestmark = pytest.mark.multiproc

METHODS = [m for m in choices("method") if m != "horovod"]  # Horovod's own: tests/multiproc/test_horovod.py
SETUPS = {"tiny-resnet": 2, "tiny-bert": 3}
PROTOCOL = ["profile.warmup_iters=1", "profile.measured_iters=3", "profile.repeats=1", "local_batch=4",
            "trace=true", "save_params=true"]
# Small pieces and credit (in parameters, ByteScheduler's unit: 4 KiB and 16 KiB in fp32), so
# that on tiny models partitions queue and priority matters.
BYTESCHEDULER = ["method.partition_params=1024", "method.credit_params=4096"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict:
    """{(model, method): record} for every method on every setup."""
    out = {}
    for model, workers in SETUPS.items():
        results = tmp_path_factory.mktemp(model)
        others = [m for m in METHODS if m != "mg-wfbp" and not m.startswith("bytescheduler")]
        ddlbench("--multirun", f"method={','.join(others)}", f"model={model}", f"workers={workers}", *PROTOCOL,
                 results=results, check=True)
        ddlbench("--multirun", "method=bytescheduler-ps,bytescheduler-a2a", f"model={model}", f"workers={workers}",
                 *PROTOCOL, *BYTESCHEDULER, results=results, check=True)
        mg = ["method.alpha_s=2e-5"] if model == "tiny-resnet" else []
        ddlbench("method=mg-wfbp", f"model={model}", f"workers={workers}", *PROTOCOL, *mg, results=results, check=True)
        for r in records(results):
            out[(model, r["method"])] = r
    return out


def test_every_runs_gloo_loop_threads_were_under_sched_idle(runs):
    """The local launcher's ranks share this machine's cores: each put its Gloo loop threads (one
    per group: the default one, start-up's, the end's, the control group's...) under SCHED_IDLE
    (ddlbench/hostcpu.py), and the record says so."""
    for (model, method), rec in runs.items():
        assert rec["env"]["DDLBENCH_GLOO_LOOP_POLICY"] == "idle", (model, method)
        assert rec["gloo_loops"]["policy"] == "idle" and rec["gloo_loops"]["threads"] >= 3, (model, method, rec["gloo_loops"])



def test_every_rank_ran_on_its_own_cores_where_there_were_enough(runs):
    """The local launcher binds rank r to its OMP_NUM_THREADS cores in turn (hostcpu.rank_cores),
    servers after workers, where every rank's threads have a core (else none is bound), and the
    record keeps each rank's."""
    import os

    from ddlbench import hostcpu

    usable = sorted(os.sched_getaffinity(0))
    bound = 0
    for (model, method), rec in runs.items():
        threads, ranks = int(rec["env"]["OMP_NUM_THREADS"]), rec["workers"] + rec["servers"]
        assert rec["env"][hostcpu.PIN_RANKS_ENV] == "1"
        want = [hostcpu.rank_cores(r, threads, usable) for r in range(ranks)] if ranks * threads <= len(usable) else None
        assert rec["rank_cores"] == want, (model, method)
        bound += want is not None
    assert bound or len(usable) < 2, "no run here had a core per rank: nothing showed the binding"


@pytest.mark.parametrize("model", SETUPS)
@pytest.mark.parametrize("method", METHODS)
def test_lossless_same_parameters_as_single_process_sgd(runs, model, method):
    rec = runs[(model, method)]
    assert rec["status"] == "ok", rec["error"]
    assert rec["workers"] == SETUPS[model] and rec["params_consistent"]
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    want = reference_parameters(Path(rec["run_dir"]))
    assert got.keys() == want.keys()
    for name, ref in want.items():
        # relative 1e-5, with an absolute floor for tensors that stay near zero (BERT's key
        # biases get no gradient: softmax ignores a per-query constant). A method that got the
        # average wrong moves parameters by ~lr * grad, about 1e-3 here.
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{method} {model} {name}: {m}")
    fp = rec["param_fingerprint"]
    assert fp["sum"] == pytest.approx(sum(float(p.double().sum()) for p in got.values()), rel=1e-9)


def param_names(rec) -> set[str]:
    return {n for g in rec["group_tensors"] for n in g} if rec.get("group_tensors") else None


@pytest.mark.parametrize("method", METHODS)
def test_trace_events_follow_the_contract(runs, method):
    rec = runs[("tiny-resnet", method)]
    assert len(rec["trace"]) == rec["workers"] + rec["servers"]
    for rank in range(rec["workers"]):
        events = load_trace(rec["trace"][rank])
        for e in events:
            assert e["ph"] == "X" and e["pid"] == rank and e["cat"] in CATEGORIES
            assert isinstance(e["args"]["iter"], int) and e["dur"] >= 0
        its = iterations(rec, rank)
        assert sorted(its) == list(range(4))
        for cats in its.values():
            assert len(cats["backward"]) == 1 and len(cats["forward"]) == 1
            assert cats["comm"], "every iteration communicates"
            for c in cats["comm"]:
                assert c["args"]["bytes"] > 0 and c["args"]["tensors"]


def test_bsp_communicates_only_after_backward_in_one_message(runs):
    rec = runs[("tiny-resnet", "bsp-a2a")]
    total = sum(rec["groups"])
    assert len(rec["groups"]) == 1
    for cats in iterations(rec).values():
        bw = cats["backward"][0]
        assert min(c["ts"] for c in cats["comm"]) >= bw["ts"] + bw["dur"]
        assert [c["args"]["bytes"] for c in cats["comm"]] == [total]


def test_wfbp_starts_during_backward_with_one_message_per_tensor(runs):
    rec = runs[("tiny-resnet", "wfbp-a2a")]
    n_tensors = rec["messages_per_iter"]
    assert n_tensors == 29 and rec["groups"] is None
    for cats in iterations(rec).values():
        bw = cats["backward"][0]
        assert min(c["ts"] for c in cats["comm"]) < bw["ts"] + bw["dur"]
        assert len(cats["comm"]) == n_tensors
        assert all(len(c["args"]["tensors"]) == 1 for c in cats["comm"])
        assert len({c["args"]["tensors"][0] for c in cats["comm"]}) == n_tensors


def regrouped(rec, **rule):
    """The groups' bytes re-derived from what the record says MG-WFBP measured and chose."""
    from ddlbench.methods.mgwfbp import merge_groups

    args = dict(numels=rec["tensor_numels"], min_group_numel=rec["min_group_numel"]) | rule
    groups = merge_groups(rec["tb_s"], rec["tensor_bytes"], rec["alpha_s"], rec["beta_s_per_byte"], **args)
    return groups, [sum(rec["tensor_bytes"][i] for i in g) for g in groups]


def test_mgwfbp_sends_fewer_larger_messages_matching_its_recorded_groups(runs):
    from ddlbench.methods.mgwfbp import fit_alpha_beta

    rec = runs[("tiny-resnet", "mg-wfbp")]
    n_tensors = len(rec["tensor_bytes"])
    assert 1 < len(rec["groups"]) < n_tensors
    assert rec["alpha_s"] == 2e-5 and len(rec["tb_s"]) == n_tensors
    # beta is fitted from the start-up microbenchmark. On a loaded CI machine loopback's
    # all-reduces can show no slope, and the fit's clamp then gives 0, which is correct.
    fitted_beta = fit_alpha_beta(*zip(*rec["microbenchmark"]))[1]
    assert rec["beta_s_per_byte"] == pytest.approx(fitted_beta) and rec["beta_s_per_byte"] >= 0
    assert rec["profile_clock"] == "host" and rec["warnings"] == []  # CPU workers; alpha given, not fitted
    # The study's small-group rule (8,192 elements) is in force and did work here: the paper's
    # rule alone would have sent a group of fewer elements before the last.
    groups, sizes = regrouped(rec)
    assert sizes == rec["groups"] and rec["min_group_numel"] == 8192
    numels = [sum(rec["tensor_numels"][i] for i in g) for g in groups]
    assert min(numels[:-1]) >= 8192
    paper, _ = regrouped(rec, min_group_numel=0)
    assert min(sum(rec["tensor_numels"][i] for i in g) for g in paper[:-1]) < 8192
    for cats in iterations(rec).values():
        comms = sorted(cats["comm"], key=lambda c: c["args"]["group"])
        assert [c["args"]["bytes"] for c in comms] == rec["groups"]
        assert [c["args"]["tensors"] for c in comms] == rec["group_tensors"]
        bw = cats["backward"][0]
        assert min(c["ts"] for c in comms) < bw["ts"] + bw["dur"]  # still wait-free


def test_mgwfbp_fits_alpha_beta_at_start_up_and_rank0s_choice_is_what_ran(runs):
    from ddlbench.methods.mgwfbp import alpha_warning, fit_alpha_beta

    rec = runs[("tiny-bert", "mg-wfbp")]
    bench = rec["microbenchmark"]
    assert [s for s, _ in bench] == [32768 * i for i in range(1, 64)]  # upstream's 32 KiB to 2,016 KiB
    assert (rec["alpha_s"], rec["beta_s_per_byte"]) == pytest.approx(fit_alpha_beta(*zip(*bench)))
    warned = alpha_warning(rec["alpha_s"], [t for _, t in bench])
    assert rec["warnings"] == ([warned] if warned else [])
    assert regrouped(rec)[1] == rec["groups"]
    for rank in range(3):
        for cats in iterations(rec, rank).values():
            assert sorted(c["args"]["bytes"] for c in cats["comm"]) == sorted(rec["groups"])


def test_ddp_buckets_carry_every_gradient_and_the_record_holds_its_final_buckets(runs):
    rec = runs[("tiny-resnet", "ddp")]
    total = sum(runs[("tiny-resnet", "bsp-a2a")]["groups"])
    its = iterations(rec)
    for cats in its.values():
        assert sum(c["args"]["bytes"] for c in cats["comm"]) == total
    last = sorted(its[max(its)]["comm"], key=lambda c: c["args"]["group"])
    assert [c["args"]["bytes"] for c in last] == rec["groups"]


@pytest.mark.parametrize("method", ["bsp-ps", "wfbp-ps"])
def test_ps_traffic_goes_through_server_processes(runs, method):
    rec = runs[("tiny-resnet", method)]
    assert rec["servers"] == 1 and len(rec["trace"]) == 3  # two workers (one machine), one server
    assert rec["server_stats"][0]["transport"] == "zmq" and rec["ps_topology"] == "per-machine"
    limit = rec["config"]["method"]["partition_bytes"]
    server_events = load_trace(rec["trace"][2])
    kinds = {e["name"] for e in server_events}
    assert {"push_received", "sum", "pull_served"} <= kinds
    assert all(e["cat"] == "server" and e["args"]["server"] == 0 and e["pid"] == 2 for e in server_events)
    pushes = [e for e in server_events if e["name"] == "push_received"]
    assert {e["args"]["worker"] for e in pushes} == {0}  # the machine's leader pushes its node's sum
    pulls = [c for cats in iterations(rec).values() for c in cats["comm"] if c["name"] == "push_pull"]
    assert pulls and all(c["args"]["server"] == 0 and c["args"]["bytes"] <= limit for c in pulls)
    served = [e for e in server_events if e["name"] == "pull_served"]
    assert len(served) == len(pulls)  # every partition the leader pulled was served by the server
    assert rec["server_stats"][0]["pushes"] == len(pulls)  # one pusher per key: one push each


def test_a_ps_runs_rounds_read_back_from_its_traces(runs):
    """analysis.ps_rounds on a real run: every round's pushes arrive after they start, the
    replies leave after the last arrival, and land after they leave."""
    from ddlbench.analysis import ps_rounds

    rec = runs[("tiny-resnet", "bsp-ps")]
    found = [r for r in ps_rounds.rounds(Path(rec["trace"][0]).parent) if r.complete]
    assert len(found) >= 3, found
    for r in found:
        assert min(r.push_ms()) >= 0 and r.served_us >= max(r.arrivals_us.values()) and min(r.landed_ms()) >= 0, r
    s = ps_rounds.summary(found, skip=0)
    assert s["pushers"] >= 1 and len(s["push_ms"]) == 1  # one machine: its leader pushes


def test_wfbp_ps_pushes_during_backward_and_bsp_ps_after(runs):
    """WFBP-PS hands every iteration's first message to communication inside backward (from a
    hook) and its node's collectives start there in some iteration; BSP-PS does neither. When
    the dispatcher thread starts a collective depends on the host's load (2 busy cores here), so
    only the hand-over is required of every iteration."""
    for method, during in (("wfbp-ps", True), ("bsp-ps", False)):
        started_during = []
        for cats in iterations(runs[("tiny-resnet", method)]).values():
            bw = cats["backward"][0]
            bw_end = bw["ts"] + bw["dur"]
            comm = [c for c in cats["comm"] if "submitted_us" in c["args"]]
            assert comm, method
            assert (min(c["args"]["submitted_us"] for c in comm) < bw_end) is during, method
            started_during.append(min(c["ts"] for c in comm) < bw_end)
        assert any(started_during) is during, method


BS = ["bytescheduler-ps", "bytescheduler-a2a"]


@pytest.mark.parametrize("method", BS)
def test_bytescheduler_pieces_never_exceed_the_partition_size(runs, method):
    rec = runs[("tiny-resnet", method)]
    assert rec["partition_params"] == 1024 and rec["partition_bytes"] == 4096  # parameters, and bytes in fp32
    assert rec["partitions_per_iter"] > 29  # tensors were split
    for rank in range(rec["workers"]):
        # every message on every rank: all-reduces, pushes, and per machine the node's reduces/broadcasts
        sizes = [e["args"]["bytes"] for e in load_trace(rec["trace"][rank]) if e["cat"] == "comm"]
        assert sizes and max(sizes) <= 4096


@pytest.mark.parametrize("method", BS)
def test_bytescheduler_bytes_in_flight_stay_within_credit_plus_one_partition(runs, method):
    rec = runs[("tiny-resnet", method)]
    # ByteScheduler's rule: send while credit remains, so in flight stays below credit + one partition
    limit = rec["credit_bytes"] + rec["partition_bytes"]
    peak = peak_bytes_in_flight(rec)  # rank 0 decides the order for A2A and for its machine on PS
    assert 4096 < peak < limit  # several pieces in flight at once, never a whole partition past the credit


@pytest.mark.parametrize("method", BS)
def test_bytescheduler_sends_the_highest_priority_queued_partition_first(runs, method):
    rec = runs[("tiny-resnet", method)]
    events = scheduled_messages(rec)
    overtakes = 0
    for x in events:
        chosen = x["args"]["chosen_us"]
        for y in events:  # y was waiting when x was chosen: it must not be more urgent
            if y["args"]["ready_us"] <= chosen < y["args"]["chosen_us"]:
                assert y["args"]["priority"] >= x["args"]["priority"], (x["args"], y["args"])
        overtakes += x["args"]["queued"] > 0 and any(
            y["args"]["ready_us"] < x["args"]["ready_us"] and y["args"]["chosen_us"] > chosen for y in events)
    assert overtakes > 0  # a later, more urgent partition did overtake earlier ones


@pytest.mark.parametrize("method", BS)
def test_bytescheduler_leader_tells_every_partition_that_can_go_in_one_message(runs, method):
    """The order leader (rank 0 of an A2A run, of the local machine's node on PS) sends every
    partition it can pick at once in one message, and every other rank launches them in its
    order: one message per partition would put a round trip between any two launches."""
    rec = runs[("tiny-resnet", method)]
    name = "node_reduce" if method.endswith("-ps") else "allreduce"  # on PS the node's leader alone pushes
    launches = {rank: sorted((e for e in load_trace(rec["trace"][rank]) if e["name"] == name), key=lambda e: e["ts"])
                for rank in range(rec["workers"])}
    per_message = Counter(e["args"]["chosen_us"] for e in launches[0])
    assert max(per_message.values()) > 1, per_message
    order = [(e["args"]["iter"], e["args"]["partition"]) for e in launches[0]]
    for rank in range(1, rec["workers"]):
        assert [(e["args"]["iter"], e["args"]["partition"]) for e in launches[rank]] == order


@pytest.mark.parametrize("method", BS)
def test_bytescheduler_overlaps_communication_with_the_next_forward_pass(runs, method):
    rec = runs[("tiny-resnet", method)]
    its = iterations(rec)
    overlapped = [i for i in sorted(its)[:-1]
                  if its[i + 1]["forward"][0]["ts"] < max(c["ts"] + c["dur"] for c in its[i]["comm"])]
    assert overlapped, "no iteration's communication ran into the next forward pass"


@pytest.mark.parametrize("method", ["wfbp-ps", "bytescheduler-ps"])
def test_the_gloo_ps_transport_is_lossless_too(tmp_path, method):
    """ZeroMQ is the default PS transport; the Gloo point-to-point alternative stays correct."""
    extra = BYTESCHEDULER if method.startswith("bytescheduler") else []
    ddlbench(f"method={method}", "method.transport=gloo", "model=tiny-resnet", "workers=2", *PROTOCOL, *extra,
             results=tmp_path, check=True)
    rec = records(tmp_path)[-1]
    assert rec["config"]["method"]["transport"] == "gloo" and rec["server_stats"][0].get("transport") is None
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6)
