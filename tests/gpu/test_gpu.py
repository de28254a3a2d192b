"""GPU tier: CUDA workers, NCCL. Every test here skips, with the reason, where CUDA GPUs are
absent (conftest) or fewer than it needs: NCCL refuses two ranks on one GPU, so the
multi-worker NCCL tests need two GPUs. On one GPU, the test-only `launcher.share_gpu=true`
puts two ranks on it over Gloo with CUDA tensors: the methods' CUDA staging, completion events
and streams then run for real, with Gloo in NCCL's place.

TF32 is off (NVIDIA_TF32_OVERRIDE=0) so that GPU fp32 training can be held to single-process
SGD computed on the CPU: the two then differ only by summation order.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddlbench.commbench.collectives import COLLECTIVES
from helpers import REPO, ddlbench, peak_bytes_in_flight, records, reference_parameters

pytestmark = pytest.mark.gpu

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (NCCL: one rank per GPU); {GPUS} visible")
PROTOCOL = ["model=tiny-resnet", "device=cuda", "profile.warmup_iters=1", "profile.measured_iters=3",
            "profile.repeats=1", "local_batch=4", "save_params=true", "trace=true"]
# Every method: the all-reduce ones on NCCL, the PS ones with their CPU servers.
METHODS = ["bsp-a2a", "wfbp-a2a", "mg-wfbp", "bytescheduler-a2a", "ddp", "bsp-ps", "wfbp-ps", "bytescheduler-ps"]
# Small ByteScheduler pieces (parameters), so partitions queue and credit binds on tiny-resnet.
BYTESCHEDULER = ["method.partition_params=1024", "method.credit_params=4096"]


def method_args(method: str) -> list[str]:
    return [f"method={method}", *(BYTESCHEDULER if method.startswith("bytescheduler") else [])]


@pytest.fixture(autouse=True)
def no_tf32(monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")


def assert_lossless(rec):
    assert rec["status"] == "ok", rec.get("error")
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    want = reference_parameters(Path(rec["run_dir"]))
    assert got.keys() == want.keys()
    for name, ref in want.items():
        # A wrong average moves parameters by ~lr * grad (~1e-3); summation order by ~1e-6.
        torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"{rec['method']} {name}: {m}")


def test_one_gpu_worker_trains_like_single_process_sgd(tmp_path):
    ddlbench("method=bsp-a2a", "workers=1", *PROTOCOL, results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["device"] == "cuda" and rec["samples_per_sec"] > 0
    assert_lossless(rec)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_one_gpu_is_lossless(tmp_path, method):
    ddlbench(*method_args(method), "workers=1", *PROTOCOL, results=tmp_path, check=True, timeout=600)
    (rec,) = records(tmp_path)
    assert rec["device"] == "cuda"
    assert_lossless(rec)


def assert_credit_bound_from_the_trace(rec):
    """ByteScheduler's bytes in flight, read from rank 0's trace (end times stamped when the
    data landed: a CUDA event on the completion stream), stay below credit + one partition."""
    assert rec["partition_bytes"] < peak_bytes_in_flight(rec) < rec["credit_bytes"] + rec["partition_bytes"]


@pytest.mark.parametrize("method", METHODS)
def test_two_ranks_sharing_one_gpu_over_gloo_are_lossless(tmp_path, method):
    ddlbench(*method_args(method), "workers=2", "backend=gloo", "launcher.share_gpu=true", *PROTOCOL,
             results=tmp_path, check=True, timeout=600)
    (rec,) = records(tmp_path)
    assert rec["device"] == "cuda" and rec["backend"] == "gloo" and rec["workers"] == 2
    assert_lossless(rec)
    if method.startswith("bytescheduler"):
        assert_credit_bound_from_the_trace(rec)


@two_gpus
@pytest.mark.parametrize("method", METHODS)
def test_methods_on_two_gpus_are_lossless(tmp_path, method):
    ddlbench(*method_args(method), "workers=2", *PROTOCOL, results=tmp_path, check=True, timeout=600)
    (rec,) = records(tmp_path)
    assert rec["device"] == "cuda" and rec["backend"] == "nccl" and rec["workers"] == 2
    assert_lossless(rec)
    if method.startswith("bytescheduler"):
        assert_credit_bound_from_the_trace(rec)


@two_gpus
def test_commbench_nccl_every_collective_correct_on_cuda_tensors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddlbench.commbench", "--results", str(tmp_path), "--network-name",
                           "none", "--backends", "nccl", "--devices", "cuda", "--workers", "2", "--collectives", ",".join(COLLECTIVES),
                           "--dtypes", "fp32,fp16,bf16", "--max-bytes", "1MiB", "--iters", "5", "--mode", "sizes"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = records(tmp_path)
    assert {(r["collective"], r["dtype"]) for r in rows} == {(c, d) for c in COLLECTIVES for d in ("fp32", "fp16", "bf16")}
    for r in rows:
        assert r["backend"] == "nccl" and r["device"] == "cuda" and r["fallback_from"] is None
        assert "unsupported" not in r and r["wrong"] == 0 and 0 < r["time_us_min"] <= r["time_us_p50"] <= r["time_us_max"]


def test_cuda_clock_times_each_call_and_covers_the_loop():
    """commbench's CUDA timing: one event after each call, read after the loop; a call that keeps
    the GPU busy for a known while shows up in every one of the times."""
    from ddlbench.commbench.worker import timed_calls

    x = torch.randn(2048, 2048, device="cuda")
    x @ x  # the first product on a fresh context sets up cuBLAS (tens of ms): not the clock's to time

    class Matmuls:
        device = x.device

        def run(self, coll, inp, out):
            for _ in range(10):
                x @ x

    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    times = timed_calls(Matmuls(), None, None, None, 5)
    end.record()
    torch.cuda.synchronize()
    span_s = start.elapsed_time(end) / 1e3
    assert len(times) == 5 and min(times) > 0.2 * max(times)  # each call's GPU work, not launch time
    assert 0.9 * span_s <= sum(times) <= span_s


def test_mgwfbp_profiles_backward_with_cuda_events_not_launch_times(tmp_path):
    """On CUDA, MG-WFBP's per-tensor backward times come from CUDA events in the gradient
    hooks, so they add up to the GPU's backward time. BERT-Base at batch 32 is GPU-bound (a
    backward pass is tens of ms of matmuls, launched in a few ms), so stamps taken on the host
    without synchronising, which read launch times, would add up to far less."""
    import statistics

    from omegaconf import OmegaConf

    from ddlbench import models

    ddlbench("method=mg-wfbp", "workers=1", "model=bert-base", "device=cuda", "local_batch=32",
             "profile.warmup_iters=1", "profile.measured_iters=2", "profile.repeats=1",
             "method.alpha_s=1e-4", "method.beta_s_per_byte=1e-10", results=tmp_path, check=True, timeout=600)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["profile_clock"] == "cuda_events" and len(rec["tb_s"]) == len(rec["tensor_bytes"])
    # The same model and batch shape, its backward pass timed by CUDA events here.
    cfg = OmegaConf.load(Path(rec["run_dir"]) / "config.yaml")
    w = models.build(cfg.model, cfg.local_batch, cfg.seed)
    model = w.model.cuda()
    batch = w.make_batch(cfg.seed, 0, 0, torch.device("cuda"))
    times = []
    for rep in range(6):
        loss = w.loss(model, batch)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss.backward()
        end.record()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        if rep > 0:  # the first pass warms up
            times.append(start.elapsed_time(end) / 1e3)
    backward_s = statistics.median(times)
    assert 0.7 * backward_s <= sum(rec["tb_s"]) <= 1.3 * backward_s, (sum(rec["tb_s"]), backward_s)


def test_seeding_dropout_on_a_gpu_draws_as_torch_manual_seed_does():
    """data.seed_dropout seeds the run's GPU's generator as torch.manual_seed would: the same
    dropout masks on that device."""
    from ddlbench.models.data import seed_dropout, stream_seed

    device = torch.device("cuda", 0)
    ones = torch.ones(4096, device=device)
    torch.manual_seed(stream_seed(3, 1, 7))
    want = torch.nn.functional.dropout(ones, 0.5)
    torch.manual_seed(0)
    seed_dropout(3, 1, 7, device)
    assert torch.equal(torch.nn.functional.dropout(ones, 0.5), want)
    seed_dropout(3, 1, 8, device)
    assert not torch.equal(torch.nn.functional.dropout(ones, 0.5), want)
