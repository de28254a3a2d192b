"""Predictions are labelled, never read as measurements, and never calibrated on multi-worker rows."""
import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ddlbench.analysis import summary, tables
from ddlbench.analysis.records import load
from ddlbench.predict import cli, network, profile, simulate


def _measured(method="bsp-a2a", workers=2, sps=10.0):
    return {"status": "ok", "method": method, "model": "tiny-resnet", "workers": workers, "local_batch": 8,
            "device": "cpu", "backend": "gloo", "engine": "torch", "samples_per_sec": sps,
            "samples_per_sec_per_repeat": [sps]}


LAUNCH_S = 1e-4  # the runtime's launch beyond commbench's, per message, in these tests (see below)


@pytest.fixture(autouse=True)
def fixed_launch(request, monkeypatch):
    """The validation measures the runtime's launch cost per bench (profile.measure_launch, a
    process of its own for some seconds): here a fixed one, but for the tests marked
    `real_launch`, which measure it."""
    if "real_launch" not in request.keywords:
        monkeypatch.setattr(profile, "measure_launch", lambda *a, **k: (LAUNCH_S, "fixed by the test"))


def _validation():
    """benchmarks/predict_validation.py as a module (it is a script, not a package module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("predict_validation", Path(__file__).parents[2] / "benchmarks"
                                                  / "predict_validation.py")
    validation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(validation)
    return validation


def test_predicted_records_never_reach_the_measured_tables(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "a.json").write_text(json.dumps(_measured()))
    predicted = {**_measured(method="mg-wfbp", sps=12345.678), "kind": "predicted", "network": "100gbib"}
    (tmp_path / "predictions.jsonl").write_text(json.dumps(predicted) + "\n")
    loaded = load([tmp_path])
    assert [r["method"] for r in loaded.records] == ["bsp-a2a"]
    assert [r["method"] for r in loaded.predicted] == ["mg-wfbp"]
    assert "mg-wfbp" not in summary.render(loaded.records) and "12345" not in summary.render(loaded.records)
    # even handed the raw list, the tables drop them
    cells = tables.ours(loaded.records + loaded.predicted)
    assert all(m != "mg-wfbp" for c in cells.values() for m, _ in c)


def test_the_report_keeps_predictions_out_of_its_measured_tables(tmp_path):
    from ddlbench.analysis import report

    predicted = {**_measured(method="mg-wfbp", sps=12345.678), "kind": "predicted", "network": "100gbib"}
    (tmp_path / "predictions.jsonl").write_text(json.dumps(predicted) + "\n")
    index = report.build(tmp_path, tmp_path / "report", whatif_models=())
    results_csv = (tmp_path / "report" / "results.csv").read_text()
    assert "12345" not in results_csv and "tiny-resnet" not in results_csv
    assert "PREDICTED" in index.read_text()


def test_calibration_reads_only_one_worker_rows(tmp_path):
    src = profile.REFERENCE_CSV
    poisoned = tmp_path / "poisoned.csv"
    with open(src, newline="") as f, open(poisoned, "w", newline="") as g:
        rows = list(csv.DictReader(f))
        w = csv.DictWriter(g, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            if r["workers"] != "1":
                r = {**r, "samples_per_sec": "not a number: multi-worker rows are validation only"}
            w.writerow(r)
    for model, batch in (("resnet50", 64), ("bert-base", 64), ("bert-large", 8)):
        assert profile.one_worker_samples_per_sec(model, batch, poisoned) == \
            profile.one_worker_samples_per_sec(model, batch)
    assert all(r["workers"] == "1" for r in profile.one_worker_rows(poisoned))


def test_the_predictor_never_imports_the_published_table_loader():
    src = Path(profile.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        assert "analysis.reference" not in text and "from ddlbench.analysis import reference" not in text, f


def test_unknown_model_batch_names_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: .*resnet50 at 64"):
        profile.one_worker_samples_per_sec("resnet50", 32)


def test_make_predict_contract(tmp_path, monkeypatch, capsys):
    """MODEL, WORKERS (comma list), NETWORK, RESULTS -> one JSON line per (method, workers)."""
    assert cli.main(["--model", "resnet50", "--workers", "4,8", "--network", "100gbib",
                     "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED" in out and "*" in out
    lines = [json.loads(x) for x in (tmp_path / cli.DEFAULT_FILE).read_text().splitlines()]
    assert len(lines) == 8 * 2
    for rec in lines:
        assert rec["kind"] == "predicted" and rec["model"] == "resnet50" and rec["network"] == "100gbib"
        assert rec["local_batch"] == 64 and rec["workers"] in (4, 8) and rec["samples_per_sec"] > 0
    assert {r["method"] for r in lines} == {"bsp-ps", "bsp-a2a", "wfbp-ps", "wfbp-a2a", "mg-wfbp",
                                             "bytescheduler-ps", "bytescheduler-a2a", "ddp"}
    # the study's stack times all-reduces as its NCCL 2.4.8 chose them; the record says so
    assert {r["algorithm"] for r in lines} == {"nccl-2.4"}
    assert cli.main(["--workers", "4", "--stack", "ddlbench", "--results", str(tmp_path / "d")]) == 0
    assert {json.loads(x)["algorithm"] for x in (tmp_path / "d" / cli.DEFAULT_FILE).read_text().splitlines()} == {"nccl"}


def test_a_prediction_that_leaves_out_a_known_cost_says_it_is_an_upper_bound(tmp_path, capsys):
    """The study's ByteScheduler-A2A pays its plugin's Python machinery, which the model leaves
    out: its table cell, a footnote and its record say it is an upper bound. Every other method,
    and ByteScheduler-A2A on this runtime (its machinery calibrated), is an estimate."""
    from ddlbench.analysis.predicted import table

    assert cli.main(["--model", "resnet50", "--workers", "4", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| bytescheduler-a2a"))
    assert " ^ " in row and "\n^ bytescheduler-a2a: an upper bound, not an estimate (so never the pick over one):" in out
    assert sum(" ^ " in line for line in out.splitlines() if line.startswith("| ")) == 1
    recs = {r["method"]: r for r in map(json.loads, (tmp_path / cli.DEFAULT_FILE).read_text().splitlines())}
    # the highest number on BERT-Large at 4 GPUs, but a bound: never starred as the pick
    assert cli.main(["--model", "bert-large", "--workers", "4", "--no-record"]) == 0
    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and "---" not in line and "method" not in line}
    assert max(rows, key=lambda m: float(rows[m].split()[0])) == "bytescheduler-a2a"
    assert "*" not in rows["bytescheduler-a2a"] and "*" in rows["mg-wfbp"]
    assert "ByteScheduler plugin" in recs["bytescheduler-a2a"]["upper_bound"]
    assert all("upper_bound" not in r for m, r in recs.items() if m != "bytescheduler-a2a")
    _, rows = table(list(recs.values()))
    assert [r[3] for r in rows if "(upper bound)" in r[5]] == ["bytescheduler-a2a"]
    assert cli.main(["--model", "resnet50", "--workers", "4", "--stack", "ddlbench", "--results", str(tmp_path / "d")]) == 0
    assert "upper bound" not in capsys.readouterr().out
    assert all("upper_bound" not in json.loads(x) for x in (tmp_path / "d" / cli.DEFAULT_FILE).read_text().splitlines())


def test_make_predict_models_per_gpu_ps_on_this_runtime(tmp_path, capsys):
    """PS_TOPOLOGY=per-gpu STACK=ddlbench: every worker pushes (4 a node on 100gbib), so PS
    methods carry 4x a machine's bytes and are predicted slower; the records say which ran;
    all-reduce methods are untouched and carry no topology."""
    def run(*extra):
        d = tmp_path / "-".join(extra or ("default",))
        assert cli.main(["--model", "resnet50", "--workers", "8", "--stack", "ddlbench", "--results", str(d),
                         *extra]) == 0
        return {r["method"]: r for r in map(json.loads, (d / cli.DEFAULT_FILE).read_text().splitlines())}
    machine, gpu = run(), run("--ps-topology", "per-gpu")
    assert machine["bsp-ps"]["ps_topology"] == "per-machine" and gpu["bsp-ps"]["ps_topology"] == "per-gpu"
    assert gpu["bsp-ps"]["samples_per_sec"] < machine["bsp-ps"]["samples_per_sec"]
    assert "ps_topology" not in gpu["bsp-a2a"] and gpu["bsp-a2a"]["samples_per_sec"] == machine["bsp-a2a"]["samples_per_sec"]
    capsys.readouterr()
    assert cli.main(["--ps-topology", "per-gpu", "--results", str(tmp_path)]) == 2  # the study's BytePS: per machine
    assert "accepted: per-machine, or per-gpu with stack ddlbench" in capsys.readouterr().err


def test_bad_inputs_are_one_line(tmp_path, capsys):
    assert cli.main(["--network", "nonesuch", "--results", str(tmp_path)]) == 2
    assert "accepted:" in capsys.readouterr().err
    assert cli.main(["--workers", "0", "--results", str(tmp_path)]) == 2
    assert cli.main(["--methods", "bogus", "--results", str(tmp_path)]) == 2
    assert cli.main(["--bytescheduler-unit-ms", "-1", "--results", str(tmp_path)]) == 2
    assert cli.main(["--bytescheduler-unit-ms", "0.5", "--results", str(tmp_path)]) == 2  # the study's stack
    capsys.readouterr()
    assert cli.main(["--one-worker", "-5", "--results", str(tmp_path)]) == 2
    assert "one-worker throughput -5.0 samples/s is invalid; accepted: a finite number > 0" in capsys.readouterr().err
    assert cli.main(["--one-worker", "nan", "--results", str(tmp_path)]) == 2
    assert "one-worker throughput nan samples/s is invalid" in capsys.readouterr().err
    # a model without a published one-worker row: the error names the flag and make's variable
    assert cli.main(["--model", "tiny-resnet", "--results", str(tmp_path)]) == 2
    assert "--one-worker; ONE_WORKER=<samples/s> with make" in capsys.readouterr().err


def test_validation_reports_how_far_apart_two_benches_measured_the_same_runs(tmp_path):
    """benchmarks/predict_validation.py --again: per method, |a - b| / b over the multi-worker
    runs of one configuration measured in both result directories; others are left out."""
    from ddlbench import record

    validation = _validation()
    for d, sps in (("a", {("wfbp-ps", 2): 120.0, ("wfbp-ps", 4): 90.0, ("ddp", 2): 50.0, ("ddp", 1): 9.0}),
                   ("b", {("wfbp-ps", 2): 100.0, ("wfbp-ps", 4): 100.0, ("ddp", 4): 10.0, ("ddp", 1): 10.0})):
        for (method, workers), x in sps.items():
            record.write(tmp_path / d, {**_measured(method, workers, x), "local_batch": 4, "device": "cpu",
                                        "backend": "gloo", "engine": "torch"})
    apart = validation.spread(str(tmp_path / "b"), str(tmp_path / "a"))
    assert dict(apart) == {"wfbp-ps": pytest.approx([0.2, 0.1])}  # ddp: no run in both (1 worker left out)


def test_validation_pools_several_benches_and_reports_each(monkeypatch, capsys):
    """benchmarks/predict_validation.py --results A B: each bench is validated on its own
    (`local`), the per-method medians are over every bench's runs, the ratios to BSP-A2A's stay
    within a bench, and a table gives each bench's median per method and how many are within 10%."""
    validation = _validation()
    # (method, workers, predicted, measured) per bench; the same network name in both
    benches = {"a": [("bsp-a2a", 2, 100.0, 100.0), ("ddp", 2, 130.0, 100.0), ("ddp", 4, 100.0, 100.0)],
               "b": [("bsp-a2a", 2, 50.0, 100.0), ("ddp", 2, 104.0, 100.0), ("ddp", 4, 102.0, 100.0)]}

    def local(results, network):
        shared = {}
        for m, _, p, x in benches[results]:
            shared.setdefault(m, []).append((p, x))
        runs = [(m, "n", w, p, x, "", "lock-step") for m, w, p, x in benches[results]]
        repeats = {(m, "n", w): (0.9 * x, 1.1 * x) for m, w, _, x in benches[results]}
        return shared, shared, runs, {}, {"profile": shared, "spread": shared, "unscaled": shared, "disturbed": [],
                                          "repeats": repeats}
    monkeypatch.setattr(validation, "local", local)
    monkeypatch.setattr(validation, "machinery_table", lambda results: None)
    pool = validation.pooled(["a", "b"], None)
    # ddp over both benches: 30%, 0%, 4%, 2% -> median 3%; alone, bench a's median is 15%
    assert simulate.mape(pool["shared"]["ddp"]) == pytest.approx(0.03)
    assert simulate.mape(pool["per_bench"]["a"]["shared"]["ddp"]) == pytest.approx(0.15)
    # over BSP-A2A's at 2 workers, bench by bench: a 1.3 against 1.0; b 2.08 against 1.0
    assert pool["relative"]["ddp"] == [pytest.approx(0.3), pytest.approx(1.08)]
    table = validation.per_bench_table(pool["per_bench"]).splitlines()
    assert [c.strip() for c in table[0].split("|")[1:4]] == ["method", "a", "b"]
    assert [c.strip() for c in table[-1].split("|")[1:4]] == ["within 10%", "1 of 2", "1 of 2"]
    assert validation.main(["--results", "a", "b", "--runs-only"]) == 0
    out = capsys.readouterr().out
    assert "2 benches pooled" in out and "| b     | ddp " in out and "within 10%" in out
    assert "2 of 3 runs in under a; 2 of 3 runs in under b)" in out  # a's ddp x2 and b's bsp-a2a outside


