"""Verdicts that respect noise: the statistics behind them, the three verdicts on golden fixtures,
the marks and labels in tables and figures, and the benchmark ratio printer."""
import math

import pytest

from ddlbench import metrics
from ddlbench.analysis import figures, findings, noise, ratios, reference, tables


def rec(method, workers, per_repeat, model="resnet50", **kw):
    r = dict(method=method, model=model, workers=workers, local_batch=4, device="cpu", backend="gloo", engine="torch",
             status="ok", samples_per_sec=sum(per_repeat) / len(per_repeat), samples_per_sec_per_repeat=per_repeat)
    r.update(kw)
    return r


def cells_of(records):
    (cells,) = tables.ours(records).values()
    return cells


def published(mean, std):
    return tables.Cell(mean, std, reference.STUDY_RUNS)


# --- the formulas -------------------------------------------------------------------------------

@pytest.mark.parametrize("df, t", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (8, 2.3060), (30, 2.0423), (math.inf, 1.9600)])
def test_t_quantile_matches_the_printed_tables(df, t):
    assert metrics.student_t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)
    assert metrics.student_t_quantile(0.025, df) == pytest.approx(-t, abs=1e-4)


def test_t_cdf_of_a_known_point():
    assert metrics.student_t_cdf(-2.0, 5) == pytest.approx(0.05097, abs=1e-5)  # tables: P(T5 > 2) = 0.0510


def test_welch_interval_by_hand():
    # [10, 11, 12] against [20, 21, 22]: s = 1 each, se = sqrt(1/3 + 1/3), df = 4, t = 2.7764
    diff, lo, hi = metrics.welch_interval(11, 1, 3, 21, 1, 3)
    half = 2.776445 * math.sqrt(2 / 3)
    assert (diff, lo, hi) == (-10, pytest.approx(-10 - half, abs=1e-5), pytest.approx(-10 + half, abs=1e-5))
    with pytest.raises(ValueError, match="at least 2 runs"):
        metrics.welch_interval(1, 0, 1, 1, 0, 3)


def test_widest_range_a_std_allows():
    # two values at the ends and the rest at their midpoint reach it exactly
    values = [0.0, 5.0, 5.0, 5.0, 10.0]
    _, std = metrics.mean_std(values)
    assert metrics.range_bound(std, 5) == pytest.approx(10.0)


def test_rounds_a_median_needs():
    assert metrics.rounds_to_resolve(0.95) == 6  # 2^-6 <= 0.025 < 2^-5
    assert metrics.rounds_to_resolve(0.99) == 8


# --- two cells: within noise, or decided --------------------------------------------------------

def test_the_issues_example_is_within_noise():
    # "WFBP beats BSP: does not hold" on 3.05 ± 0.16 against 3.06 ± 0.15: five runs each
    d = noise.compare(published(3.05, 0.16), published(3.06, 0.15), None)
    assert d.sign == noise.WITHIN and d.lo < 0 < d.hi
    assert d.text == f"{-0.01:+.2f} [{d.lo:+.2f}, {d.hi:+.2f}]"


def test_less_than_their_std_apart_is_within_noise_and_far_apart_is_decided():
    cells = cells_of([rec("wfbp-a2a", 2, [3.00, 3.10, 3.20]), rec("bsp-a2a", 2, [3.05, 3.15, 3.25]),
                      rec("wfbp-ps", 2, [4.00, 4.10, 4.20]), rec("bsp-ps", 2, [3.00, 3.10, 3.20])])
    spread = noise.setup_spread(cells)
    assert noise.compare(cells[("wfbp-a2a", 2)], cells[("bsp-a2a", 2)], spread).sign == noise.WITHIN
    assert noise.compare(cells[("wfbp-ps", 2)], cells[("bsp-ps", 2)], spread).sign == noise.ABOVE
    assert noise.compare(cells[("bsp-ps", 2)], cells[("wfbp-ps", 2)], spread).sign == noise.BELOW


