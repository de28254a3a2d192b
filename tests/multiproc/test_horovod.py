"""The Horovod engine (engine=horovod), run for real with horovodrun over Gloo and with mpirun:
the all-reduce methods stay lossless, match the torch engine, and their schedules show in the
trace with Horovod's own fusion switched off. Skipped, with the reason, where Horovod is not
installed (`make horovod`)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ddlbench.engines import horovod_available
from ddlbench.trace import load as load_trace

from helpers import ddlbench, iterations, peak_bytes_in_flight, records, reference_parameters

ok, why = horovod_available()
pytestmark = [pytest.mark.multiproc, pytest.mark.skipif(not ok, reason=why)]

PROTOCOL = ["model=tiny-resnet", "workers=2", "profile.warmup_iters=1", "profile.measured_iters=3",
            "profile.repeats=1", "local_batch=4", "trace=true", "save_params=true"]
HVD = ["engine=horovod", "launcher=horovodrun"]
METHODS = ["bsp-a2a", "wfbp-a2a", "mg-wfbp", "bytescheduler-a2a", "horovod"]
EXTRA = {"mg-wfbp": ["method.alpha_s=2e-5"], "bytescheduler-a2a": ["method.partition_params=1024", "method.credit_params=4096"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{(engine, launcher, method): record}."""
    results = tmp_path_factory.mktemp("horovod")
    for m in METHODS:
        ddlbench(f"method={m}", *PROTOCOL, *HVD, *EXTRA.get(m, []), results=results, check=True)
    ddlbench("method=wfbp-a2a", *PROTOCOL, results=results, check=True)  # the torch engine, same method
    ddlbench("method=mg-wfbp", *PROTOCOL, "engine=horovod", "launcher=mpirun", *EXTRA["mg-wfbp"], results=results,
             check=True)
    return {(r["engine"], r["launcher"], r["method"]): r for r in records(results)}


def params(rec) -> dict[str, torch.Tensor]:
    return torch.load(Path(rec["run_dir"]) / "params.pt")


@pytest.mark.parametrize("method", METHODS)
def test_lossless_on_horovod(runs, method):
    rec = runs[("horovod", "horovodrun", method)]
    assert rec["status"] == "ok", rec["error"]
    assert rec["params_consistent"]
    got, want = params(rec), reference_parameters(Path(rec["run_dir"]))
    for name, ref in want.items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{method} {name}: {m}")


def test_same_parameters_as_the_torch_engine(runs):
    hvd, torch_run = params(runs[("horovod", "horovodrun", "wfbp-a2a")]), params(runs[("torch", "local", "wfbp-a2a")])
    for name in torch_run:
        torch.testing.assert_close(hvd[name], torch_run[name], rtol=1e-6, atol=1e-7)


def test_mpirun_launch_is_lossless_too(runs):
    rec = runs[("horovod", "mpirun", "mg-wfbp")]
    assert rec["status"] == "ok", rec["error"]
    got, want = params(rec), reference_parameters(Path(rec["run_dir"]))
    for name, ref in want.items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6)


def test_horovod_fusion_is_off_for_the_methods_and_default_for_its_optimizer(runs):
    for m in METHODS[:-1]:
        env = runs[("horovod", "horovodrun", m)]["env"]
        assert (env["HOROVOD_FUSION_THRESHOLD"], env["HOROVOD_CYCLE_TIME"], env["HOROVOD_CACHE_CAPACITY"]) == ("0", "0", "0")
    assert "HOROVOD_FUSION_THRESHOLD" not in runs[("horovod", "horovodrun", "horovod")]["env"]


def test_wfbp_on_horovod_sends_each_tensor_during_backward(runs):
    rec = runs[("horovod", "horovodrun", "wfbp-a2a")]
    for cats in iterations(rec).values():
        bw = cats["backward"][0]
        assert len(cats["comm"]) == 29 and all(len(c["args"]["tensors"]) == 1 for c in cats["comm"])
        assert min(c["ts"] for c in cats["comm"]) < bw["ts"] + bw["dur"]


def test_bsp_on_horovod_sends_one_message_after_backward(runs):
    rec = runs[("horovod", "horovodrun", "bsp-a2a")]
    for cats in iterations(rec).values():
        bw = cats["backward"][0]
        assert [c["args"]["bytes"] for c in cats["comm"]] == rec["groups"]
        assert cats["comm"][0]["ts"] >= bw["ts"] + bw["dur"]


def test_mgwfbp_on_horovod_sends_its_recorded_groups(runs):
    rec = runs[("horovod", "horovodrun", "mg-wfbp")]
    assert 1 < len(rec["groups"]) < 29
    for cats in iterations(rec).values():
        assert sorted(c["args"]["bytes"] for c in cats["comm"]) == sorted(rec["groups"])


def test_bytescheduler_on_horovod_partitions_and_keeps_credit(runs):
    rec = runs[("horovod", "horovodrun", "bytescheduler-a2a")]
    events = [e for e in load_trace(rec["trace"][0]) if e["cat"] == "comm"]
    assert events and max(e["args"]["bytes"] for e in events) <= 4096
    # bytes in flight stay below the credit plus one partition
    peak = peak_bytes_in_flight(rec)
    assert peak < 16384 + 4096