def test_validation_judges_each_run_against_bsp_a2as_at_the_same_workers_too():
    """benchmarks/predict_validation.py: the ratio of a run's samples/s to BSP-A2A's at the same
    network and worker count, predicted against measured (by hand), means over repeated runs."""
    validation = _validation()
    runs = [("bsp-a2a", "n", 2, 200.0, 300.0, ""), ("wfbp-a2a", "n", 2, 130.0, 180.0, ""),
            ("bsp-a2a", "n", 4, 100.0, 100.0, ""), ("bsp-a2a", "n", 4, 300.0, 300.0, ""),  # means: 200, 200
            ("ddp", "n", 4, 150.0, 100.0, ""), ("ddp", "m", 4, 1.0, 2.0, "")]  # network m: no BSP-A2A run
    rel = validation.relative(runs)
    # wfbp-a2a: 0.65 predicted against 0.6 measured; ddp: 0.75 against 0.5
    assert dict(rel) == {"wfbp-a2a": [pytest.approx(0.05 / 0.6)], "ddp": [pytest.approx(0.5)]}


def test_validation_pools_one_worker_runs_and_calibrates_bytescheduler_from_its_own(tmp_path, monkeypatch):
    """The setup's one-worker throughput is the median over every repeat of the one-worker runs
    of methods that only compute at one worker, on any network; ByteScheduler's machinery comes
    from that method's own one-worker runs (never from a multi-worker one)."""
    from ddlbench import record

    validation = _validation()
    from ddlbench.config import compute_only_at_one_worker

    assert [compute_only_at_one_worker(m) for m in ("bsp-a2a", "ddp", "mg-wfbp", "horovod")] == [True] * 4
    assert not any(compute_only_at_one_worker(m) for m in ("bytescheduler-a2a", "wfbp-ps", "bsp-ps", "nope"))
    runs = [{"samples_per_sec": 9.0, "samples_per_sec_per_repeat": [6.0, 12.0]}, {"samples_per_sec": 30.0}]
    assert validation.one_worker_samples_per_sec(runs) == 12.0  # median of 6, 12, 30, not a mean

    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)  # no real profiling here
    beside = {}  # ByteScheduler's machinery beside the run's other workers, as measured
    monkeypatch.setattr(profile, "machinery_s", lambda *a, sharers, **k: {"machinery_s": beside.get(sharers, 0.0)})

    def write(method, workers, reps):
        record.write(tmp_path, {**_measured(method, workers, sum(reps) / len(reps)),
                                "samples_per_sec_per_repeat": reps, "env": {"OMP_NUM_THREADS": "1"}})

    def predicted(**opts):
        return cli.predict("tiny-resnet", [2], "loopback", ("bytescheduler-a2a",), 8, 100.0,
                           replace(cli.study_opts("local", "ddlbench", backend="gloo"), **opts),
                           explain=False)[0][("bytescheduler-a2a", 2)].samples_per_sec
    write("bsp-a2a", 1, [90.0, 100.0, 400.0])  # one disturbed repeat would move a mean to 197
    write("bytescheduler-a2a", 2, [100.0])
    base = validation.local(str(tmp_path), "loopback")
    assert base[2][0][3] == pytest.approx(predicted())
    assert base[3] == {}  # no one-worker run of ByteScheduler: its machinery alone is not modelled
    write("bytescheduler-a2a", 1, [40.0])  # the machinery more than halves one worker's throughput
    shared, alone, runs, units, _ = validation.local(str(tmp_path), "loopback")
    unit_s = units[("tiny-resnet", 8, "bytescheduler-a2a", "loopback")]
    one = simulate.simulate("bytescheduler-a2a", fixed, network.load("loopback"), 1,
                            simulate.Options(stack="ddlbench", bytescheduler_unit_s=unit_s)).period_s
    assert unit_s > 0 and one == pytest.approx(8 / 40.0, rel=1e-6)  # calibrated: the model's one worker is the run's
    # the two-worker prediction pays it, alone and sharing the machine (the profiles beside and
    # alone are the same here: no rescaling)
    assert alone["bytescheduler-a2a"][0][0] < base[1]["bytescheduler-a2a"][0][0]
    assert runs[0][3] == pytest.approx(predicted(bytescheduler_unit_s=unit_s)) and runs[0][3] < base[2][0][3]
    # sharing it, the workers pay the cores' time measured beside them too (nothing so far)
    beside[2] = 0.01
    assert validation.local(str(tmp_path), "loopback")[2][0][3] == \
        pytest.approx(predicted(bytescheduler_unit_s=unit_s, bytescheduler_cpu_s=0.01))
    assert predicted(bytescheduler_unit_s=unit_s, bytescheduler_cpu_s=0.01) < runs[0][3]