def test_fewer_than_three_repeats_decide_only_beyond_the_setups_spread():
    # the setup's largest run-to-run spread: ddp's (3.0, 3.3), 0.3 / 3.15 = 9.5%
    cells = cells_of([rec("bsp-a2a", 2, [3.09, 3.11]), rec("bsp-ps", 2, [3.10, 3.12]),  # the issue's "3.1 vs 3.1"
                      rec("mg-wfbp", 2, [3.49, 3.51]), rec("ddp", 2, [3.0, 3.3])])
    spread = noise.setup_spread(cells)
    assert spread == pytest.approx(0.3 / 3.15)
    tied = noise.compare(cells[("bsp-a2a", 2)], cells[("bsp-ps", 2)], spread)
    assert tied.sign == noise.WITHIN and "(n=2)" in tied.text and tied.lo is None
    # 3.5 vs 3.1: 11% apart, beyond 9.5%, though each cell's own std (0.014) says nothing usable
    assert noise.compare(cells[("mg-wfbp", 2)], cells[("bsp-a2a", 2)], spread).sign == noise.ABOVE
    # 3.5 vs 3.15 is 10% apart: beyond 9.5%; a spread of 12% would leave it within noise
    assert noise.compare(cells[("mg-wfbp", 2)], cells[("ddp", 2)], 0.12).sign == noise.WITHIN


def test_single_repeats_with_no_spread_anywhere_decide_nothing():
    cells = cells_of([rec("bsp-a2a", 2, [3.0]), rec("bsp-ps", 2, [9.0])])
    assert noise.setup_spread(cells) is None
    d = noise.compare(cells[("bsp-a2a", 2)], cells[("bsp-ps", 2)], None)
    assert d.sign == noise.WITHIN and "no run-to-run spread" in d.text


def test_a_published_cell_counts_the_widest_spread_its_std_allows():
    assert noise.spread(published(100.0, 2.0)) == pytest.approx(2.0 * math.sqrt(8) / 100)
    assert noise.spread(tables.Cell(253.1, 0.0, None)) is None


# --- findings over several cells -----------------------------------------------------------------

def models_for(pairs):
    """{model: cells} from (model, workers, bsp-a2a repeats, bsp-ps repeats)."""
    out = {}
    for model, n, a, b in pairs:
        out.setdefault(model, []).extend([rec("bsp-a2a", n, a, model=model), rec("bsp-ps", n, b, model=model)])
    return {m: cells_of(rs) for m, rs in out.items()}


FAR_ABOVE = ([20.0, 20.5, 21.0], [10.0, 10.5, 11.0])
WITHIN = ([10.0, 10.5, 11.0], [10.1, 10.6, 11.1])


def verdict_of(models, number):
    """Finding `number` (0-based, CHECKS order) on these models."""
    return findings.check(models)[number]


def test_a_finding_over_12_cells_with_4_undecided_counts_8_decided():
    pairs = [(m, n, *(WITHIN if (m, n) in {("resnet50", 4), ("resnet50", 8), ("bert-base", 4), ("bert-large", 32)}
                      else FAR_ABOVE))
             for m in ("resnet50", "bert-base", "bert-large") for n in (4, 8, 16, 32)]
    v = verdict_of(models_for(pairs), 2)  # 3) BSP-A2A outperforms BSP-PS in all cases
    assert v.finding.startswith("3) Without pipelining")
    assert v.verdict == "holds"
    assert v.evidence.startswith("bsp-a2a > bsp-ps in 8/8 decided, 4 within noise: ")
    assert v.evidence.count("resnet50@") == 4 and "bert-large@32: 10.50 vs 10.60" in v.evidence


def test_one_decided_cell_against_the_claim_fails_all_cases():
    pairs = [("resnet50", 4, *FAR_ABOVE), ("resnet50", 8, *WITHIN), ("resnet50", 16, FAR_ABOVE[1], FAR_ABOVE[0])]
    v = verdict_of(models_for(pairs), 2)
    assert v.verdict == "does not hold"
    assert v.evidence.startswith("bsp-a2a > bsp-ps in 1/2 decided, 1 within noise")


