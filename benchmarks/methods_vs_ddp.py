"""Each method against PyTorch DDP, side by side in one invocation.

Interleaved rounds (benchmarks/interleaved.py): in each round every model runs ddp, bsp-a2a,
wfbp-a2a and mg-wfbp once, in an order that rotates, so machine noise hits every method alike.
Printed per method: the median over rounds of its iteration time divided by DDP's in the same
round (below 1.00: faster than DDP), with a bootstrap 95% interval, and the goal MG-WFBP / DDP
<= 1.00 on resnet50 as met, missed or not resolved at this noise (ddlbench.analysis.ratios).

    python benchmarks/methods_vs_ddp.py [--models tiny-resnet,resnet50] [--rounds 6] [--workers 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from interleaved import run_rounds

from ddlbench.analysis import ratios

METHODS = ["ddp", "bsp-a2a", "wfbp-a2a", "mg-wfbp"]
GOALS = (ratios.Goal("resnet50", "mg-wfbp", upper=1.00),)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-resnet,resnet50")
    ap.add_argument("--rounds", type=int, default=6, help="6 is the fewest that can resolve a goal at 95%%")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6, help="measured iterations per run")
    ap.add_argument("--results", default="results/bench")
    args = ap.parse_args()
    results = Path(args.results) / time.strftime("%Y%m%dT%H%M%S")
    models = args.models.split(",")
    t0 = time.monotonic()
    rounds = run_rounds(results, models, METHODS, args.rounds, [f"workers={args.workers}", "profile.warmup_iters=2",
                                                                   f"profile.measured_iters={args.iters}"])
    print(f"\niteration time / DDP's: median over {args.rounds} interleaved rounds [bootstrap 95%] (median samples/s), "
          f"{args.workers} workers, {args.iters} measured iterations per run (wall {time.monotonic() - t0:.0f} s)")
    print(ratios.table(rounds, models, METHODS, "ddp", GOALS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
