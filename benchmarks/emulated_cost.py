"""What the emulated cluster costs on this machine: per-iteration compute (forward + backward, from
rank 0's trace) and iteration time, with and without the emulated network, the wire unshaped.

Each worker count runs bsp-a2a twice, interleaved per round: launcher=local (every rank in this
host's namespace, loopback) and launcher=emulated with link=none (a host per worker, veth and
bridge, no tc). Compute that grows on the emulated cluster is what namespaces, veths and the
bridge take from the CPUs; where compute per iteration itself grows with the worker count, the
cores, not the link, set the pace (2 cores here: see the README on which workers and rates keep
the CPU from dominating).

    python benchmarks/emulated_cost.py [--model tiny-resnet] [--workers 1,2,4] [--rounds 2] (root)
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from ddlbench.analysis.records import load
from ddlbench.trace import load as load_trace

SETUPS = {"local": ["launcher=local"], "emulated, link=none": ["launcher=emulated", "launcher.link=none", "launcher.nodes=4"]}


def compute_ms(trace_path: str) -> float:
    """Median over iterations of rank 0's forward + backward time, in ms."""
    per_iter = defaultdict(float)
    for e in load_trace(trace_path):
        if e["cat"] in ("forward", "backward"):
            per_iter[e["args"]["iter"]] += e["dur"] / 1e3
    return statistics.median(per_iter.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-resnet")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--results", default="results/bench/emulated-cost")
    args = ap.parse_args()
    results = Path(args.results) / time.strftime("%Y%m%dT%H%M%S")
    t0 = time.monotonic()
    for r in range(args.rounds):
        for w in map(int, args.workers.split(",")):
            for name, over in (list(SETUPS.items())[::1 if r % 2 == 0 else -1]):
                out = results / name.split(",")[0]
                print(f"[bench] round {r + 1}/{args.rounds} {name} x{w}", flush=True)
                subprocess.run([sys.executable, "-m", "ddlbench", "method=bsp-a2a", f"model={args.model}", f"workers={w}",
                                "trace=true", "profile.repeats=1", "profile.measured_iters=10", *over,
                                f"results_dir={out}"], check=True, stdout=subprocess.DEVNULL)
    rows = defaultdict(lambda: {"compute": [], "iter": []})
    for name in SETUPS:
        for rec in load([results / name.split(",")[0]]).records:
            rows[(rec["workers"], name)]["compute"].append(compute_ms(rec["trace"][0]))
            rows[(rec["workers"], name)]["iter"].append(1e3 * statistics.median(rec["iter_times_s"]))
    print(f"\nbsp-a2a {args.model}, medians over {args.rounds} round(s) (wall {time.monotonic() - t0:.0f} s):")
    print("| workers | setup | compute ms/iter (fwd+bwd, rank 0) | iteration ms |\n|---|---|---|---|")
    for (w, name), v in sorted(rows.items()):
        print(f"| {w} | {name} | {statistics.median(v['compute']):.1f} | {statistics.median(v['iter']):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