def test_every_cell_within_noise_is_within_noise_not_a_verdict():
    v = verdict_of(models_for([("resnet50", 4, *WITHIN), ("resnet50", 32, *WITHIN)]), 2)
    assert v.verdict == "within noise"
    assert v.evidence.startswith("bsp-a2a > bsp-ps in 0/0 decided, 2 within noise")


def test_fastest_of_a_group_needs_every_rival_beaten_beyond_noise():
    base = [rec(m, 32, r, model="bert-large") for m, r in
            (("mg-wfbp", [40.0, 40.5, 41.0]), ("bsp-a2a", [30.0, 30.5, 31.0]), ("wfbp-a2a", [20.0, 20.5, 21.0]))]
    fastest = findings.CHECKS[5][1]  # 5) MG-WFBP is the fastest A2A method for BERT-Large
    assert fastest({"bert-large": cells_of(base)})[0] == "holds"
    close = base + [rec("bytescheduler-a2a", 32, [40.1, 40.6, 41.1], model="bert-large")]
    assert fastest({"bert-large": cells_of(close)})[0] == "within noise"
    above = base + [rec("bytescheduler-a2a", 32, [50.0, 50.5, 51.0], model="bert-large")]
    verdict, evidence = fastest({"bert-large": cells_of(above)})
    assert verdict == "does not hold" and "vs bytescheduler-a2a: 40.50 vs 50.50" in evidence


def test_best_speedups_of_two_models_compare_on_their_ratio():
    def model(name, best):
        return cells_of([rec("bsp-a2a", 1, [10.0, 10.1, 9.9], model=name), rec("mg-wfbp", 4, best, model=name)])
    scale = findings.CHECKS[0][1]  # 1) ResNet-50 reaches a higher best speedup than BERT-Base
    far = scale({"resnet50": model("resnet50", [38.0, 38.5, 39.0]), "bert-base": model("bert-base", [20.0, 20.5, 21.0])})
    assert far[0] == "holds" and "ratio 1.878 [" in far[1]
    near = scale({"resnet50": model("resnet50", [38.0, 38.5, 39.0]), "bert-base": model("bert-base", [38.1, 38.4, 39.0])})
    assert near[0] == "within noise"


# --- tables and the figure ------------------------------------------------------------------------

def test_tables_mark_repeats_and_cells_no_other_method_differs_from():
    records = [rec("bsp-a2a", 1, [10.0, 10.2]),
               rec("bsp-a2a", 2, [18.0, 18.2]), rec("wfbp-a2a", 2, [18.1, 18.3]), rec("mg-wfbp", 2, [19.0, 19.2])]
    setups = tables.ours(records)
    _, rows = tables.results_table(setups)
    by_method = {r[4]: r for r in rows}
    # spread 0.2 / 10.1 = 2%: bsp-a2a and wfbp-a2a are 0.5% apart, mg-wfbp 4.8% above bsp-a2a
    assert by_method["bsp-a2a"][-1] == "18.10 ± 0.14 (n=2)"           # differs from mg-wfbp
    assert by_method["wfbp-a2a"][-1] == "18.20 ± 0.14 (n=2)"          # 4.3% below mg-wfbp: decided
    only = tables.ours([rec("bsp-a2a", 1, [10.0, 10.2]), rec("bsp-a2a", 2, [18.0, 18.2]), rec("wfbp-a2a", 2, [18.1, 18.3])])
    _, rows = tables.results_table(only)
    assert [r[-1] for r in rows] == ["18.10 ± 0.14 (n=2) ≈", "18.20 ± 0.14 (n=2) ≈"]
    _, rows = tables.speedup_table(only)
    assert [r[-1] for r in rows] == ["1.79x (90%) (n=2) ≈", "1.80x (90%) (n=2) ≈"]


