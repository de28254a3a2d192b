"""`make reproduce` as a user runs it: the sweep, the single-worker baseline, the table."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, records

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
    assert "| mg-wfbp" in table and "x]" in table  # a speedup over the one-worker run

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
    assert not Path(tmp_path, "runs.jsonl").exists()
