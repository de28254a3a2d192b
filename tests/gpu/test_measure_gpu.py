"""The driver on a GPU as the study measured: one batch on the device reused, cudnn.benchmark
on, TF32 recorded, repeats as launches; still lossless against single-process SGD on the CPU.
Skips without CUDA (conftest)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import ddlbench, records, reference_parameters

pytestmark = pytest.mark.gpu


def test_one_gpu_measures_like_the_study_and_stays_lossless(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")  # fp32 on the GPU, comparable with the CPU reference
    ddlbench("method=bsp-a2a", "workers=1", "model=tiny-resnet", "device=cuda", "local_batch=4", "save_params=true",
             "profile.warmup_iters=1", "profile.measured_iters=3", "profile.repeats=2", "profile.repeat_mode=launch",
             "profile.distinct_batches=1", results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok" and rec["device"] == "cuda" and rec["repeat_mode"] == "launch"
    assert rec["cudnn_benchmark"] is True
    assert rec["tf32"]["NVIDIA_TF32_OVERRIDE"] == "0" and rec["tf32"]["on"] is False
    assert len(rec["block_time_s"]) == 2 and all(t > 0 for t in rec["block_time_s"])
    want = reference_parameters(Path(rec["run_dir"]))
    for d in rec["launch_dirs"]:
        got = torch.load(Path(d) / "params.pt")
        for name, ref in want.items():
            torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_tf32_is_recorded_as_on_where_the_gpu_and_the_flags_allow_it(tmp_path, monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    ddlbench("method=bsp-a2a", "workers=1", "model=tiny-resnet", "device=cuda", "local_batch=4",
             "profile.warmup_iters=1", "profile.measured_iters=2", "profile.repeats=1", results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    ampere_or_later = torch.cuda.get_device_capability(0)[0] >= 8
    flags = rec["tf32"]
    assert flags["on"] == (ampere_or_later and (flags["matmul_allow_tf32"] or flags["cudnn_allow_tf32"]))


def test_a_measured_profile_keeps_up_with_the_run(tmp_path):
    """PROFILE_FROM=measured on a GPU: CUDA events in the hooks, read after the window, batches
    made before it. Its one-worker throughput is the run's, less what its hooks cost: with a
    synchronisation in every hook, ResNet-50 at batch 64 on an H100 profiled at 0.63 of the
    run (1,036 against 1,650 samples/s), and with a batch made in every iteration at 0.84; on an
    H200, scaled to iterations that were all hooked, at 0.77 (1,506 against 1,949). Measured
    three times and the median kept (`repeats`, as on any shared machine): in the whole tier
    (`pytest -n 8 tests/gpu`, this test holding the GPU alone) one window read every plain
    iteration at 36.7 ms, 0.90 of the run (1,744 against 1,939), and alone 32.2 ms, also after
    the other GPU-timing tests in the same process."""
    from ddlbench.predict import profile

    ddlbench("method=bsp-a2a", "workers=1", "model=resnet50", "device=cuda", "local_batch=64",
             "profile.warmup_iters=5", "profile.measured_iters=30", "profile.repeats=1", "profile.distinct_batches=1",
             results=tmp_path, check=True, timeout=600)
    (rec,) = records(tmp_path)
    prof = profile.measured("resnet50", 64, "cuda", cache=False, repeats=3)
    assert profile.CUDA_HOOKS in prof.source
    assert max(prof.ready_s) <= prof.backward_s and max(prof.need_s) <= prof.forward_s
    assert prof.samples_per_sec_1 >= 0.9 * rec["samples_per_sec"], (prof.samples_per_sec_1, rec["samples_per_sec"])
