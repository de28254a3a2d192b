"""Run records: atomic appends, tolerant reading, and the summary table's arithmetic."""
import json

from ddlbench import record
from ddlbench.analysis import summary, tables
from ddlbench.analysis.records import load


def rec(method, workers, per_repeat, **kw):
    base = dict(method=method, model="m", workers=workers, local_batch=4, device="cpu", backend="gloo",
                engine="torch", status="ok", samples_per_sec=sum(per_repeat) / len(per_repeat),
                samples_per_sec_per_repeat=per_repeat)
    base.update(kw)
    return base


def test_append_keeps_earlier_lines_and_never_glues_onto_a_torn_one(tmp_path):
    path = tmp_path / "runs.jsonl"
    record.append(path, {"a": 1})
    with open(path, "a") as f:
        f.write('{"torn": ')  # a writer that died mid-line (not ours: ours never leave one)
    record.append(path, {"b": 2})
    lines = path.read_text().splitlines()
    assert lines[0] == '{"a": 1}' and lines[-1] == '{"b": 2}'
    loaded = load([path])
    assert [r for r in loaded.records] == [{"a": 1}, {"b": 2}]
    assert len(loaded.problems) == 1
    assert loaded.problems[0].startswith(f"{path}:2: unparsable record skipped")
    assert not list(tmp_path.glob(".*tmp"))


def test_summary_combines_repeats_and_keeps_setups_apart():
    records = [
        rec("bsp-a2a", 1, [10.0, 10.0]),
        rec("bsp-a2a", 2, [18.0, 20.0]),
        rec("bsp-a2a", 2, [22.0]),               # a second run of the same configuration
        rec("bsp-a2a", 2, [99.0], local_batch=8),  # another batch: its own table
        rec("mg-wfbp", 2, [5.0], status="failed"),
    ]
    setups = tables.ours(records)
    assert len(setups) == 2
    cell = setups[tables.Setup("ours", "m", 4, "cpu/gloo")][("bsp-a2a", 2)]
    assert (cell.mean, round(cell.std, 6), cell.n) == (20.0, 2.0, 3)
    text = summary.render(records)
    assert "20.00 ± 2.00 [2.00x]" in text
    assert "mg-wfbp" not in text  # failed runs are not cells
    assert "local batch 8" in text and "99.00 ± 0.00" in text


def test_summary_of_nothing_says_so(tmp_path):
    assert summary.render(load([tmp_path / "runs.jsonl"]).records) == "no ok run records yet"


def test_env_knobs_are_the_ones_that_change_measurements():
    knobs = record.env_knobs({"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "2", "HOME": "/root", "GLOO_SOCKET_IFNAME": "lo"})
    assert knobs == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "2"}
    assert json.dumps(record.versions())