def test_validation_takes_one_workers_compute_from_the_runs_own_probe_where_it_has_one(tmp_path, monkeypatch):
    """A run with a compute probe (driver: profile.compute_probe_iters) is predicted with the
    compute the probe timed beside the other workers, and the spread of its steps, or where it
    also ran lock-step steps, their slowest worker's step and no spread; the bench-end profile's
    prediction is kept beside it; a run without one is predicted from the profile."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)  # alone and beside alike: no rescaling
    # the fused message's pack and unpack on the CPU: 20 us a tensor, 1 GB/s, one worker alone;
    # twice that for 4 workers on the 2 cores
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    steps = [0.1, 0.1, 0.1, 0.3]  # the probe: one worker's step at 8 / 0.15 samples/s, one slow step in four
    base = {"local_batch": 8, "device": "cpu", "backend": "gloo", "engine": "torch", "env": {"OMP_NUM_THREADS": "1"},
            "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**_measured("bsp-a2a", 2, 100.0), **base, "compute_probe_s": [0.14, 0.16],
                            "compute_probe_iter_s": steps})
    record.write(tmp_path, {**_measured("bsp-a2a", 4, 100.0), **base})  # no probe: from the profile
    # lock-step steps: each the slowest worker's, which the iteration waits for
    record.write(tmp_path, {**_measured("wfbp-a2a", 2, 100.0), **base, "compute_probe_s": [0.14, 0.16],
                            "compute_probe_iter_s": steps, "compute_probe_lockstep_s": [0.2, 0.22]})
    # and where it kept the slowest worker's own step beside the whole step (the last worker began
    # 0.05 s after the first): that step, begun 0.05 s late
    record.write(tmp_path, {**_measured("wfbp-a2a", 4, 100.0), **base, "compute_probe_s": [0.14, 0.16],
                            "compute_probe_iter_s": steps, "compute_probe_lockstep_s": [0.2, 0.22],
                            "compute_probe_lockstep_own_s": [0.14, 0.18],
                            # and its steps after the workers idled 10 and 50 ms: whole, 10 and 50 ms
                            # longer than the whole lock-step step (0.21 s), on the mean over the
                            # repeats (the own steps' 30 and 70 ms more are not what ends its compute)
                            "compute_probe_idle_s": [0.01, 0.05],
                            "compute_probe_after_idle_s": [[0.21, 0.25], [0.23, 0.27]],
                            "compute_probe_after_idle_own_s": [[0.18, 0.22], [0.2, 0.24]]})

    def predicted(workers, one, spread, copies=True, method="bsp-a2a", late=0.0, idle=()):
        prof = replace(cli.load_profile("tiny-resnet", 8, one), iteration_s=spread)
        if copies:
            share = max(1, workers / 2)
            prof = prof.with_copy(2e-5 * share, 1e9 / share, "fixed")
        prof = prof.started_late(late).with_after_idle(idle)
        opts = cli.study_opts("local", "ddlbench", backend="gloo")
        return cli.predict("tiny-resnet", [workers], "loopback", (method,), 8, one, opts, explain=False,
                           prof=prof)[0][(method, workers)].samples_per_sec
    shared, alone, runs, _, others = validation.local(str(tmp_path), "loopback")
    by_workers = {w: (p, source) for method, _, w, p, _, _, source in runs if method == "bsp-a2a"}
    lockstep = {w: (p, source) for method, _, w, p, _, _, source in runs if method == "wfbp-a2a"}
    assert lockstep == {2: (pytest.approx(predicted(2, 8 / 0.21, [], method="wfbp-a2a")), "lock-step"),
                        4: (pytest.approx(predicted(4, 8 / 0.16, [], method="wfbp-a2a", late=0.05,
                                                    idle=[(0.01, 0.01), (0.05, 0.05)])), "lock-step")}
    probed = next(r for r in load([str(tmp_path)]).records if r.get("compute_probe_idle_s"))
    assert validation.probe_after_idle(probed) == [(0.01, pytest.approx(0.01)), (0.05, pytest.approx(0.05))]
    # a record with the own steps alone (be33) takes them against the own lock-step step; none
    # below 0; none without the probe's idle steps
    own_only = {k: v for k, v in probed.items() if k != "compute_probe_after_idle_s"}
    assert validation.probe_after_idle(own_only) == [(0.01, pytest.approx(0.03)), (0.05, pytest.approx(0.07))]
    assert validation.probe_after_idle({**probed, "compute_probe_after_idle_s": [[0.1, 0.3]]}) == [
        (0.01, 0.0), (0.05, pytest.approx(0.09))]
    assert validation.probe_after_idle({k: v for k, v in probed.items() if k != "compute_probe_idle_s"}) == []
    # slower after the workers idled for their communication
    assert lockstep[4][0] < predicted(4, 8 / 0.16, [], method="wfbp-a2a", late=0.05)
    # begun late, its gradients appear later than in a step as long as the whole one
    assert lockstep[4][0] < predicted(4, 8 / 0.21, [], method="wfbp-a2a")
    # beside it, the free-running steps' mean and spread, as a probe without lock-step steps gives
    assert [p for p, _ in others["spread"]["wfbp-a2a"]] == [pytest.approx(predicted(w, 8 / 0.15, steps,
                                                                                      method="wfbp-a2a"))
                                                              for w in (2, 4)]
    # (the free-running steps' spread would wait 0.1875 s a step: E[max of 2 draws])
    assert lockstep[2][0] < predicted(2, 8 / 0.15, steps, method="wfbp-a2a")
    assert by_workers[2] == (pytest.approx(predicted(2, 8 / 0.15, steps)), "probe")
    assert by_workers[4] == (pytest.approx(predicted(4, 100.0, fixed.iteration_s)), "profile")
    assert by_workers[2][0] < predicted(2, 100.0, fixed.iteration_s)  # the probe's slower compute
    assert by_workers[2][0] < predicted(2, 8 / 0.15, steps, copies=False)  # and the CPU's copies
    assert sorted(p for p, _ in others["profile"]["bsp-a2a"]) == pytest.approx(sorted(
        [predicted(2, 100.0, fixed.iteration_s), predicted(4, 100.0, fixed.iteration_s)]))
    assert sorted(p for p, _ in shared["bsp-a2a"]) == pytest.approx(sorted(p for m, _, _, p, *_ in runs
                                                                          if m == "bsp-a2a"))
    assert validation.probe_compute_s({"compute_probe_s": [], "compute_probe_iter_s": []}) is None


def test_validation_scales_a_local_runs_network_by_its_comm_probe_against_the_benchs_burst(tmp_path, monkeypatch):
    """A local run with a communication probe (driver: profile.comm_probe_rounds) is predicted on
    the bench's own network with every message as much longer as its probe's median round took
    against the burst make commbench kept in that network (`data_lanes`: the burst beside a paced
    round, else the round itself); the network as measured is kept beside it; a run without a
    probe, on the emulated cluster (a tc rate), or beside servers (commbench's burst had none) is
    not scaled."""
    import yaml

    from ddlbench import record

    validation = _validation()
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    spec = yaml.safe_load((network.conf_dir() / "loopback.yaml").read_text())
    spec["name"] = "local-x"
    # 2 ranks: a paced round (0.012 s) with the burst beside it (0.01 s); 4 ranks: the burst alone
    spec["data_lanes"] = {2: {"tiny-resnet": {"tensors": 29, "measured_s": 0.012, "pace_s": 0.0004,
                                              "burst_measured_s": 0.01}},
                          4: {"tiny-resnet": {"tensors": 29, "measured_s": 0.05}}}
    (profiles / "local-x.yaml").write_text(yaml.safe_dump(spec))
    assert network.commbench_burst_s("local-x", 2, "tiny-resnet", profiles) == 0.01
    assert network.commbench_burst_s("local-x", 4, "tiny-resnet", profiles) == 0.05
    assert network.commbench_burst_s("local-x", 3, "tiny-resnet", profiles) is None
    assert network.commbench_burst_s("local-x", 2, "bert-base", profiles) is None
    assert network.commbench_burst_s("local-y", 2, "tiny-resnet", profiles) is None

    here = ("local-x", profiles)
    probed = {**_measured("wfbp-a2a", 2), "comm_probe_s": [0.02, 0.035, 0.019]}  # median 0.02: twice the burst
    assert validation.comm_scale(probed, "local-x", here) == pytest.approx(2.0)
    assert validation.comm_scale({**probed, "workers": 4}, "local-x", here) == pytest.approx(0.02 / 0.05)
    assert validation.comm_scale({**probed, "workers": 3}, "local-x", here) is None  # no burst at 3
    assert validation.comm_scale(_measured("wfbp-a2a", 2), "local-x", here) is None  # no probe
    assert validation.comm_scale(probed, "local-x", None) is None  # no network of the bench's own
    emulated = {**probed, "network": {"emulated": True, "link": "1gbit"}}
    assert validation.comm_scale(emulated, "local-x", here) is None  # a tc rate does not drift
    assert validation.comm_scale({**probed, "hosts": ["a", "b"]}, "local-x", here) is None
    assert validation.comm_scale({**probed, "servers": 1}, "local-x", here) is None  # beside a PS server

    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)  # no real profiling here
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    base = {"env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**probed, **base, "samples_per_sec": 50.0})
    record.write(tmp_path, {**_measured("wfbp-a2a", 4, 40.0), **base})  # no probe
    shared, _, runs, _, others = validation.local(str(tmp_path), None)  # the bench's own network: local-x
    rows = {w: (net, p) for m, net, w, p, *_ in runs}
    assert rows[2][0] == "local-x (bench's, x2.00 by the run's comm probe)" and rows[4][0] == "local-x (bench's)"
    unscaled = {x: p for p, x in others["unscaled"]["wfbp-a2a"]}  # by measured samples/s
    # messages twice as long: the 2-worker run predicted slower than on the network as measured
    assert rows[2][1] < unscaled[50.0]
    # the run without a probe: the same either way
    assert rows[4][1] == unscaled[40.0]
    # and as much slower as twice the network's alpha and beta make it
    twice = dict(spec, inter={"allreduce": {k: v * 2 if k in ("alpha_s", "beta_s_per_byte") else v
                                            for k, v in spec["inter"]["allreduce"].items()}},
                 data_lanes={2: {"tiny-resnet": {"tensors": 29, "measured_s": 0.02}}})
    (profiles / "local-x.yaml").write_text(yaml.safe_dump(twice))
    again = validation.local(str(tmp_path), None)[2]
    assert {w: p for m, _, w, p, *_ in again}[2] == pytest.approx(rows[2][1], rel=1e-9)  # probe = burst now
    assert sorted(p for p, _ in shared["wfbp-a2a"]) == sorted(p for m, _, _, p, *_ in runs if m == "wfbp-a2a")


def test_validation_scales_a_local_ps_run_by_its_ps_probe_against_the_benchs_node_burst(tmp_path, monkeypatch):
    """A local per-machine PS run with a PS probe (driver._PSProbe: commbench's node burst through
    the run's own servers) is predicted on the bench's own network with every message as much
    longer as its probe's median round per key took against commbench's node burst per key at
    the same key size and node (`data_node_ps`); not by its all-reduce probe, and not where the
    run's node is not all its workers, its topology is per-gpu, or the bench kept no such burst."""
    import yaml

    from ddlbench import record

    validation = _validation()
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    spec = yaml.safe_load((network.conf_dir() / "loopback.yaml").read_text())
    spec["name"] = "local-x"
    spec["data_node_ps"] = {2: {"bytes": [256, 65536], "time_s": [0.001, 0.002]},
                            4: {"bytes": [256, 65536], "time_s": [0.002, 0.004]}}
    (profiles / "local-x.yaml").write_text(yaml.safe_dump(spec))
    assert network.commbench_node_key_s("local-x", 2, 256, profiles) == 0.001
    assert network.commbench_node_key_s("local-x", 4, 65536, profiles) == 0.004
    assert network.commbench_node_key_s("local-x", 4, 1024, profiles) is None  # no such key size
    assert network.commbench_node_key_s("local-x", 3, 256, profiles) is None
    assert network.commbench_node_key_s("local-y", 2, 256, profiles) is None

    here = ("local-x", profiles)
    ps = {**_measured("wfbp-ps", 2), "servers": 1, "ps_topology": "per-machine", "hosts": ["h"],
          "ps_probe_s": [0.064, 0.1, 0.05], "ps_probe_keys": 32, "ps_probe_key_bytes": 256,
          "comm_probe_s": [1.0]}  # median 0.064 over 32 keys: 2 ms a key, twice the node burst's
    assert validation.ps_scale(ps, "local-x", here) == pytest.approx(2.0)
    assert validation.ps_scale({**ps, "workers": 4}, "local-x", here) == pytest.approx(1.0)
    assert validation.comm_scale(ps, "local-x", here) is None  # the all-reduce probe: not for PS
    assert validation.ps_scale({**ps, "workers": 3}, "local-x", here) is None  # no node burst at 3
    assert validation.ps_scale({**ps, "ps_probe_key_bytes": 1024}, "local-x", here) is None
    assert validation.ps_scale({**ps, "ps_topology": "per-gpu"}, "local-x", here) is None
    assert validation.ps_scale({**ps, "workers": 4, "workers_per_node": 2}, "local-x", here) is None
    assert validation.ps_scale({**ps, "hosts": ["a", "b"]}, "local-x", here) is None
    assert validation.ps_scale({**ps, "network": {"emulated": True, "link": "1gbit"}}, "local-x", here) is None
    assert validation.ps_scale({k: v for k, v in ps.items() if k != "ps_probe_s"}, "local-x", here) is None
    assert validation.ps_scale(ps, "local-x", None) is None
    assert validation.ps_scale({**_measured("wfbp-a2a", 2), "ps_probe_s": [0.064], "ps_probe_keys": 32,
                                "ps_probe_key_bytes": 256}, "local-x", here) is None  # no servers

    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)  # no real profiling here
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    base = {"env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**ps, **base, "samples_per_sec": 50.0, "samples_per_sec_per_repeat": [50.0]})
    shared, _, runs, _, others = validation.local(str(tmp_path), None)  # the bench's own network: local-x
    ((_, net, _, predicted, *_),) = [r for r in runs if r[0] == "wfbp-ps"]
    assert net == "local-x (bench's, x2.00 by the run's PS probe)"
    (unscaled,) = [p for p, _ in others["unscaled"]["wfbp-ps"]]
    assert predicted < unscaled  # its messages twice as long as the bench measured them


def test_validation_leaves_out_repeats_whose_machine_lost_its_cores_to_other_guests(tmp_path, monkeypatch, capsys):
    """A repeat whose timed block lost DISTURBED_STEAL_SHARE of the machine's cores or more to the
    hypervisor's other guests (driver: host_steal_cores, one per repeat) is left out of the run's
    measured samples/s, though the run's mean share stays below it, and listed; a run with none
    left is left out of the medians; a record that says nothing of it is predicted whole."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)  # no real profiling here
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    base = {"env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    two = {**_measured("bsp-a2a", 2, 25.0), **base, "samples_per_sec_per_repeat": [30.0, 20.0, 25.0]}
    assert validation.run_measured({**two, "host_steal_cores": [0.0, 0.3, 0.02]}) == (27.5, [(1, pytest.approx(0.15))])
    assert validation.run_measured({**two, "host_steal_cores": [0.3, 0.3, 0.3]})[0] is None
    assert validation.run_measured(two) == (25.0, [])  # none recorded
    # the setup's one-worker throughput, every prediction's compute: a stolen repeat left out
    one = {**_measured("bsp-a2a", 1, 100.0), **base, "samples_per_sec_per_repeat": [100.0, 60.0, 104.0],
           "host_steal_cores": [0.0, 0.5, 0.02]}
    assert validation.one_worker_samples_per_sec([one]) == pytest.approx(102.0)
    assert validation.one_worker_samples_per_sec([{**one, "host_steal_cores": [0.5, 0.5, 0.5]}]) == 100.0  # all
    assert validation.one_worker_samples_per_sec([{**one, "host_steal_cores": None}]) == 100.0  # none recorded
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**_measured("wfbp-a2a", 2, 50.0), **base, "samples_per_sec_per_repeat": [50.0, 50.0],
                            "host_steal_cores": [0.3, 0.25]})
    record.write(tmp_path, {**_measured("wfbp-a2a", 4, 40.0), **base, "samples_per_sec_per_repeat": [40.0, 40.0],
                            "host_steal_cores": [0.02, 0.1]})
    record.write(tmp_path, {**_measured("ddp", 4, 24.0), **base, "samples_per_sec_per_repeat": [30.0, 12.0, 30.0],
                            "host_steal_cores": [0.0, 0.3, 0.02]})  # a mean of 5%, one repeat 15%
    record.write(tmp_path, {**_measured("bsp-a2a", 2, 60.0), **base})  # before steal was recorded
    shared, _, runs, _, others = validation.local(str(tmp_path), "loopback")
    assert sorted((m, w) for m, _, w, *_ in runs) == [("bsp-a2a", 2), ("ddp", 4), ("wfbp-a2a", 4)]
    assert [x for _, x in shared["wfbp-a2a"]] == [40.0] and [x for _, x in shared["ddp"]] == [30.0]
    assert {m: x for m, _, _, _, x, *_ in runs}["ddp"] == 30.0
    assert sorted(others["disturbed"]) == [("ddp", "loopback", 4, 24.0, 30.0, 3, ((1, pytest.approx(0.15)),)),
                                           ("wfbp-a2a", "loopback", 2, 50.0, None, 2,
                                            ((0, pytest.approx(0.15)), (1, pytest.approx(0.125))))]
    assert validation.main(["--runs-only", "--results", str(tmp_path), "--local-network", "loopback"]) == 0
    out = capsys.readouterr().out
    assert "Left out: repeats whose machine lost at least 10% of its cores" in out
    assert "| wfbp-a2a | loopback | 2       | 50.0                  | none           | 2 of 2: #1 15%, #2 12%" in out
    assert "| ddp      | loopback | 4       | 24.0                  | 30.0           | 1 of 3: #2 15%" in out
    # beside each run's error, the range of the repeats it was predicted against (the stolen one
    # left out), marked where the prediction falls within it
    assert others["repeats"] == {("bsp-a2a", "loopback", 2): (60.0, 60.0), ("ddp", "loopback", 4): (30.0, 30.0),
                                 ("wfbp-a2a", "loopback", 4): (40.0, 40.0)}
    assert validation.repeats_cell(35.0, (30.0, 40.0)) == "30-40 in"
    assert validation.repeats_cell(41.0, (30.0, 40.0)) == "30-40"
    row = next(line for line in out.splitlines() if line.startswith("| ddp ") and "| 30.0 " in line)
    assert "| 30-30 " in row
    assert "0 of 3 runs in)" in out


def test_validation_calibrates_bytescheduler_ps_against_the_compute_at_its_one_worker_runs_threads(tmp_path,
                                                                                                     monkeypatch):
    """A one-worker PS run computes beside its server on fewer threads than the one-worker
    all-reduce runs (2 cores: 1 against 2), so ByteScheduler-PS's machinery is calibrated against
    the setup's compute at the PS run's own threads (`at_threads_of`: a profile at each), not the
    faster compute of the other runs, which would read the lost thread as machinery."""
    from ddlbench import record

    validation = _validation()
    two_threads, one_thread = cli.load_profile("tiny-resnet", 8, 100.0), cli.load_profile("tiny-resnet", 8, 60.0)
    monkeypatch.setattr(profile, "measured", lambda *a, threads=1, **k: two_threads if threads == 2 else one_thread)
    monkeypatch.setattr(profile, "machinery_s", lambda *a, **k: {"machinery_s": 0.0})

    def write(method, workers, sps, threads):
        record.write(tmp_path, {**_measured(method, workers, sps), "env": {"OMP_NUM_THREADS": str(threads)}})
    write("bsp-a2a", 1, 100.0, 2)
    write("bytescheduler-ps", 2, 60.0, 1)
    write("bytescheduler-ps", 1, 40.0, 1)
    unit_s = validation.local(str(tmp_path), "loopback")[3][("tiny-resnet", 8, "bytescheduler-ps", "loopback")]
    two = next(r for r in validation.ok_records(str(tmp_path)) if r["workers"] == 2)
    cluster = validation.record_cluster(two, "loopback")
    opts = cli.study_opts("local", "ddlbench", backend="gloo")
    assert unit_s > 0 and unit_s == pytest.approx(
        simulate.calibrate_unit_s("bytescheduler-ps", one_thread, cluster, 8 / 40.0, opts))
    assert unit_s < simulate.calibrate_unit_s("bytescheduler-ps", two_threads, cluster, 8 / 40.0, opts)


def test_validation_reads_bytescheduler_machinery_at_the_machines_speed_when_each_part_was_timed(tmp_path,
                                                                                                    monkeypatch):
    """What a thread gets of these shared cores drifts by a fifth within an hour, so each part of
    ByteScheduler's machinery is read against a compute timed beside it: its one-worker run's
    unit cost against that run's own compute probe (its repeats that lost the cores to other
    guests left out), not the setup's one-worker run minutes away; that unit, and the
    machinery_s microbenchmark (against its own plain step), rescaled to the compute the
    multi-worker run's probe timed."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)  # the setup's one worker: 0.08 s a step
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, "fixed"))
    monkeypatch.setattr(profile, "machinery_s", lambda *a, **k: {"machinery_s": 0.01, "plain_s": 0.008})
    seen = []
    real_predict = cli.predict
    monkeypatch.setattr(cli, "predict", lambda *a, **k: seen.append((a[5], a[6])) or real_predict(*a, **k))
    base = {"device": "cpu", "backend": "gloo", "engine": "torch", "env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    # its one-worker run: 40 samples/s, its probe's step 0.1-0.12 s where no guest took the cores
    record.write(tmp_path, {**_measured("bytescheduler-a2a", 1, 30.0), **base,
                            "samples_per_sec_per_repeat": [40.0, 20.0, 40.0, 20.0],
                            "host_steal_cores": [0.0, 1.0, 0.0, 1.0],
                            "compute_probe_s": [0.1, 0.3, 0.12, 0.3], "compute_probe_iter_s": [0.1] * 4})
    # the two-worker run's probe: 0.2 s a step, free-running
    record.write(tmp_path, {**_measured("bytescheduler-a2a", 2, 20.0), **base,
                            "compute_probe_s": [0.2, 0.2], "compute_probe_iter_s": [0.2] * 4})
    recs = validation.ok_records(str(tmp_path))
    one = next(r for r in recs if r["method"] == "bytescheduler-a2a" and r["workers"] == 1)
    assert validation.one_worker_probe_s([one]) == pytest.approx(0.11)  # not 0.21, with the disturbed two
    assert validation.one_worker_probe_s([{**one, "host_steal_cores": None}]) == pytest.approx(0.21)
    assert validation.one_worker_probe_s([_measured("bytescheduler-a2a", 1)]) is None  # no probe: none
    two = next(r for r in recs if r["workers"] == 2)
    assert validation.setup_machinery(str(tmp_path), two) == pytest.approx(0.01 * 0.2 / 0.008)
    assert validation.setup_machinery(str(tmp_path), {**two, "compute_probe_s": None}) == pytest.approx(0.01)

    _, _, runs, units, _ = validation.local(str(tmp_path), "loopback")
    unit_s = units[("tiny-resnet", 8, "bytescheduler-a2a", "loopback")]
    opts = cli.study_opts("local", "ddlbench", backend="gloo")
    cluster = validation.record_cluster(two, "loopback")
    assert unit_s == pytest.approx(simulate.calibrate_unit_s(
        "bytescheduler-a2a", cli.load_profile("tiny-resnet", 8, 8 / 0.11), cluster, 8 / 40.0, opts))
    assert unit_s != pytest.approx(simulate.calibrate_unit_s(  # the setup's one worker, 0.08 s
        "bytescheduler-a2a", fixed, cluster, 8 / 40.0, opts))
    # the run's prediction from its probe (its compute 8 / 0.2 samples/s): the unit and the
    # machinery each at the machine's speed as the probe found it
    probed = [o for one_sps, o in seen if one_sps == pytest.approx(8 / 0.2)]
    assert probed and all(o.bytescheduler_unit_s == pytest.approx(unit_s * 0.2 / 0.11) for o in probed)
    assert all(o.bytescheduler_cpu_s == pytest.approx(0.01 * 0.2 / 0.008) for o in probed)
    assert runs[0][-1] == "probe"
    # beside it, the bench-end profile's prediction (0.08 s a step beside the other worker here):
    # the unit at that compute over its one-worker run's probe, the machinery as measured
    at_profile = [o for one_sps, o in seen if one_sps == pytest.approx(100.0) and o.bytescheduler_cpu_s]
    assert at_profile and all(o.bytescheduler_unit_s == pytest.approx(unit_s * 0.08 / 0.11) for o in at_profile)
    assert all(o.bytescheduler_cpu_s == pytest.approx(0.01) for o in at_profile)


def test_validation_predicts_a_local_run_as_one_machine_and_an_emulated_one_as_configured():

    validation = _validation()
    local = {**_measured("bsp-ps", 4), "workers_per_node": 4, "servers": 1, "hosts": ["box"]}
    assert validation.record_cluster(local, "loopback").nodes(4) == (1, 4)  # one node, so one server
    laid_out = {**local, "workers_per_node": 2, "servers": 2}  # GPUS_PER_NODE=2 locally: two PS nodes
    assert validation.record_cluster(laid_out, "loopback").nodes(4) == (2, 2)
    elsewhere = {**local, "workers_per_node": 2, "hosts": ["n1", "n2"]}  # several hosts, no network: as named
    assert validation.record_cluster(elsewhere, "loopback").nodes(4) == (4, 1)
    emulated = {**_measured("bsp-ps", 4), "workers_per_node": 1, "servers": 4,
                "network": {"emulated": True, "link": "1gbit"}}
    assert validation.record_cluster(emulated, "emulated-1gbit").nodes(4) == (4, 1)
    # GPUS_PER_NODE=2: in its config; only PS methods write the top-level field
    pairs = {**_measured("bsp-a2a", 4), "config": {"launcher": {"workers_per_node": 2}},
             "network": {"emulated": True, "link": "1gbit", "intra_link": "10gbit"}}
    placed = validation.record_cluster(pairs, "emulated-1gbit")
    assert placed.nodes(4) == (2, 2) and placed.intra.beta_s_per_byte == pytest.approx(8e-10)
    # the PS layout: the run's own field, else its config's (older records); none for all-reduce
    assert validation.record_ps_topology({**local, "ps_topology": "per-gpu"}) == "per-gpu"
    assert validation.record_ps_topology({**local, "config": {"method": {"ps_topology": "per-gpu"}}}) == "per-gpu"
    assert validation.record_ps_topology(pairs) is None


def test_validation_predicts_an_mgwfbp_run_with_its_own_start_up_fit(tmp_path, monkeypatch):
    """The run's record says which alpha, beta its start-up microbenchmark gave; the prediction
    of that run times the groups they chose, and the row says whether the predictor alone would
    have chosen the same."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)
    # the CPU's copies as the profile's own (the test's subject is the groups)
    monkeypatch.setattr(profile, "measure_copy", lambda *a, **k: (fixed.copy_tensor_s, fixed.copy_Bps, "the profile's"))
    opts = cli.study_opts("local", "ddlbench", backend="gloo")
    wfbp_like = simulate.plan_for("mg-wfbp", fixed, network.load("loopback"), 2,
                                  simulate.Options(stack="ddlbench", backend="gloo", mgwfbp_alpha_beta=(0.0, 1e-9)))
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), "env": {"OMP_NUM_THREADS": "1"}})
    record.write(tmp_path, {**_measured("mg-wfbp", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}, "alpha_s": 0.0,
                            "beta_s_per_byte": 1e-9, "groups": validation.group_bytes(wfbp_like, fixed)})
    (row,) = validation.local(str(tmp_path), "loopback")[2]
    own = cli.predict("tiny-resnet", [2], "loopback", ("mg-wfbp",), 8, 100.0,
                      replace(opts, mgwfbp_alpha_beta=(0.0, 1e-9)),
                      explain=False)[0][("mg-wfbp", 2)].samples_per_sec
    assert row[3] == pytest.approx(own)
    mine = simulate.plan_for("mg-wfbp", fixed, network.load("loopback"), 2, opts)
    assert mine.messages != wfbp_like.messages  # loopback's fit merges otherwise than alpha 0 does
    assert row[5] == f"other: {len(mine.messages)} groups, the run {len(wfbp_like.messages)}"
    assert cli.predict("tiny-resnet", [2], "loopback", ("mg-wfbp",), 8, 100.0, opts,
                       explain=False)[0][("mg-wfbp", 2)].samples_per_sec != pytest.approx(own)


def test_validation_times_an_mgwfbp_run_with_the_groups_it_sent(tmp_path, monkeypatch):
    """A run's groups, merged from its own start-up timings of backward, can differ from what
    its alpha, beta give with a profile measured apart: the prediction of that run times the
    groups it sent (its record's `groups`), and the row says what the alpha, beta would have
    merged; groups that do not fit the profile are merged here, and the row says so."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)
    monkeypatch.setattr(profile, "measure_copy", lambda *a, **k: (fixed.copy_tensor_s, fixed.copy_Bps, "the profile's"))
    opts = cli.study_opts("local", "ddlbench", backend="gloo")
    resolved = replace(opts, mgwfbp_alpha_beta=(0.0, 1e-9))  # alpha 0: only the smallest merge
    merged = simulate.plan_for("mg-wfbp", fixed, network.load("loopback"), 2, resolved)
    assert len(merged.messages) > 1
    sent = [sum(fixed.tensor_bytes)]  # the run sent one group of everything
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), "env": {"OMP_NUM_THREADS": "1"}})
    record.write(tmp_path, {**_measured("mg-wfbp", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}, "alpha_s": 0.0,
                            "beta_s_per_byte": 1e-9, "groups": sent})
    (row,) = validation.local(str(tmp_path), "loopback")[2]
    timed = cli.predict("tiny-resnet", [2], "loopback", ("mg-wfbp",), 8, 100.0,
                        replace(resolved, mgwfbp_group_bytes=tuple(sent)), explain=False)[0][("mg-wfbp", 2)]
    as_merged = cli.predict("tiny-resnet", [2], "loopback", ("mg-wfbp",), 8, 100.0, resolved,
                            explain=False)[0][("mg-wfbp", 2)]
    assert row[3] == pytest.approx(timed.samples_per_sec)
    assert abs(timed.samples_per_sec - as_merged.samples_per_sec) > 1e-3 * as_merged.samples_per_sec
    assert row[5].endswith(f"the run 1; its alpha, beta give {len(merged.messages)}")
    # a record whose groups are another model's: merged here, as its alpha, beta give
    other = tmp_path / "other"
    record.write(other, {**_measured("bsp-a2a", 1, 100.0), "env": {"OMP_NUM_THREADS": "1"}})
    record.write(other, {**_measured("mg-wfbp", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}, "alpha_s": 0.0,
                         "beta_s_per_byte": 1e-9, "groups": [sent[0] + 4]})
    (row,) = validation.local(str(other), "loopback")[2]
    assert row[3] == pytest.approx(as_merged.samples_per_sec)
    assert row[5].endswith("; timed: merged here (the run's do not fit this profile)")


