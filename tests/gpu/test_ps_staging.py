"""GPU tier for the PS engine: staging through pinned memory on copy streams, completion by
CUDA events (DESIGN section 6), and the per-machine topology over NCCL inside a node.

On one GPU the staging is exercised in-process against a default stream kept busy with
`torch.cuda._sleep`: a copy that did not wait for the producing stream, or a completion that
was only an enqueue, reads or reports the wrong values. With two GPUs (one node of two) the PS
methods run end to end with NCCL inside the node and the leader pushing to a CPU server.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from helpers import ddlbench, records, reference_parameters

pytestmark = pytest.mark.gpu

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (NCCL: one rank per GPU); {GPUS} visible")
SLEEP_CYCLES = 500_000_000  # about a quarter of a second of one GPU's clock


@pytest.fixture
def stager():
    from ddlbench.methods.ps_stage import Stager

    errors = []
    s = Stager(torch.device("cuda", 0), errors.append)
    yield s
    s.close(10)
    assert not errors


def test_a_push_is_copied_after_the_stream_that_produced_it_without_blocking_the_caller(stager):
    x = torch.zeros(1 << 20, device="cuda")
    buf = stager.host_buffer(x.numel(), x.dtype)
    assert buf.is_pinned()
    got, where = [], []
    done = threading.Event()
    torch.cuda._sleep(SLEEP_CYCLES)  # the gradient is still being produced ...
    x.fill_(3.0)                     # ... and lands only after the sleep
    t0 = time.perf_counter()
    stager.to_host(x, buf, None, lambda host: (got.append(host.clone()), where.append(threading.current_thread().name),
                                               done.set()))
    enqueue_s = time.perf_counter() - t0
    assert done.wait(30)
    assert torch.equal(got[0], torch.full_like(got[0], 3.0)) and where == ["ps-d2h"]
    assert enqueue_s < 0.05  # the autograd thread only enqueues the copy


def test_a_pull_lands_divided_before_it_counts_as_done_and_off_the_io_thread(stager):
    view = torch.zeros(1 << 20, device="cuda")
    frame = torch.full((view.numel(),), 8.0)  # pageable, like a ZeroMQ frame
    bounce = stager.host_buffer(view.numel(), view.dtype)
    seen, where = [], []
    done = threading.Event()

    def then():
        where.append(threading.current_thread().name)
        seen.append(view.cpu())  # on the done lane: the event has passed, the data is there
        done.set()

    torch.cuda._sleep(SLEEP_CYCLES)  # the copy stream is free; only the event says when it lands
    stager.to_device(frame, view, 4, bounce, then)
    assert done.wait(30)
    assert where == ["ps-h2d-done"] and torch.equal(seen[0], torch.full_like(seen[0], 2.0))


def test_a_collective_is_issued_after_the_gradient_and_complete_only_when_its_event_passes(stager, tmp_path):
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("NCCL is not available in this torch build")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        x = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(5.0)
        marker = stager.mark()
        with stager.issue(marker):
            y = x * 2  # on the node stream: sees 5 only if it waited for the gradient's stream
            work = dist.all_reduce(y, async_op=True)
            ticket = stager.ticket(work)
        ticket()
        assert torch.equal(y.cpu(), torch.full((x.numel(),), 10.0))
    finally:
        dist.destroy_process_group()


PROTOCOL = ["model=tiny-resnet", "device=cuda", "profile.warmup_iters=1", "profile.measured_iters=3",
            "profile.repeats=1", "local_batch=4", "save_params=true", "trace=true"]


@pytest.fixture(autouse=True)
def no_tf32(monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")


@two_gpus
@pytest.mark.parametrize("topology", ["per-machine", "per-gpu"])
@pytest.mark.parametrize("method", ["bsp-ps", "wfbp-ps"])
def test_ps_on_one_node_of_two_gpus_is_lossless(tmp_path, method, topology):
    ddlbench(f"method={method}", f"method.ps_topology={topology}", "workers=2", *PROTOCOL, results=tmp_path,
             check=True, timeout=600)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["device"] == "cuda" and rec["ps_topology"] == topology
    assert rec["pushers_per_key"] == (1 if topology == "per-machine" else 2)
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"{method} {name}: {m}")
