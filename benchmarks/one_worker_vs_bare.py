"""ddlbench's one-worker throughput against a bare PyTorch training loop of the same model and
batch, side by side in one invocation: what the harness itself costs (launcher, hooks, timing).

Both sides run the same workload (ddlbench.models.build: same model, same synthetic batch),
momentum SGD with the config's lr, one batch on the device reused (as the study's scripts do),
cudnn.benchmark on for CUDA, `--warmup` untimed iterations, then one block of `--iters`
iterations timed as one wall-clock interval that ends after the device has finished. A third
side, "bare, host waits": the same loop with the host waiting for the device after every
iteration, so that the next iteration's kernel launches no longer overlap the device's work: a
harness that waited for the device so would land near it. Each side runs in its own
process, in an order that rotates from round to round, so machine noise and warm caches hit
all alike.

Printed: each side's samples/s per round, the median over rounds of ddlbench / bare with a
bootstrap 95% interval (ddlbench.metrics.bootstrap_median_interval) and the goal "within 5% of
the bare loop" as met, missed or not resolved at this noise, and ddlbench / bare-with-waits.

    python benchmarks/one_worker_vs_bare.py [--model resnet50] [--batch 64] [--device cuda] [--rounds 6]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL = (0.95, 1.05)  # ddlbench / bare


def bare(model_name: str, batch: int, device: str, warmup: int, iters: int, wait: bool = False, seed: int = 0) -> float:
    """samples/s of a plain loop: forward, backward, SGD step on one reused batch; with `wait`,
    the host waits for the device at the end of every iteration."""
    import torch
    from omegaconf import OmegaConf

    from ddlbench import models

    cfg = OmegaConf.load(REPO / "conf" / "config.yaml")
    model_cfg = OmegaConf.load(REPO / "conf" / "model" / f"{model_name}.yaml")
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    w = models.build(model_cfg, batch, seed)
    model = w.model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum)
    data = w.make_batch(seed, 0, 0, dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        w.loss(model, data).backward()
        opt.step()
        if wait:
            sync()

    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    sync()
    return batch * iters / (time.perf_counter() - t0)


def ddlbench_run(model: str, batch: int, device: str, warmup: int, iters: int, results: Path) -> float:
    subprocess.run([sys.executable, "-m", "ddlbench", "method=bsp-a2a", "workers=1", f"model={model}",
                    f"local_batch={batch}", f"device={device}", f"profile.warmup_iters={warmup}",
                    f"profile.measured_iters={iters}", "profile.repeats=1", "profile.distinct_batches=1",
                    f"results_dir={results}"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    from ddlbench.analysis.records import load

    (rec,) = load([results]).records
    assert rec["status"] == "ok", rec.get("error")
    return rec["samples_per_sec"]


def bare_run(model: str, batch: int, device: str, warmup: int, iters: int, wait: bool) -> float:
    out = subprocess.run([sys.executable, __file__, "--bare", *(["--wait"] if wait else []), f"--model={model}", f"--batch={batch}",
                          f"--device={device}", f"--warmup={warmup}", f"--iters={iters}"],
                         check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_sec"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=6, help="6 is the fewest that can resolve the goal at 95%%")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--bare", action="store_true", help="run one bare loop and print its samples/s as JSON")
    ap.add_argument("--wait", action="store_true", help="with --bare: the host waits for the device every iteration")
    args = ap.parse_args()
    if args.bare:
        print(json.dumps({"samples_per_sec": bare(args.model, args.batch, args.device, args.warmup, args.iters, args.wait)}))
        return 0
    from ddlbench.metrics import bootstrap_median_interval

    t0 = time.monotonic()
    ratios, to_waits = [], []
    names = ["bare", "bare, host waits", "ddlbench"]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            sides = {}
            for side in names[r % 3:] + names[:r % 3]:
                if side == "ddlbench":
                    sides[side] = ddlbench_run(args.model, args.batch, args.device, args.warmup, args.iters,
                                               Path(tmp) / f"round-{r}")
                else:
                    sides[side] = bare_run(args.model, args.batch, args.device, args.warmup, args.iters,
                                           wait=side != "bare")
            ratios.append(sides["ddlbench"] / sides["bare"])
            to_waits.append(sides["ddlbench"] / sides["bare, host waits"])
            print(f"[bench] round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v:.1f}" for k, v in sides.items())
                  + f" samples/s; ddlbench / bare {ratios[-1]:.3f}, / bare with waits {to_waits[-1]:.3f}", flush=True)
    lo, hi = bootstrap_median_interval(ratios)
    wlo, whi = bootstrap_median_interval(to_waits)
    verdict = ("met" if GOAL[0] <= lo and hi <= GOAL[1] else
               "missed" if hi < GOAL[0] or lo > GOAL[1] else "not resolved at this noise")
    print(f"\n{args.model} batch {args.batch} on {args.device}, {args.iters} timed iterations after {args.warmup} "
          f"warm-up, {args.rounds} interleaved rounds (wall {time.monotonic() - t0:.0f} s)")
    print(f"ddlbench / bare samples/s: median {statistics.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]; "
          f"goal {GOAL[0]:.2f}-{GOAL[1]:.2f}: {verdict}")
    print(f"ddlbench / bare with the host waiting every iteration: median {statistics.median(to_waits):.3f} "
          f"[{wlo:.3f}, {whi:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
