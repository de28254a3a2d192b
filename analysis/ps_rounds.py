"""Where a PS run's rounds go, read from its traces (a run with `trace=true`).

A round is one partition's push-pull in one iteration: each pusher starts its push (the
start of its `push_pull` span), the partition's server has it (`push_received`), the sum's
reply leaves (`pull_served`), and each pusher has the sum back (the end of its `push_pull`).
`--rounds` prints each round from its first arrival at the server; over the rounds
after `--skip` warm-up iterations, the medians by order:

* `push_ms`: the k-th push to arrive, from its start to its arrival;
* `landed_ms`: the k-th reply to land, from the moment the replies left;
* `period_ms`: from one iteration's reply to the next one's, per partition.

This is how the predictor's picture of a server's link (`predict.simulate.PSMachines`:
pushes one after another into the server, replies out of it at the landing profile make
commbench measured, else one after another, the first of each after an idle spell on the tbf
bucket's tokens) is checked against a run. On the emulated
cluster at 100 Mbit/s (tiny-resnet's one 312 KB partition, one at the rate: 25 ms; on a full
bucket: 15 ms), the replies to 2 workers landed 22 and 43 ms after they left, one after
another as modelled. Those to 4 workers landed 30, 67, 89 and 95 ms after: the last two
together, where one after another has them 25 ms apart (commbench's landing rounds at
256 KiB and 4 workers give the same: the last two 0.14 of a reply's time apart). Those two workers then push at once, and
the pushes arrive 17, 19, 39 and 41 ms after they start: the last two share the server's link.

    python -m ddlbench.analysis.ps_rounds RUN_DIR [--skip 5] [--rounds]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ddlbench import trace


@dataclass
class Round:
    iteration: int
    key: int
    starts_us: dict[int, float] = field(default_factory=dict)    # pusher rank -> its push started
    arrivals_us: dict[int, float] = field(default_factory=dict)  # pusher rank -> the server had it
    served_us: float | None = None                                # the sum's replies left
    landed_us: dict[int, float] = field(default_factory=dict)    # pusher rank -> it had the sum

    @property
    def complete(self) -> bool:
        return (self.served_us is not None and bool(self.arrivals_us) and bool(self.landed_us)
                and set(self.arrivals_us) <= set(self.starts_us))

    def push_ms(self) -> list[float]:
        """Each push's time from its start to its arrival, in the order the pushes arrived."""
        return [(t - self.starts_us[w]) / 1e3 for w, t in sorted(self.arrivals_us.items(), key=lambda kv: kv[1])]

    def landed_ms(self) -> list[float]:
        """Each reply's time from leaving the server to landing, in the order they landed."""
        return sorted((t - self.served_us) / 1e3 for t in self.landed_us.values())


def rounds(run_dir: Path) -> list[Round]:
    """Every round the run's traces hold, by iteration then partition."""
    files = sorted(Path(run_dir).glob("trace-rank*.json"))
    if not files:
        raise FileNotFoundError(f"{run_dir}: no trace-rank*.json (run it with trace=true)")
    by_key: dict[tuple[int, int], Round] = {}

    def get(it: int, key: int) -> Round:
        return by_key.setdefault((it, key), Round(it, key))
    for f in files:
        for e in trace.load(f):
            if e.get("ph") != "X":
                continue
            a, name = e.get("args", {}), e.get("name")
            if name == "push_pull" and "partition" in a:
                r = get(a["iter"], a["partition"])
                r.starts_us[e["pid"]] = e["ts"]
                r.landed_us[e["pid"]] = e["ts"] + e["dur"]
            elif name == "push_received":
                get(a["iter"], a["key"]).arrivals_us[a["worker"]] = e["ts"] + e["dur"]
            elif name == "pull_served":
                get(a["iter"], a["key"]).served_us = e["ts"]
    return [by_key[k] for k in sorted(by_key)]


def _median_by_order(rows: list[list[float]]) -> list[float]:
    n = min((len(r) for r in rows), default=0)
    return [statistics.median(r[k] for r in rows) for k in range(n)]


def summary(all_rounds: list[Round], skip: int = 5) -> dict:
    """Medians by arrival or landing order over the complete rounds after `skip` iterations."""
    kept = [r for r in all_rounds if r.complete and r.iteration >= skip]
    if not kept:
        raise ValueError(f"no complete round after the first {skip} iterations")
    periods = []
    served = {}
    for r in kept:
        before = served.get(r.key)
        if before is not None and before[0] == r.iteration - 1:
            periods.append((r.served_us - before[1]) / 1e3)
        served[r.key] = (r.iteration, r.served_us)
    return {"rounds": len(kept), "pushers": len(kept[0].landed_us),
            "push_ms": _median_by_order([r.push_ms() for r in kept]),
            "landed_ms": _median_by_order([r.landed_ms() for r in kept]),
            "period_ms": statistics.median(periods) if periods else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddlbench.analysis.ps_rounds", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a PS run's directory (results/runs/<run>), traced")
    ap.add_argument("--skip", type=int, default=5, help="warm-up iterations left out (default 5)")
    ap.add_argument("--rounds", action="store_true", help="also print every round")
    args = ap.parse_args(argv)
    try:
        found = rounds(args.run_dir)
        s = summary(found, args.skip)
    except (FileNotFoundError, ValueError) as exc:
        print(f"ps_rounds: error: {exc}", file=sys.stderr)
        return 2
    fmt = lambda xs: ", ".join(f"{x:.1f}" for x in xs)  # noqa: E731
    if args.rounds:
        for r in found:
            if r.complete and r.iteration >= args.skip:
                t0 = min(r.arrivals_us.values())
                print(f"iter {r.iteration} key {r.key}: pushes started [{fmt((t - t0) / 1e3 for t in sorted(r.starts_us.values()))}] "
                      f"arrived [{fmt(sorted((t - t0) / 1e3 for t in r.arrivals_us.values()))}] replies left "
                      f"{(r.served_us - t0) / 1e3:.1f}, landed [{fmt((t - t0) / 1e3 for t in sorted(r.landed_us.values()))}] ms")
    print(f"{s['rounds']} rounds, {s['pushers']} pushers each (medians, ms)")
    print(f"  push, start to arrival, by arrival order:  {fmt(s['push_ms'])}")
    print(f"  replies landed after leaving, by order:     {fmt(s['landed_ms'])}")
    if s["period_ms"] is not None:
        print(f"  period (reply to the next iteration's):    {s['period_ms']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
