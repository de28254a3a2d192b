"""The study's published throughput (Shi et al., IEEE Network 2020, Figure 4), as cells.

The project's copy lives in results/reference/ with its source; the model facts below are the
ones the study states (model intensity I, local batch). Each published mean and std is over the
study's five runs, so a cell with a std counts n = 5 repeats; the one-worker rows give no std
(n unknown: no usable std).
"""
from __future__ import annotations

import csv
from pathlib import Path

from .tables import Cell, Setup

DEFAULT_CSV = Path(__file__).resolve().parents[1] / "results" / "reference" / "shi2020_100gbib_throughput.csv"
STUDY_RUNS = 5  # "five independent runs, mean and standard deviation"
NETWORKS = {"100gbib_rdma": "100Gb/s IB (RDMA), 8x4 RTX2080Ti"}
# Model intensity I = C / D as the study reports it, and its local batches.
STUDY_MODELS = {
    "resnet50": {"intensity": 470, "local_batch": 64},
    "bert-base": {"intensity": 249, "local_batch": 64},
    "bert-large": {"intensity": 248, "local_batch": 8},
}


def load(path: Path = DEFAULT_CSV) -> dict[Setup, dict]:
    out: dict[Setup, dict] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            setup = Setup("published", row["model"].replace("_", "-"), int(row["local_batch"]),
                          NETWORKS.get(row["network"], row["network"]))
            std, n = (float(row["std"]), STUDY_RUNS) if row["std"] else (0.0, None)
            method = row["method"].replace("_", "-")
            out.setdefault(setup, {})[(method, int(row["workers"]))] = Cell(float(row["samples_per_sec"]), std, n)
    return out