def test_a_profile_measured_several_times_keeps_the_median_one(tmp_path, monkeypatch):
    """profile.measured(repeats=3): a disturbed window (here the slowest) is outvoted, and the
    source says which measurements there were."""
    import contextlib

    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    walls = iter([[0.10, 0.10], [0.30, 0.30], [0.12, 0.12]])
    monkeypatch.setattr(profile, "_neighbours", lambda *a: contextlib.nullcontext(lambda: None))
    monkeypatch.setattr(profile, "_measure", lambda *a: (fixed, next(walls)))
    p = profile.measured("tiny-resnet", 8, "cpu", threads=1, cache_dir=tmp_path, repeats=3)
    assert p.compute_s == pytest.approx(0.12) and p.iteration_s == [0.12, 0.12]
    assert p.source.endswith("the median compute of 3 measurements (100.0, 300.0, 120.0 ms)")
    assert [f.name for f in tmp_path.iterdir()] == ["tiny-resnet-b8-cpu-t1-w3-r3-measured.json"]
    with pytest.raises(ValueError, match="repeats=0 are invalid"):
        profile.measured("tiny-resnet", 8, "cpu", cache=False, repeats=0)


def test_a_neighbour_that_cannot_start_says_why(monkeypatch):
    """profile._neighbours: a process that fails to start (no fork left, a spawn error) is the
    error raised, not 'can only join a started process' from the cleanup joining it."""
    import multiprocessing as mp

    def refuse(self):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(type(mp.get_context("spawn").Process()), "start", refuse)
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        profile.measured("tiny-resnet", 8, "cpu", threads=1, sharers=2, cache=False)


