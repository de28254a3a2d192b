"""Completion means the data is there (DESIGN section 6), shown on CPU with stand-ins for what a
GPU does:

* NCCL may resolve a collective's future when the work is only queued. The test transport
  (DDLBENCH_TEST_EARLY_COMPLETION_S) resolves every future at once and lets the sum land a
  while after the real all-reduce: credit, parameter updates and trace ends must still wait for
  the data.
* NCCL takes only CUDA tensors. A backend registered for CUDA alone stands in for it as the
  default backend: the control group must still carry the CPU messages of rank 0's decisions.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from ddlbench.methods.transport import EARLY_COMPLETION_ENV
from ddlbench.trace import load as load_trace
from helpers import ddlbench, peak_bytes_in_flight, records, reference_parameters, two_ranks

pytestmark = pytest.mark.multiproc

DELAY_S = 0.02
PROTOCOL = ["model=tiny-resnet", "workers=2", "profile.warmup_iters=1", "profile.measured_iters=3",
            "profile.repeats=1", "local_batch=4", "trace=true", "save_params=true"]


@pytest.fixture(scope="module")
def early(tmp_path_factory, request) -> dict:
    results = tmp_path_factory.mktemp("early")
    mp = pytest.MonkeyPatch()
    mp.setenv(EARLY_COMPLETION_ENV, str(DELAY_S))
    try:
        ddlbench("method=bytescheduler-a2a", *PROTOCOL, "method.partition_params=1024", "method.credit_params=4096",
                 results=results, check=True)
        ddlbench("method=wfbp-a2a", *PROTOCOL, results=results, check=True)
    finally:
        mp.undo()
    return {r["method"]: r for r in records(results)}


@pytest.mark.parametrize("method", ["bytescheduler-a2a", "wfbp-a2a"])
def test_updates_wait_for_the_data_not_the_future(early, method):
    rec = early[method]
    assert rec["status"] == "ok", rec["error"]
    assert rec["env"][EARLY_COMPLETION_ENV] == str(DELAY_S)  # the record says the test transport ran
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{method} {name}: {m}")


@pytest.mark.parametrize("method", ["bytescheduler-a2a", "wfbp-a2a"])
def test_trace_ends_are_when_the_data_landed(early, method):
    rec = early[method]
    for rank in range(2):
        comms = [e for e in load_trace(rec["trace"][rank]) if e["cat"] == "comm"]
        assert comms and min(e["dur"] for e in comms) >= DELAY_S * 1e6


def test_credit_comes_back_only_when_the_data_landed(early):
    rec = early["bytescheduler-a2a"]
    peak = peak_bytes_in_flight(rec)
    # Each all-reduce stays in flight for at least DELAY_S, so pieces pile up to the credit;
    # had credit come back at enqueue, nothing would bound them.
    assert rec["credit_bytes"] <= peak < rec["credit_bytes"] + rec["partition_bytes"]


CUDA_ONLY_DEFAULT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    from ddlbench.methods import control_group
    # A backend for CUDA tensors only, as NCCL is, registered as the default.
    dist.Backend.register_backend("cudaonly", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
                                  devices=["cuda"])
    rank = int(sys.argv[1])
    dist.init_process_group("cudaonly", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
    try:
        dist.all_reduce(torch.ones(1), group=dist.new_group([0, 1]))
        print("a default-backend group carried a CPU tensor")
    except RuntimeError:
        print("a default-backend group refuses CPU tensors")
    control = control_group(2)
    order = torch.tensor([7 if rank == 0 else -1])
    dist.broadcast(order, src=0, group=control)
    print("order", int(order), flush=True)
    # An orderly end, as the workers have: both ranks done before either tears its groups down
    # (left to interpreter exit, a rank's c10d threads were once destroyed still joinable in CI:
    # "terminate called without an active exception", SIGABRT)
    dist.barrier(group=control)
    dist.destroy_process_group()
""")


def test_control_messages_cross_a_cuda_only_default_backend():
    for out in two_ranks(CUDA_ONLY_DEFAULT, timeout_s=120):
        assert "a default-backend group refuses CPU tensors" in out  # the stand-in behaves as NCCL does
        assert "order 7" in out
