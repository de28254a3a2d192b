"""Gloo's spinning socket loop on shared cores, and what lowering its priority does.

Gloo's TCP loop thread (`gloo_tcp_loop`) spins on a readable socket while another thread holds
that socket's pair lock (ddlbench/hostcpu.py says why). Where ranks share a machine's cores (local
runs, the emulated cluster, commbench on them), the local and emulated launchers and commbench
therefore put those threads under SCHED_IDLE (`launcher.gloo_loop_policy`, `--gloo-loop-policy`).

This prints, for W ranks of one torchrun on this host, rounds that alternate a job with the loop
threads left alone and one with them under SCHED_IDLE, each job timing:
- `one`: a 4 KB fp32 all-reduce, one at a time (median, p90 and mean, ms);
- `burst`: 29 all-reduces of 4 KB launched at once, then waited, as a per-tensor WFBP iteration
  sends tiny-resnet's gradients (mean ms per burst);
- the loop threads' CPU per burst (ms, /proc).
and the ratio of each to the same round's job with the loops left alone (median over rounds).

    python benchmarks/gloo_loop_spin.py [--workers 2,4] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_CALLS, BURSTS, BURST_TENSORS, NUMEL = 200, 40, 29, 1000


def job(out: str) -> None:
    """Runs under torchrun: every rank times the same calls, rank 0 writes its numbers."""
    import torch
    import torch.distributed as dist

    from ddlbench import hostcpu

    dist.init_process_group("gloo")
    loops = hostcpu.settle_gloo_loops()
    torch.set_num_threads(1)
    one = torch.ones(NUMEL)
    burst = [torch.ones(NUMEL) for _ in range(BURST_TENSORS)]
    for _ in range(5):
        dist.all_reduce(one)
    ones = []
    for _ in range(ONE_CALLS):
        t0 = time.perf_counter()
        dist.all_reduce(one)
        ones.append(time.perf_counter() - t0)
    cpu0 = hostcpu.thread_cpu_s().get(hostcpu.GLOO_LOOP_THREAD, 0.0)
    bursts = []
    for _ in range(BURSTS):
        dist.barrier()
        t0 = time.perf_counter()
        for w in [dist.all_reduce(t, async_op=True) for t in burst]:
            w.wait()
        bursts.append(time.perf_counter() - t0)
    loop_cpu = hostcpu.thread_cpu_s().get(hostcpu.GLOO_LOOP_THREAD, 0.0) - cpu0
    if dist.get_rank() == 0:
        ones.sort()
        Path(out).write_text(json.dumps({
            "one_p50_ms": 1e3 * ones[len(ones) // 2], "one_p90_ms": 1e3 * ones[int(0.9 * len(ones))],
            "one_mean_ms": 1e3 * statistics.fmean(ones), "burst_ms": 1e3 * statistics.fmean(bursts),
            "loop_cpu_ms_per_burst": 1e3 * loop_cpu / BURSTS, "loops": loops,
        }))
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # see launch/worker.py: skip torch's C++ teardown


def launch(workers: int, policy: str | None) -> dict:
    from ddlbench import hostcpu
    from ddlbench.launch.local import torchrun

    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/out.json"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop(hostcpu.GLOO_LOOP_POLICY_ENV, None)
        if policy is not None:
            env[hostcpu.GLOO_LOOP_POLICY_ENV] = policy
        cmd = torchrun(workers, [str(Path(__file__).resolve()), "--job", out])
        subprocess.run(cmd, env=env, check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(Path(out).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--job", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job:
        return job(a.job)
    keys = ("one_p50_ms", "one_p90_ms", "one_mean_ms", "burst_ms", "loop_cpu_ms_per_burst")
    print(f"Gloo all-reduces of {4 * NUMEL} B on this host ({os.cpu_count()} cores), the loop threads left "
          f"alone (-) or under SCHED_IDLE (idle); median over {a.rounds} alternating rounds, ratio = idle / left alone")
    print(f"| workers | loops | {' | '.join(keys)} |")
    print(f"|---|---|{'---|' * len(keys)}")
    for w in (int(x) for x in a.workers.split(",")):
        rounds = [(launch(w, None), launch(w, "idle")) for _ in range(a.rounds)]
        alone = {k: statistics.median(r[0][k] for r in rounds) for k in keys}
        low = {k: statistics.median(r[1][k] for r in rounds) for k in keys}
        ratio = {k: statistics.median(r[1][k] / r[0][k] if r[0][k] else float("nan") for r in rounds) for k in keys}
        print(f"| {w} | - | {' | '.join(f'{alone[k]:.2f}' for k in keys)} |")
        print(f"| {w} | idle | {' | '.join(f'{low[k]:.2f}' for k in keys)} |")
        print(f"| {w} | ratio | {' | '.join(f'{ratio[k]:.2f}' for k in keys)} |", flush=True)


if __name__ == "__main__":
    main()