def test_the_validation_predicts_cpu_runs_with_their_benchs_launch_cost(tmp_path, monkeypatch):
    """Every prediction of a CPU run gets the runtime's launch cost its bench kept
    (`run_launch`: profile.measure_launch at the run's threads; LAUNCH_S here); a GPU run none."""
    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    seen = []
    real = cli.predict
    monkeypatch.setattr(cli, "predict", lambda *a, **k: seen.append(a[6].launch_s) or real(*a, **k))
    base = {"env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**_measured("wfbp-a2a", 2, 150.0), **base})
    record.write(tmp_path, {**_measured("mg-wfbp", 2, 150.0), **base})
    assert sorted(validation.local(str(tmp_path), "loopback")[0]) == ["mg-wfbp", "wfbp-a2a"]
    assert seen and set(seen) == {LAUNCH_S}
    assert validation.run_launch(str(tmp_path), {**_measured("wfbp-a2a", 2), "device": "cuda"}) == 0.0


@pytest.mark.real_launch
def test_a_bench_keeps_the_profiles_that_calibrate_its_runs_beside_them(tmp_path, monkeypatch, capsys):
    """`--calibrate-only` (the benches' last step) measures the profiles the validation rescales
    each setup with into RESULTS/profiles, and every later validation of those runs reads the
    same ones instead of measuring what this machine gives at that later time."""
    import contextlib

    from ddlbench import record

    validation = _validation()
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    measures = []
    monkeypatch.setattr(profile, "_neighbours", lambda *a: contextlib.nullcontext(lambda: None))
    monkeypatch.setattr(profile, "_measure", lambda *a: measures.append(a) or (fixed, [0.1, 0.1, 0.1]))
    monkeypatch.setattr(profile, "CACHE_DIR", tmp_path / "home-cache")  # not where they are kept
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), "env": {"OMP_NUM_THREADS": "2"}})
    record.write(tmp_path, {**_measured("ddp", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}})
    record.write(tmp_path, {**_measured("wfbp-ps", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}})
    record.write(tmp_path, {**_measured("bytescheduler-a2a", 2, 150.0), "env": {"OMP_NUM_THREADS": "1"}})
    machinery = []
    real_machinery = profile.machinery_s
    monkeypatch.setattr(profile, "machinery_s", lambda *a, **k: machinery.append(k) or real_machinery(*a, **k))
    monkeypatch.setattr(validation, "MACHINERY_ROUNDS", 1)
    from ddlbench.methods import grouped
    packs = []  # the copy microbenchmark's packs: the runtime's own (profile.measure_copy)
    real_pack = grouped.pack
    monkeypatch.setattr(grouped, "pack", lambda *a: packs.append(1) or real_pack(*a))
    assert validation.main(["--results", str(tmp_path), "--calibrate-only"]) == 0
    # one worker alone at 2 threads, one beside another at 1: two profiles, the same for every
    # run, each the median of CALIBRATION_REPEATS measurements; and ByteScheduler's machinery
    # beside another worker at 1 thread
    n = 2 * validation.CALIBRATION_REPEATS
    # and the fused messages' copies at the runs' 1 thread, once
    # and the runtime's launch cost at the runs' 1 thread, once (profile.measure_launch)
    assert len(measures) == n == 6 and "5 calibration(s)" in capsys.readouterr().out
    copies = len(packs)
    assert copies == len(profile.COPY_LAYOUTS) * (profile.COPY_REPEATS + 1)
    launch = f"tiny-resnet-b8-cpu-t1-r{profile.LAUNCH_ROUNDS}x{profile.LAUNCH_ITERS}-launch.json"
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == \
        sorted([f"copy-cpu-t1-r{profile.COPY_REPEATS}.json", "tiny-resnet-b8-cpu-t1-s2-r1x40-machinery.json",
                "tiny-resnet-b8-cpu-t1-s2-w3-r3-measured.json", "tiny-resnet-b8-cpu-t2-w3-r3-measured.json", launch])
    kept_launch = json.loads((tmp_path / "profiles" / launch).read_text())
    assert kept_launch["launch_s"] >= 0 and "over a Gloo group of one rank" in kept_launch["source"]
    import multiprocessing

    def no_process(*a):
        raise AssertionError("measured again")
    monkeypatch.setattr(multiprocessing, "get_context", no_process)  # the launch cost is read back, not measured
    assert machinery[0]["threads"] == 1 and machinery[0]["sharers"] == 2
    # the validation's report shows the kept timing the predictions of the sharing runs used
    table = validation.machinery_table(str(tmp_path))
    kept = json.loads((tmp_path / "profiles" / "tiny-resnet-b8-cpu-t1-s2-r1x40-machinery.json").read_text())
    (row,) = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines()
              if line.startswith("| tiny-resnet")]
    assert row[:2] == ["tiny-resnet-b8-cpu-t1-s2-r1x40", f"{kept['machinery_s'] * 1e3:.2f}"]
    assert "beside 1 more worker(s) doing the same" in row[-1]
    assert validation.machinery_table(str(tmp_path / "none")) is None
    shared = validation.local(str(tmp_path), "loopback")[0]
    assert len(measures) == n and sorted(shared) == ["bytescheduler-a2a", "ddp", "wfbp-ps"]  # read, not measured again
    assert len(packs) == copies  # the copies too: the same every time these runs are validated
    assert not list((tmp_path / "home-cache").glob("*-machinery.json"))
    assert not list((tmp_path / "home-cache").glob("*-measured.json"))  # (the roofline's is cached there)


