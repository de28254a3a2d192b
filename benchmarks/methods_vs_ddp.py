"""Each method against PyTorch DDP, side by side in one invocation.

For every model, rounds of (ddp, bsp-a2a, wfbp-a2a, mg-wfbp) runs are interleaved so that
machine noise hits every method alike; the ratio printed is a method's median measured
iteration time over all rounds divided by DDP's (below 1.00: faster than DDP).

    python benchmarks/methods_vs_ddp.py [--models tiny-resnet,resnet50] [--rounds 3] [--workers 2]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path


from ddlbench.analysis.records import load

METHODS = ("ddp", "bsp-a2a", "wfbp-a2a", "mg-wfbp")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-resnet,resnet50")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6, help="measured iterations per run")
    ap.add_argument("--results", default="results/bench")
    args = ap.parse_args()
    results = Path(args.results) / time.strftime("%Y%m%dT%H%M%S")
    t0 = time.monotonic()
    for model in args.models.split(","):
        for rnd in range(args.rounds):
            for method in METHODS:
                cmd = [sys.executable, "-m", "ddlbench", f"method={method}", f"model={model}",
                       f"workers={args.workers}", "profile.warmup_iters=2", f"profile.measured_iters={args.iters}",
                       "profile.repeats=1", f"results_dir={results}"]
                print(f"[bench] round {rnd + 1}/{args.rounds} {model} {method}", flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    recs = [r for r in load([results / "runs.jsonl"]).records if r["status"] == "ok"]
    print(f"\nmedian iteration time / DDP's, {args.workers} workers, {args.rounds} interleaved rounds "
          f"x {args.iters} measured iterations (wall {time.monotonic() - t0:.0f} s)")
    print(f"| model | {' | '.join(METHODS)} |\n|---|{'---|' * len(METHODS)}")
    for model in args.models.split(","):
        med = {m: statistics.median(t for r in recs if r["model"] == model and r["method"] == m for t in r["iter_times_s"])
               for m in METHODS}
        cells = [f"{med[m] / med['ddp']:.2f} ({med[m] * 1e3:.1f} ms)" for m in METHODS]
        print(f"| {model} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
