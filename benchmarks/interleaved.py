"""Interleaved rounds of ddlbench runs, shared by the side-by-side benchmarks: in each round,
every model runs every method once (one repeat), the methods in an order that rotates from
round to round so that none always goes first; round r's records go to RESULTS/round-<r>/
(read back by ddlbench.analysis.ratios, which prints the ratios and their intervals)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ddlbench.analysis import ratios


def run_rounds(results: Path, models: list[str], methods: list[str], rounds: int, overrides: list[str]) -> list[list[dict]]:
    for r in range(rounds):
        order = methods[r % len(methods):] + methods[:r % len(methods)]
        for model in models:
            for method in order:
                print(f"[bench] round {r + 1}/{rounds} {model} {method}", flush=True)
                subprocess.run([sys.executable, "-m", "ddlbench", f"method={method}", f"model={model}",
                                "profile.repeats=1", *overrides, f"results_dir={ratios.round_dir(results, r)}"],
                               check=True, stdout=subprocess.DEVNULL)
    return ratios.load_rounds(results)