def test_predictions_within_the_tie_margin_are_all_marked_and_the_pick_counts_among_them():
    """Methods predicted within cli.TIE_REL of the fastest tie: every one is starred, METHOD=auto
    names them, and the validation counts a measured fastest among them apart from the strict pick."""
    from ddlbench.analysis.predicted import fastest_hits

    top = 1000.0
    values = {"wfbp-a2a": top, "wfbp-ps": top * (1 - cli.TIE_REL / 2), "mg-wfbp": top * (1 - 2 * cli.TIE_REL),
              "bsp-a2a": 500.0}
    assert cli.tied(values) == ["wfbp-a2a", "wfbp-ps"]
    assert cli.tied({"a": 1.0, "b": 2.0}) == ["b"]
    preds = {(m, 4): cli.Prediction(m, 4, v, 4 / v, 0.0, None) for m, v in values.items()}
    assert cli.fastest_tied(preds, 4) == ["wfbp-a2a", "wfbp-ps"]  # the pick first
    table = cli.render(preds, "tiny-resnet", 1, network.load("loopback"), profile.Profile(
        "tiny-resnet", 1, ["a"], [1], 4, ["a"], [0.0], [0.0], 0.1, 0.1, [0.0], "test", 5.0))
    rows = [line.split("|") for line in table.splitlines() if line.startswith("|")]
    starred = {r[1].strip() for r in rows if r[-2].strip().endswith("*")}
    assert starred == {"wfbp-a2a", "wfbp-ps"}

    # the measured fastest is wfbp-ps: a strict miss, a hit among the ties; mg-wfbp is not tied
    cell = lambda mean: tables.Cell(mean, 1.0, 5)  # noqa: E731
    measured = {("wfbp-a2a", 4): cell(990.0), ("wfbp-ps", 4): cell(1000.0), ("mg-wfbp", 4): cell(990.0),
                ("bsp-a2a", 4): cell(500.0)}
    (hit,) = fastest_hits(preds, measured, values)
    assert hit["predicted"] == "wfbp-a2a" and not hit["strict"] and hit["among_ties"]
    assert hit["predicted_ties"] == ["wfbp-a2a", "wfbp-ps"]
    measured[("mg-wfbp", 4)] = cell(1010.0)
    (miss,) = fastest_hits(preds, measured, values)
    assert miss["measured"] == "mg-wfbp" and not miss["among_ties"]


