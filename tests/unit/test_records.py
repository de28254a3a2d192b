"""Run records: atomic appends, tolerant reading, and the summary table's arithmetic."""
import json

import pytest

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


GOOD = rec("bsp-a2a", 2, [10.0, 12.0])


def one_line_error(err: str, *names: str) -> None:
    """A user's error: one line naming the bad value and what is accepted, no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "error:" in lines[0] and "accepted:" in lines[0], err
    assert all(n in lines[0] for n in names), err


def test_a_missing_results_path_is_one_line_and_keeps_an_earlier_export(tmp_path, capsys):
    keep = tmp_path / "keep.jsonl"
    keep.write_text(json.dumps(GOOD) + "\n")
    typo = tmp_path / "typo-path"
    assert summary.main([str(typo), "--export", str(keep)]) == 2
    one_line_error(capsys.readouterr().err, str(typo))
    assert keep.read_text() == json.dumps(GOOD) + "\n"


def test_an_export_of_nothing_leaves_the_file_alone_and_says_so(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    keep = tmp_path / "keep.jsonl"
    keep.write_text(json.dumps(GOOD) + "\n")
    assert summary.main([str(results), "--export", str(keep)]) == 0
    assert keep.read_text() == json.dumps(GOOD) + "\n"
    err = capsys.readouterr().err
    assert "nothing to export" in err and str(keep) in err
    assert summary.main([str(results), "--export", str(tmp_path / "new.jsonl")]) == 0
    assert not (tmp_path / "new.jsonl").exists()


BAD_FIELDS = [  # (the bad part of a record, the field its warning names)
    ({"model": None}, "model"),                   # a record missing `model`
    ({"workers": "two"}, "workers"),
    ({"host_busy_cores": "x", "host_cores": 2}, "host_busy_cores"),
    ({"local_batch": "4"}, "local_batch"),
    ({"samples_per_sec_per_repeat": ["a"]}, "samples_per_sec_per_repeat"),
    ({"network": "ib"}, "network"),
    ({"config": {"launcher": {"workers_per_node": "x"}}}, "workers_per_node"),
]


@pytest.mark.parametrize("bad, field", BAD_FIELDS, ids=[f for _, f in BAD_FIELDS])
def test_a_record_with_a_bad_field_is_skipped_with_one_line_and_the_rest_shown(tmp_path, capsys, bad, field):
    results = tmp_path / "results"
    (results / "records").mkdir(parents=True)
    broken = {**GOOD, "workers": 4, **bad}
    if bad.get("model", "") is None:
        del broken["model"]
    (results / "records" / "1-good.json").write_text(json.dumps(GOOD))
    (results / "records" / "2-bad.json").write_text(json.dumps(broken))
    (results / "runs.jsonl").write_text(json.dumps(rec("mg-wfbp", 2, [8.0])) + "\n" + json.dumps(broken) + "\n")
    loaded = load([results])
    assert loaded.records == [rec("mg-wfbp", 2, [8.0]), GOOD]
    assert len(loaded.problems) == 2
    assert loaded.problems[0].startswith(f"{results / 'runs.jsonl'}:2: ") and field in loaded.problems[0]
    assert loaded.problems[1].startswith(f"{results / 'records' / '2-bad.json'}: ") and field in loaded.problems[1]
    assert all("accepted:" in p for p in loaded.problems)
    assert summary.main([str(results)]) == 0
    out, err = capsys.readouterr()
    assert "11.00 ± 1.41" in out and "8.00" in out  # the good records still show
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    # an export copies every record it can parse: a bad field is the reader's to skip, not lost
    exported = tmp_path / "all.jsonl"
    assert summary.main([str(results), "--export", str(exported)]) == 0
    assert len(exported.read_text().splitlines()) == 4


def test_failed_runs_and_commbench_rows_are_not_held_to_the_tables_fields(tmp_path):
    rows = [{"status": "failed", "method": "bsp-a2a", "workers": 2, "error": "boom"},
            {"mode": "sizes", "collective": "all_reduce", "workers": 2, "bytes": 4, "time_us": 1.0}]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load([path])
    assert loaded.records == rows and loaded.problems == []


def test_a_bad_prediction_is_skipped_too(tmp_path):
    good = {"kind": "predicted", "method": "bsp-a2a", "model": "m", "workers": 4, "local_batch": 4,
            "network": "100gbib", "samples_per_sec": 5.0}
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "samples_per_sec": "fast"}) + "\n")
    loaded = load([path])
    assert loaded.predicted == [good]
    assert len(loaded.problems) == 1 and "samples_per_sec" in loaded.problems[0]


@pytest.mark.parametrize("where", ["a directory", "no parent"])
def test_an_export_path_that_cannot_be_written_is_one_line_and_nothing_is_written(tmp_path, capsys, where):
    results = tmp_path / "results"
    (results / "records").mkdir(parents=True)
    (results / "records" / "1.json").write_text(json.dumps(GOOD))
    target = tmp_path / "outdir" if where == "a directory" else tmp_path / "nodir" / "x.jsonl"
    if where == "a directory":
        target.mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert summary.main([str(results), "--export", str(target)]) == 2
    one_line_error(capsys.readouterr().err, str(target))
    assert sorted(tmp_path.rglob("*")) == before


def test_a_run_that_lost_its_cores_to_other_guests_says_so_as_it_ends(capsys, tmp_path):
    """metrics.disturbed_repeats: the repeats (one steal figure per timed block) that lost
    DISTURBED_STEAL_SHARE of the machine's cores or more. A run with any is reported with a
    warning on stderr naming them, beside its ok line, though its mean stays below the share
    (steal comes in bursts); one with none, or whose record has no steal, only the ok line."""
    from ddlbench import metrics
    from ddlbench.launch import _say

    assert metrics.disturbed_repeats([0.1, 0.3], 2, 2) == [(1, pytest.approx(0.15))]
    assert metrics.disturbed_repeats([0.3], 2, 2) == [] and metrics.disturbed_repeats([0.3], None, 1) == []
    assert metrics.undisturbed([10.0, 8.0, 11.0], [0.0, 0.4, 0.1], 2) == [10.0, 11.0]
    assert metrics.undisturbed([10.0, 8.0], None, 2) == [10.0, 8.0]
    assert metrics.undisturbed([10.0, 8.0], [0.3, 0.4], 2) == []
    ok = {"status": "ok", "method": "bsp-a2a", "model": "tiny-resnet", "workers": 2, "samples_per_sec": 208.0,
          "samples_per_sec_std": 20.0, "host_cores": 2}
    _say({**ok, "host_steal_cores": [0.17, 0.22, 0.26, 0.26, 0.27]}, tmp_path)
    out, err = capsys.readouterr()
    assert "[ddlbench] ok: bsp-a2a tiny-resnet x2: 208.00" in out
    assert err.startswith("[ddlbench] warning: bsp-a2a tiny-resnet x2: its machine lost 11%, 13%, 13%, 14% of its "
                          "cores to other guests of the hypervisor while repeat(s) 2, 3, 4, 5 of 5 were timed") \
        and "run it again on a quieter machine" in err
    _say({**ok, "host_steal_cores": [0.0, 0.0, 0.0, 0.0, 0.3]}, tmp_path)  # a mean of 3%, one repeat 15%
    assert "lost 15% of its cores to other guests of the hypervisor while repeat(s) 5 of 5" in capsys.readouterr().err
    for quiet in ({**ok, "host_steal_cores": [0.01, 0.1]}, ok):
        _say(quiet, tmp_path)
        assert capsys.readouterr().err == ""
