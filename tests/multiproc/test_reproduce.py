"""`make reproduce` as a user runs it: the sweep, the single-worker baseline, the table; and the
study's measurement protocol: repeats as separate launches merged into one record, and a clock
that nothing leaks out of."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO, ddlbench, records, reference_parameters

from ddlbench.trace import load as load_trace

pytestmark = pytest.mark.multiproc


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_reproduce_runs_the_methods_and_prints_the_table(tmp_path):
    args = ["make", "-s", "reproduce", "METHOD=bsp-a2a,mg-wfbp", "MODEL=tiny-resnet", "WORKERS=2",
            "WARMUP=1", "ITERS=2", "REPEATS=2", f"RESULTS={tmp_path}", f"PY={sys.executable}",
            "OVERRIDES=seed=3"]
    # PY= points make at this interpreter, so the test needs no second virtual environment.
    proc = subprocess.run(args + ["-o", f"{REPO}/.venv/.installed"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records(tmp_path)
    assert sorted((r["method"], r["workers"]) for r in recs) == [("bsp-a2a", 1), ("bsp-a2a", 2), ("mg-wfbp", 2)]
    assert all(r["status"] == "ok" and r["repeats"] == 2 and len(r["iter_times_s"]) == 4 for r in recs)
    assert all(r["config"]["seed"] == 3 for r in recs)
    table = proc.stdout
    assert "tiny-resnet, local batch 4, cpu/gloo" in table
    assert "| mg-wfbp" in table and "x]" in table  # a speedup over the one-worker run: one setup
    assert " cfg " not in table

    # Run again: the baseline is reused, not measured twice.
    again = subprocess.run(args + ["METHOD=bsp-a2a", "-o", f"{REPO}/.venv/.installed"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "skipped" in again.stdout
    assert len(records(tmp_path)) == 4


def test_make_reproduce_rejects_a_bad_method_before_running_anything(tmp_path):
    proc = subprocess.run(["make", "-s", "reproduce", "METHOD=nope", f"RESULTS={tmp_path}", f"PY={sys.executable}",
                           "-o", f"{REPO}/.venv/.installed"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "unknown method 'nope'" in proc.stderr
    assert not records(tmp_path)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """ByteScheduler-A2A, whose communication runs on into the next forward pass, with each of
    two repeats a launch of its own; small partitions and credit so that pieces queue; and the
    driver's communication probe before each repeat."""
    results = tmp_path_factory.mktemp("launched")
    ddlbench("method=bytescheduler-a2a", "model=tiny-resnet", "workers=2", "local_batch=4", "profile.warmup_iters=1",
             "profile.measured_iters=2", "profile.repeats=2", "profile.repeat_mode=launch", "trace=true",
             "save_params=true", "method.partition_params=1024", "method.credit_params=4096",
             "profile.comm_probe_rounds=2", results=results, check=True)
    (rec,) = records(results)
    return rec


def test_repeats_as_launches_merge_into_one_record_and_each_launch_is_lossless(launched):
    rec = launched
    assert rec["status"] == "ok", rec["error"]
    assert rec["repeat_mode"] == "launch" and rec["repeats"] == 2 and len(rec["launch_dirs"]) == 2
    per = [launch["samples_per_sec"] for launch in rec["launches"]]
    assert rec["samples_per_sec_per_repeat"] == per and rec["samples_per_sec"] == pytest.approx(sum(per) / 2)
    assert rec["block_time_s"] == [t for launch in rec["launches"] for t in launch["block_time_s"]]
    assert all(launch["iterations_total"] == 3 for launch in rec["launches"])  # each launch starts afresh
    # each launch's communication probe, one per repeat, joined as the blocks are
    assert rec["comm_probe_rounds"] == 2 and rec["comm_probe_tensors"] > 1
    assert rec["comm_probe_s"] == [t for launch in rec["launches"] for t in launch["comm_probe_s"]]
    assert len(rec["comm_probe_s"]) == 2 and all(t > 0 for t in rec["comm_probe_s"])
    want = reference_parameters(Path(rec["run_dir"]))  # one launch's iterations
    for d in rec["launch_dirs"]:
        got = torch.load(Path(d) / "params.pt")
        assert got.keys() == want.keys()
        for name, ref in want.items():
            torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6, msg=lambda m: f"{d} {name}: {m}")


def test_nothing_leaks_out_of_the_clock(launched):
    """Each measured block, on every worker, starts before its first forward pass and ends after
    the last communication of its iterations has landed; the recorded block time is that span
    (the slowest rank's)."""
    rec = launched
    for k, launch in enumerate(rec["launches"]):
        spans = []
        for rank in range(rec["workers"]):
            events = load_trace(launch["trace"][rank])
            (block,) = [e for e in events if e["cat"] == "measure"]
            (probe,) = [e for e in events if e["name"] == "comm probe"]  # before the warm-up, outside the block
            assert probe["ts"] + probe["dur"] <= min(e["ts"] for e in events if e["cat"] == "forward")
            first, n = block["args"]["iter"], block["args"]["iters"]
            assert (first, n) == (1, 2)
            inside = [e for e in events if e["cat"] != "measure" and first <= e["args"]["iter"] < first + n]
            comms = [e for e in inside if e["cat"] == "comm"]
            assert comms and min(e["ts"] for e in inside if e["cat"] == "forward") >= block["ts"]
            assert max(e["ts"] + e["dur"] for e in comms) <= block["ts"] + block["dur"]
            spans.append(block["dur"] / 1e6)
        assert launch["block_time_s"][0] == pytest.approx(max(spans), abs=2e-3)
        assert rec["block_time_s"][k] == launch["block_time_s"][0]