def test_the_pick_is_the_method_that_loses_least_if_communication_costs_up_to_twice_the_models():
    """cli.rank and fastest_tied: a method 0.2% ahead at the model's communication but 10% behind
    at COMM_UNCERTAINTY x it is not picked over one that stays near the top at both; ties are
    within TIE_REL at both ends; an upper bound is never picked over an estimate, however high."""
    def pred(m, nominal, slow, bound=None):
        return cli.Prediction(m, 8, nominal, 8 / nominal, 0.0, None, bound, slow, comm_uncertainty=cli.COMM_UNCERTAINTY)

    preds = [pred("wfbp-a2a", 1002.0, 800.0), pred("mg-wfbp", 1000.0, 900.0),
             pred("wfbp-ps", 1000.0 * (1 - cli.TIE_REL / 4), 900.0 * (1 - cli.TIE_REL / 4)),
             pred("bytescheduler-a2a", 1500.0, 1400.0, "its plugin is not modelled"), pred("bsp-a2a", 600.0, 500.0)]
    cli.rank(preds)
    by = {p.method: p for p in preds}
    assert by["mg-wfbp"].regret == pytest.approx(1 - 1000 / 1002)  # behind only at the model's communication
    assert by["wfbp-a2a"].regret == pytest.approx(1 - 800 / 900)
    assert by["bytescheduler-a2a"].regret < 0  # above every estimate, but a bound: not in the pool
    keyed = {(p.method, 8): p for p in preds}
    assert cli.fastest_tied(keyed, 8) == ["mg-wfbp", "wfbp-ps"]
    # upper bounds only: the pick is among them
    only = {k: v for k, v in keyed.items() if k[0] == "bytescheduler-a2a"}
    assert cli.fastest_tied(only, 8) == ["bytescheduler-a2a"]
    # the table says why, and the record what the pick weighed
    prof = profile.Profile("tiny-resnet", 1, ["a"], [1], 4, ["a"], [0.0], [0.0], 0.1, 0.1, [0.0], "test", 5.0)
    table = cli.render(keyed, "tiny-resnet", 1, network.load("loopback"), prof)
    assert ("\n8 workers: mg-wfbp is picked over wfbp-a2a: 1000.0 against 1002.0 samples/s, but 900.0 against 800.0 "
            "with communication 2x the model's") in table
    assert cli.why_picked({k: v for k, v in keyed.items() if k[0] != "wfbp-a2a"}, 8) is None  # the fastest estimate
    rec = by["mg-wfbp"].record("tiny-resnet", 8, network.load("loopback"), prof, cli.study_opts())
    assert rec["slower_comm_samples_per_sec"] == 900.0 and rec["comm_uncertainty"] == cli.COMM_UNCERTAINTY
    assert rec["regret"] == pytest.approx(0.002, abs=1e-5)


def test_predict_ranks_on_the_same_cluster_with_communication_twice_as_costly():
    """cli.predict's second look: every link (GPUs, nodes, servers, what commbench measured)
    at COMM_UNCERTAINTY x its alpha and beta, the MG-WFBP table kept (the runtime's input)."""
    base = network.load("100gbib")
    slow = network.slower(base, 2.0)
    for a, b in ((base.intra, slow.intra), (base.inter, slow.inter)):
        assert (b.alpha_s, b.beta_s_per_byte) == pytest.approx((2 * a.alpha_s, 2 * a.beta_s_per_byte))
    assert slow.mgwfbp_table == base.mgwfbp_table
    measured = replace(base, measured={"all_reduce": {2: network.Link(1e-4, 1e-9)}}, ps=network.Link(2e-4, 2e-9))
    twice = network.slower(measured, 2.0)
    assert twice.measured["all_reduce"][2].alpha_s == pytest.approx(2e-4) and twice.ps.beta_s_per_byte == pytest.approx(4e-9)
    preds, prof, _ = cli.predict("resnet50", [1, 32], base, ("bsp-a2a", "wfbp-a2a"), explain=False)
    for m in ("bsp-a2a", "wfbp-a2a"):
        p = preds[(m, 32)]
        assert p.slower_comm_samples_per_sec == pytest.approx(
            32 * 64 / simulate.simulate(m, prof, slow, 32, cli.study_opts()).period_s)
        assert p.slower_comm_samples_per_sec < p.samples_per_sec and p.regret is not None
        assert preds[(m, 1)].regret is None  # one worker: no communication to weigh
    assert cli.fastest_tied(preds, 32) == ["wfbp-a2a"]


def test_a_crossover_is_where_the_fastest_changes_not_where_a_tied_method_edges_ahead():
    from ddlbench.analysis.predicted import crossings

    hair = 1 + cli.TIE_REL / 10
    # x=3: c edges past a by a hair (a tie), x=4: so does b; x=5: a falls behind, b leads
    curves = {"a": [1.0, 1.0, 1.0, 1.0, 0.5], "b": [0.5, 0.99, 1.0, hair, 1.0], "c": [0.1, 0.1, hair, 1.0, 0.9]}
    assert crossings([1, 2, 3, 4, 5], curves) == [(5, "a", "b")]
    assert crossings([1, 2], {"a": [1.0, 0.5], "b": [0.5, 1.0]}) == [(2, "a", "b")]


def test_the_whatif_crossovers_never_lead_to_an_upper_bound():
    """On a slow network the study stack's ByteScheduler-A2A has the highest (unpriced) curve for
    ResNet-50: drawn, but the crossovers, like the pick, are between estimates."""
    from ddlbench.analysis.predicted import whatif

    data = whatif(("resnet50",), gbps=(1, 3, 10))
    assert data["upper_bounds"] == ["bytescheduler-a2a"]
    curves = data["curves"]["resnet50"]
    assert curves["bytescheduler-a2a"][0] == max(ys[0] for ys in curves.values())
    assert data["crossovers"]["resnet50"] and all("bytescheduler-a2a" not in c for c in data["crossovers"]["resnet50"])