def test_tables_mark_cells_whose_machine_was_cpu_bound():
    """A cell whose runs kept at least 90% of their machine's cores busy (host_busy_cores over
    host_cores, averaged over every repeat of every record) says so; records without the field
    (older versions) get no mark."""
    records = [rec("bsp-a2a", 1, [10.0, 10.2], host_busy_cores=[1.9, 2.0], host_cores=2),
               rec("bsp-a2a", 2, [18.0, 18.2], host_busy_cores=[1.7, 1.8], host_cores=2),
               rec("wfbp-ps", 2, [9.0, 9.2], host_busy_cores=[1.9, 1.7], host_cores=2),
               rec("wfbp-ps", 2, [9.1], host_busy_cores=[1.9], host_cores=2),  # (1.9 + 1.7 + 1.9) / 3 / 2 = 92%
               rec("mg-wfbp", 2, [19.0, 19.2])]
    setups = tables.ours(records)
    (cells,) = setups.values()
    assert cells[("wfbp-ps", 2)].busy == pytest.approx(5.5 / 6) and cells[("bsp-a2a", 2)].busy == pytest.approx(0.875)
    _, rows = tables.results_table(setups)
    by_method = {r[4]: r for r in rows}
    assert by_method["bsp-a2a"][-2:] == ["10.10 ± 0.14 (n=2)", "18.10 ± 0.14 (n=2)"]  # one worker: never
    assert by_method["wfbp-ps"][-1].endswith(" (cpu)") and not by_method["mg-wfbp"][-1].endswith(" (cpu)")
    _, rows = tables.speedup_table(setups)
    assert {r[4]: r[-1] for r in rows}["wfbp-ps"].endswith(" (cpu)")
    assert "(cpu)" in tables.LEGEND


def test_tables_mark_cells_whose_machine_lost_its_cores_to_other_guests():
    """A cell one of whose repeats' machine lost at least metrics.DISTURBED_STEAL_SHARE of its
    cores to the hypervisor's other guests while measuring (host_steal_cores over host_cores, per
    block) says so at any worker count (a disturbed one-worker cell is the speedup's baseline),
    though the blocks' mean stays below it (steal comes in bursts); below it in every block, or
    without the field, no mark."""
    records = [rec("bsp-a2a", 1, [10.0, 10.2], host_steal_cores=[0.3, 0.2], host_cores=2),
               rec("bsp-a2a", 2, [18.0, 18.2], host_steal_cores=[0.01, 0.05], host_cores=2),
               rec("wfbp-ps", 2, [9.0, 9.2], host_steal_cores=[0.3, 0.25], host_cores=2),
               rec("wfbp-a2a", 2, [9.0, 9.2, 9.1, 9.3], host_steal_cores=[0.0, 0.0, 0.0, 0.22], host_cores=2),
               rec("mg-wfbp", 2, [19.0, 19.2])]
    setups = tables.ours(records)
    (cells,) = setups.values()
    assert cells[("wfbp-ps", 2)].steal == pytest.approx(0.15) and cells[("mg-wfbp", 2)].steal is None
    _, rows = tables.results_table(setups)
    by_method = {r[4]: r for r in rows}
    assert by_method["bsp-a2a"][-2].endswith(" (steal)") and not by_method["bsp-a2a"][-1].endswith(" (steal)")
    assert by_method["wfbp-ps"][-1].endswith(" (steal)") and not by_method["mg-wfbp"][-1].endswith(" (steal)")
    assert by_method["wfbp-a2a"][-1].endswith(" (steal)")  # one repeat of four: 11%, a mean of 3%
    assert "(steal)" in tables.LEGEND and "10%" in tables.LEGEND


