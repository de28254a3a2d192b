"""analysis.ps_rounds: a PS run's rounds read back from traces the runtime's Tracer writes."""
from __future__ import annotations

import pytest

from ddlbench.analysis import ps_rounds
from ddlbench.trace import Tracer

T0 = 1_000_000.0  # us


def write_run(d, iterations=8, period_ms=100.0, push_ms=(10.0, 30.0), landed_ms=(20.0, 45.0)):
    """Two workers (ranks 0, 1) and one server (rank 2), one partition (key 0): worker w's push
    starts at the iteration's start, arrives push_ms[w] later; the replies leave at the later
    arrival and land landed_ms[w] after (worker 1's first: the order is by landing, not rank)."""
    workers, server = [Tracer(0), Tracer(1)], Tracer(2)
    for it in range(iterations):
        start = T0 + it * period_ms * 1e3
        served = start + max(push_ms) * 1e3
        for w, tr in enumerate(workers):
            land = served + landed_ms[1 - w] * 1e3
            tr.complete("push_pull", "comm", start, land, {"iter": it, "partition": 0, "bytes": 4}, lane="comm")
            server.complete("push_received", "server", start + push_ms[w] * 1e3, start + push_ms[w] * 1e3,
                            {"iter": it, "key": 0, "worker": w, "bytes": 4}, lane="server")
        server.complete("pull_served", "server", served, served + 50, {"iter": it, "key": 0, "workers": 2},
                        lane="server")
    for r, tr in enumerate([*workers, server]):
        tr.save(d / f"trace-rank{r}.json")


def test_rounds_give_each_push_and_reply_by_order_and_the_period(tmp_path):
    write_run(tmp_path)
    s = ps_rounds.summary(ps_rounds.rounds(tmp_path), skip=2)
    assert s["rounds"] == 6 and s["pushers"] == 2
    assert s["push_ms"] == pytest.approx([10.0, 30.0])
    assert s["landed_ms"] == pytest.approx([20.0, 45.0])
    assert s["period_ms"] == pytest.approx(100.0)


def test_the_cli_prints_the_medians_and_names_a_run_without_traces(tmp_path, capsys):
    write_run(tmp_path)
    assert ps_rounds.main([str(tmp_path), "--skip", "1", "--rounds"]) == 0
    out = capsys.readouterr().out
    assert "7 rounds, 2 pushers" in out and "20.0, 45.0" in out and out.count("iter ") == 7
    empty = tmp_path / "untraced"
    empty.mkdir()
    assert ps_rounds.main([str(empty)]) == 2
    assert "trace=true" in capsys.readouterr().err
