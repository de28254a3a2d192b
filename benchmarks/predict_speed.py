"""The predictor's full grid, timed on one core: 3 models x 8 methods x 4 worker counts x 3 networks
(issue 14: under 5 s). Profiles are built (or read from their cache) before the clock starts:
building a model on the meta device is a one-time cost per model and batch, printed apart.

    python benchmarks/predict_speed.py
"""
from __future__ import annotations

import time

from ddlbench.predict import cli, network, simulate

MODELS = ("resnet50", "bert-base", "bert-large")
WORKERS = (4, 8, 16, 32)
NETWORKS = ("10gbe", "100gbe", "100gbib")


def main() -> None:
    t0 = time.process_time()
    profiles = {m: cli.load_profile(m, cli.model_batch(m), None) for m in MODELS}
    clusters = {n: network.load(n) for n in NETWORKS}
    print(f"profiles and networks ready in {time.process_time() - t0:.2f} s CPU (one-time, cached per model)")
    opts = cli.study_opts()
    t0 = time.process_time()
    wall = time.perf_counter()
    n = 0
    for m in MODELS:
        for net in NETWORKS:
            for method in simulate.METHODS:
                for w in WORKERS:
                    simulate.simulate(method, profiles[m], clusters[net], w, opts)
                    n += 1
    cpu = time.process_time() - t0
    print(f"full grid: {n} predictions in {cpu:.2f} s CPU ({time.perf_counter() - wall:.2f} s wall), target < 5 s")
    # make predict's way: each prediction, and the pick's second look at it with communication
    # cli.COMM_UNCERTAINTY x the model's (one more simulation each; no explanations)
    t0 = time.process_time()
    for m in MODELS:
        for net in NETWORKS:
            cli.predict(m, list(WORKERS), clusters[net], simulate.METHODS, opts=opts, explain=False, prof=profiles[m])
    print(f"full grid with the picks (cli.predict): {time.process_time() - t0:.2f} s CPU")


if __name__ == "__main__":
    main()