def test_figure_label_names_the_best_method_and_its_interval():
    cells = cells_of([rec("bsp-a2a", 1, [10.0] * 5), rec("mg-wfbp", 4, [38.0, 39.0, 40.0, 41.0, 42.0]),
                      rec("bsp-a2a", 4, [20.0] * 5)])
    # mean 40, s = 1.5811, t(0.975, 4) * s / sqrt(5) = 1.9632; over the one-worker 10 samples/s
    assert figures.best_speedup_label(cells, 4, 10.0) == "mg-wfbp\n4.00x [3.80, 4.20]"
    cells[("wfbp-a2a", 4)] = tables.cell_of([38.9, 39.4, 39.9, 40.4, 40.9])
    assert figures.best_speedup_label(cells, 4, 10.0) == "mg-wfbp (≈ 1 other)\n4.00x [3.80, 4.20]"
    two = cells_of([rec("bsp-a2a", 1, [10.0, 10.4]), rec("mg-wfbp", 4, [38.0, 42.0])])
    assert figures.best_speedup_label(two, 4, 10.2) == "mg-wfbp\n3.92x (n=2, spread 10%)"


# --- goals and the benchmark ratio printer ---------------------------------------------------------

def test_goal_is_met_missed_or_not_resolved():
    assert noise.goal(0.90, 0.98, upper=1.0) == "met"
    assert noise.goal(1.02, 1.10, upper=1.0) == "missed"
    assert noise.goal(0.95, 1.05, upper=1.0) == "not resolved at this noise"
    assert noise.goal(0.97, 1.04, 0.95, 1.05) == "met"
    assert noise.goal(0.90, 0.94, 0.95, 1.05) == "missed"


def bench_rounds(per_round_ratio, model="resnet50"):
    """Rounds where ddp runs at 10 samples/s and mg-wfbp takes `ratio` times its iteration time."""
    return [[rec("ddp", 2, [10.0], model=model), rec("mg-wfbp", 2, [10.0 / r], model=model)] for r in per_round_ratio]


GOAL = (ratios.Goal("resnet50", "mg-wfbp", upper=1.00),)


def test_ratio_printer_shows_the_bootstrap_interval():
    # With 3 rounds, a resampled median is the smallest with probability 7/27 (two or three draws
    # of it) and likewise the largest, so the 2.5% and 97.5% points are the range: [0.80, 0.95].
    text = ratios.table(bench_rounds([0.80, 0.90, 0.95]), ["resnet50"], ["ddp", "mg-wfbp"], "ddp", GOAL)
    lines = text.splitlines()
    assert lines[0] == "| model | ddp | mg-wfbp |"
    assert lines[2] == "| resnet50 | 1.00 [1.00, 1.00] (10.00/s) | 0.90 [0.80, 0.95] (11.11/s) |"
    # every round below 1.00, yet three rounds cannot tell a median from 1.00 at 95%
    assert lines[3] == ("goal mg-wfbp / ddp <= 1.00 on resnet50: 0.90 [0.80, 0.95]: "
                        "not resolved at this noise (3 rounds; a median needs 6)")


@pytest.mark.parametrize("per_round, verdict", [
    ([0.90] * 6, "met"),
    ([1.10] * 6, "missed"),
    ([0.90, 1.10] * 3, "not resolved at this noise"),
])
def test_ratio_goal_from_six_rounds(per_round, verdict):
    text = ratios.table(bench_rounds(per_round), ["resnet50"], ["ddp", "mg-wfbp"], "ddp", GOAL)
    assert text.splitlines()[-1].endswith(f": {verdict}")


def test_ratio_pairs_runs_of_the_same_round_only(tmp_path):
    import json

    for r, rnd in enumerate(bench_rounds([0.5, 2.0])):
        d = ratios.round_dir(tmp_path, r)
        d.mkdir(parents=True)
        (d / "runs.jsonl").write_text("\n".join(json.dumps(x) for x in rnd) + "\n")
    rounds = ratios.load_rounds(tmp_path)
    r = ratios.ratio(rounds, "resnet50", "mg-wfbp", "ddp")
    assert r.per_round == (0.5, 2.0)
    assert ratios.ratio(rounds, "bert-base", "mg-wfbp", "ddp") is None