def exit_code(main, argv):
    """main's exit status, whether it returns it or exits (argparse's own errors exit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv, needles", [
    (["--workers", "abc"], ["--workers='abc'", "WORKERS", "accepted: a comma list of positive integers"]),
    (["--workers", "4,,8"], ["--workers='4,,8'", "accepted: a comma list of positive integers"]),
    (["--workers", "4,x"], ["--workers='4,x'", "accepted: a comma list of positive integers"]),
    (["--local-batch", "0"], ["--local-batch=0", "accepted: an integer >= 1"]),
    (["--local-batch", "x"], ["--local-batch='x'", "accepted: an integer"]),
    (["--profile", "foo"], ["--profile='foo'", "accepted: local, study"]),
    (["--one-worker", "abc"], ["--one-worker='abc'", "ONE_WORKER", "accepted: a number"]),
    (["--profile-from", "foo"], ["--profile-from='foo'", "PROFILE_FROM", "accepted: derived, measured"]),
    (["--stack", "foo"], ["--stack='foo'", "STACK", "accepted: study, ddlbench"]),
    (["--ps-topology", "foo"], ["--ps-topology='foo'", "PS_TOPOLOGY", "accepted: per-machine, per-gpu"]),
    (["--algorithm", "foo"], ["--algorithm='foo'", "accepted: "]),
    (["--bogus"], ["unrecognized arguments: --bogus", "accepted: "]),
    (["--device", "foo", "--profile-from", "measured"], ["--device='foo' (DEVICE with make) is invalid", "accepted: auto, cpu, cuda"]),
    # DEVICE is where a measured profile is taken: given without one it is an error, not ignored
    (["--device", "foo"], ["--device='foo' (DEVICE with make) is invalid", "accepted: auto, cpu, cuda"]),
    (["--device", "cpu"], ["--device='cpu' (DEVICE", "PROFILE_FROM=measured"]),
    # the README's "any torchvision classifier" runs, but the predictor profiles conf/model/ only
    (["--model", "vgg16"], ["--model='vgg16' (MODEL with make)", "tiny-resnet need ONE_WORKER=<samples/s> or PROFILE_FROM=measured"]),
    (["--model", "torchvision"], ["--model='torchvision'", "accepted: bert-base, bert-large, resnet50, tiny-bert"]),
])
def test_bad_command_line_values_are_one_line_errors(tmp_path, capsys, monkeypatch, argv, needles):
    """Every bad value: one line `predict: error: ...` naming it and what is accepted, exit 2,
    no usage block, no traceback, and nothing computed."""
    monkeypatch.setattr(cli, "predict", lambda *a, **k: pytest.fail("predicted despite a bad input"))
    assert exit_code(cli.main, argv + ["--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("predict: error: "), err
    assert "accepted: " in err and "Traceback" not in err and "usage:" not in err
    for needle in needles:
        assert needle in err


def test_the_results_path_is_checked_before_predicting(tmp_path, capsys, monkeypatch):
    """RESULTS that is a file, under a file, or whose predictions.jsonl is a directory: one line
    before anything is computed, not a crash after the table (the predictions lost)."""
    monkeypatch.setattr(cli, "load_profile", lambda *a, **k: pytest.fail("computed before the results were checked"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    (tmp_path / "d" / cli.DEFAULT_FILE).mkdir(parents=True)
    for results in (a_file, a_file / "sub", tmp_path / "d"):
        assert exit_code(cli.main, ["--workers", "4", "--results", str(results)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("predict: error: --results="), err
        assert str(results) in err and "accepted: " in err
    # --no-record writes nothing, so RESULTS is not looked at
    monkeypatch.undo()
    assert cli.main(["--workers", "4", "--results", str(a_file), "--no-record"]) == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_results_directory_is_refused_before_predicting(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert exit_code(cli.main, ["--workers", "4", "--results", str(ro / "new")]) == 2
        assert "is not writable" in capsys.readouterr().err
    finally:
        ro.chmod(0o755)


def test_bytescheduler_machinery_is_timed_against_plain_steps_and_trains_alike(tmp_path, monkeypatch):
    """profile.machinery_s: the real ByteScheduler at one worker against plain SGD steps, in
    alternating rounds, its partitions landing on a completion thread (not inline, as one
    worker's transport would have them); both train alike (else it raises), the difference is
    kept and cached."""
    import threading

    from ddlbench.methods import bytescheduler
    from ddlbench.predict import profile

    landed, on = bytescheduler.ByteScheduler._landed, set()
    monkeypatch.setattr(bytescheduler.ByteScheduler, "_landed",
                        lambda self, pid: (on.add(threading.current_thread().name), landed(self, pid)))
    out = profile.machinery_s("tiny-resnet", 2, threads=1, cache_dir=tmp_path, rounds=2, iters=3)
    assert on == {"landing"}  # every partition lands on a completion thread, as beside other workers
    assert out["plain_s"] > 0 and out["bytescheduler_s"] > 0
    assert out["machinery_s"] == pytest.approx(max(0.0, out["bytescheduler_s"] - out["plain_s"]))
    assert "ByteScheduler at one worker on the cpu at 1 threads" in out["source"]
    assert "beside" not in out["source"]
    monkeypatch.setattr(profile, "_workload", None)  # read back, not measured again
    assert profile.machinery_s("tiny-resnet", 2, threads=1, cache_dir=tmp_path, rounds=2, iters=3) == out
    with pytest.raises(ValueError, match="rounds=0.*accepted: each >= 1"):
        profile.machinery_s("tiny-resnet", 2, threads=1, cache=False, rounds=0)


def test_bytescheduler_machinery_leaves_out_rounds_that_lost_the_cores_to_other_guests(tmp_path, monkeypatch):
    """A pair of rounds during which the hypervisor gave other guests DISTURBED_STEAL_SHARE of the
    cores or more is left out of machinery_s (its means are the other pairs'), and the source
    says so; where every pair was, all are kept."""
    from ddlbench import hostcpu
    from ddlbench.predict import profile

    shares = iter([0.0, 0.3, 0.02])
    monkeypatch.setattr(hostcpu, "stolen_share", lambda mark: next(shares))
    out = profile.machinery_s("tiny-resnet", 2, threads=1, cache=False, rounds=3, iters=2)
    rounds = out["rounds"]
    assert [r["steal_share"] for r in rounds] == [0.0, 0.3, 0.02]
    assert out["plain_s"] == pytest.approx((rounds[0]["plain_s"] + rounds[2]["plain_s"]) / 2)
    assert out["bytescheduler_s"] == pytest.approx((rounds[0]["bytescheduler_s"] + rounds[2]["bytescheduler_s"]) / 2)
    assert "(1 pair(s) of rounds left out: the hypervisor gave other guests at least 10%" in out["source"]
    monkeypatch.setattr(hostcpu, "stolen_share", lambda mark: 0.5)
    out = profile.machinery_s("tiny-resnet", 2, threads=1, cache=False, rounds=2, iters=2)
    assert out["plain_s"] == pytest.approx(sum(r["plain_s"] for r in out["rounds"]) / 2)
    assert "left out" not in out["source"]


def test_bytescheduler_machinery_that_trains_otherwise_is_not_kept(tmp_path, monkeypatch):
    """A ByteScheduler that skips an update (what a broken world-of-one path would do) ends with
    other parameters than plain SGD's: the timing is refused, and nothing is cached."""
    from ddlbench.methods import bytescheduler
    from ddlbench.predict import profile

    landed = bytescheduler.ByteScheduler._landed

    def lose_first_parameter(self, pid):
        if self.parts[pid].param == 0:
            self.named[0][1].grad.zero_()
        landed(self, pid)

    monkeypatch.setattr(bytescheduler.ByteScheduler, "_landed", lose_first_parameter)
    with pytest.raises(RuntimeError, match="did not train as plain SGD's did"):
        profile.machinery_s("tiny-resnet", 2, threads=1, cache_dir=tmp_path, rounds=1, iters=2)
    assert not list(tmp_path.iterdir())


def test_bytescheduler_machinery_beside_a_neighbour_that_does_the_same(tmp_path):
    """Beside other workers, each neighbour runs plain steps in the plain rounds and
    ByteScheduler's (at one worker, `_Queued`) in its rounds; a neighbour whose ByteScheduler
    failed would have ended the measurement (`check`). None is left running after."""
    import multiprocessing

    from ddlbench.predict import profile

    out = profile.machinery_s("tiny-resnet", 2, threads=1, sharers=2, cache_dir=tmp_path, rounds=2, iters=3)
    assert "beside 1 more worker(s) doing the same on this machine's cores" in out["source"]
    assert out["plain_s"] > 0 and out["bytescheduler_s"] > 0
    assert not multiprocessing.active_children()


def test_a_bench_with_its_own_network_predicts_its_local_runs_with_it(tmp_path, monkeypatch):
    """make bench-local measures this machine's network as it finishes (its commbench writes
    <records>/profiles/local-<hostname>.yaml, --network-dir; bench-emulated emulated-<rate>.yaml):
    the validation predicts the bench's runs on that one, not on conf/network's of the same name, which make commbench wrote
    hours apart (a message's CPU on the shared cores drifted 28% between two), and finds it
    without --local-network. A run recorded on a network of its own keeps that one; a bench
    without one reads conf/network's."""
    import yaml

    from ddlbench import record

    validation = _validation()
    monkeypatch.setattr(network, "local_network_name", lambda: "local-box")
    fixed = cli.load_profile("tiny-resnet", 8, 100.0)
    monkeypatch.setattr(profile, "measured", lambda *a, **k: fixed)
    monkeypatch.setattr(profile, "measure_copy", lambda device, threads, **k: (2e-5, 1e9, f"fixed at {threads}"))
    seen = []
    real = cli.predict
    monkeypatch.setattr(cli, "predict", lambda *a, **k: seen.append(a[2]) or real(*a, **k))
    base = {"env": {"OMP_NUM_THREADS": "1"}, "host_cores": 2}
    record.write(tmp_path, {**_measured("bsp-a2a", 1, 100.0), **base})
    record.write(tmp_path, {**_measured("bsp-a2a", 2, 150.0), **base})
    assert validation.bench_network(str(tmp_path)) is None  # no network of its own: conf/network's
    assert validation.local(str(tmp_path), "loopback")[2][0][1] == "loopback"
    conf = network.load("loopback").inter.alpha_s

    spec = yaml.safe_load((network.conf_dir() / "loopback.yaml").read_text())
    slow = {**spec, "name": "local-box", "inter": {"allreduce": {**spec["inter"]["allreduce"], "alpha_s": 0.05}}}
    where = validation.profiles_dir(str(tmp_path))
    where.mkdir(parents=True, exist_ok=True)
    (where / "local-box.yaml").write_text(yaml.safe_dump(slow))
    (where / "local-box.yaml.20261129T100000.bak").write_text(yaml.safe_dump(spec))  # a replaced one: not a network
    assert validation.bench_network(str(tmp_path)) == ("local-box", where)
    assert validation.bench_network(str(tmp_path), "loopback") is None  # asked for another: conf/network's
    (where / "emulated-1gbit.yaml").write_text(yaml.safe_dump({**slow, "name": "emulated-1gbit"}))  # bench-emulated's
    assert validation.bench_network(str(tmp_path), "emulated-1gbit") == ("emulated-1gbit", where)
    assert validation.bench_network(str(tmp_path)) == ("local-box", where)  # the local runs' default: local-*
    seen.clear()
    shared, _, runs, _, _ = validation.local(str(tmp_path), None)  # found without --local-network
    assert [r[1] for r in runs] == ["local-box (bench's)"]
    assert seen and {c.inter.alpha_s for c in seen} == {network.load("local-box", where).inter.alpha_s} != {conf}
    predicted_slow = runs[0][3]
    fast = {**slow, "inter": {"allreduce": {**spec["inter"]["allreduce"], "alpha_s": 1e-5}}}
    (where / "local-box.yaml").write_text(yaml.safe_dump(fast))
    assert validation.local(str(tmp_path), "local-box")[2][0][3] > predicted_slow  # the same name, given


def test_the_validation_refuses_an_unknown_local_network_in_one_line(tmp_path, capsys):
    """--local-network names a config of conf/network or a bench's own; another name was a
    traceback from deep in the predictions."""
    validation = _validation()
    assert validation.main(["--runs-only", "--results", str(tmp_path), "--local-network", "local-nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'local-nope' is unknown" in err and "loopback" in err
