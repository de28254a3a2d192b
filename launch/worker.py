"""Worker entry point, started once per rank by a launcher (torchrun, mpirun, srun).

Reads the resolved config from the run directory, measures with the one driver, and leaves:
rank 0's `result.json`, each rank's trace when asked, and on failure `error-rank<R>.json` with
the reason, which the launcher turns into the failed record. A rank terminated mid-run (a launcher
stopping the job because a peer failed or hung) leaves `stacks-rank<R>.txt`: every thread's
Python stack at that moment, which says where it was waiting.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from ddlbench import hostcpu
from ddlbench.launch import pids


def rank_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun, Slurm or MPI environments."""
    env = os.environ
    for r, w, lr in (("RANK", "WORLD_SIZE", "LOCAL_RANK"), ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK"),
                     ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                     ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if r in env and w in env:
            return int(env[r]), int(env[w]), int(env.get(lr, 0))
    return 0, 1, 0


def stacks_on_sigterm(path: Path):
    """On SIGTERM, write every thread's Python stack to `path`, then die of the signal as
    before (the default action). Returns the open file (removed after a clean finish)."""
    f = open(path, "w")
    faulthandler.register(signal.SIGTERM, file=f, all_threads=True, chain=True)
    return f


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)


def main(run_dir: str) -> None:
    run_dir = Path(run_dir)
    rank, world, local_rank = rank_env()
    # ranks sharing this machine's cores: each bound to its own, before any thread starts
    cores = hostcpu.pin_rank(rank, world)
    pids.die_with_parent()  # a SIGKILLed torchrun (or mpirun proxy) takes its ranks along
    pids.write(run_dir, rank)
    stacks = stacks_on_sigterm(run_dir / f"stacks-rank{rank}.txt")
    try:
        run(run_dir, rank, world, local_rank, cores)
    except BaseException as exc:  # the launcher reads this to say why the run failed
        write_json(run_dir / f"error-rank{rank}.json", {
            "rank": rank, "time": time.time(), "type": type(exc).__name__,
            "message": " ".join(str(exc).split())[:500], "traceback": traceback.format_exc(),
        })
        raise
    faulthandler.unregister(signal.SIGTERM)
    stacks.close()
    os.unlink(stacks.name)
    # Done: results are on disk and the process group is closed. Skip the C++ static
    # destructors: with torch 2.13 on Gloo the rank that exits first sometimes aborts there
    # ("terminate called without an active exception"), turning a finished run into a failure.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(run_dir: Path, rank: int, world: int, local_rank: int, cores: list[int] | None = None) -> None:
    """Ranks 0..W-1 are workers; ranks W..W+S-1 are parameter servers (PS methods only)."""
    from ddlbench import driver, methods, models
    from ddlbench.config import workers_per_node
    from ddlbench.trace import NullTracer, Tracer

    cfg = OmegaConf.load(run_dir / "config.yaml")
    W, S = cfg.workers, cfg.servers
    if world != W + S:
        raise RuntimeError(f"launched {world} processes for workers={W} + servers={S}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    is_server = rank >= W
    device = torch.device("cpu")
    if cfg.device == "cuda" and not is_server:  # launcher.share_gpu (test-only): ranks take turns on the GPUs
        device = torch.device("cuda", local_rank % torch.cuda.device_count() if cfg.launcher.get("share_gpu") else local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    engine = cfg.engine.name
    if engine == "horovod":  # Horovod's ranks, plus a Gloo group for control messages
        from ddlbench.engines import init_horovod

        rank, world, local_rank = init_horovod(cfg.comm_timeout_s)
    else:
        from ddlbench.engines import init_process_group

        backend = cfg.backend if S == 0 or cfg.backend == "gloo" else f"cpu:gloo,cuda:{cfg.backend}"
        init_process_group(backend, rank, world, cfg.startup_timeout_s, cfg.comm_timeout_s)
    try:
        # Workers' collectives run in their own group so servers never take part in them.
        group = dist.new_group(list(range(W))) if S else None
        # Control messages go over Gloo on every device (NCCL takes only CUDA tensors).
        control = methods.control_group(W)
        # Start-up has its own bound: every rank meets here once its model is built, under
        # `startup_timeout_s`, so a server (or a fast worker) never waits out the much shorter
        # communication timeout while a peer builds BERT-Large.
        startup = dist.new_group(backend="gloo", timeout=timedelta(seconds=cfg.startup_timeout_s))
        # The run's end (gathering fingerprints, hosts and traces; the last barrier) is a control
        # message too: Gloo, whatever the device, under the communication timeout.
        ending = dist.new_group(backend="gloo", timeout=timedelta(seconds=cfg.comm_timeout_s))
        # PS methods: who pushes, and each machine's groups, made on every rank in one order.
        ps = methods.ps_setup(cfg.method, W, S, workers_per_node(cfg), cfg.comm_timeout_s, cfg.startup_timeout_s,
                              startup) if S else None
        # Every group exists now, each with its Gloo loop thread: under the launcher's policy where
        # it asks for one (hosts sharing this machine's cores, hostcpu.settle_gloo_loops).
        gloo_loops = hostcpu.settle_gloo_loops()
        tracer = Tracer(rank) if cfg.trace else NullTracer()
        result, fp = None, None
        if is_server:
            dist.barrier(group=startup)
            server_stats = methods.ps_engine(cfg.method).serve(rank, ps, tracer)
            model = None
        else:
            workload = models.build(cfg.model, cfg.local_batch, cfg.seed)
            workload.model.to(device)
            dist.barrier(group=startup)
            extra = {"workers": W, "servers": S, "comm_timeout_s": cfg.comm_timeout_s, "optimizer": cfg.optimizer,
                     "engine": engine, "startup_timeout_s": cfg.startup_timeout_s, "ps": ps}
            ctx = methods.Context(rank=rank, world=W, device=device, tracer=tracer, workload=workload,
                                  seed=cfg.seed, group=group, control=control, extra=extra)
            sync = methods.build(cfg.method, ctx)
            label = f"{cfg.method.name} {cfg.model.name} x{W}" + (f" +{S} servers" if S else "")
            progress = driver.Progress(label, cfg, W * cfg.local_batch) if rank == 0 else None
            result = driver.measure(cfg, ctx, workload, sync, progress, driver.heartbeat(pids.path(run_dir, rank)))
            sync.close()
            model = workload.model
            fp = driver.fingerprint(model)
            server_stats = None
        gathered = [None] * world
        trace_path = str(tracer.save(run_dir / f"trace-rank{rank}.json")) if cfg.trace else None
        dist.all_gather_object(gathered, (fp, socket.gethostname(), trace_path, server_stats, cores), group=ending)
        fps = [g[0] for g in gathered[:W]]
        if rank == 0:
            if cfg.save_params:
                torch.save({n: p.detach().cpu() for n, p in model.named_parameters()}, run_dir / "params.pt")
            write_json(run_dir / "result.json", {
                **result,
                **sync.describe(),
                **getattr(getattr(sync, "transport", None), "describe", dict)(),  # PS: topology, pushers
                "param_fingerprint": fp,
                "params_consistent": all(_close(f, fp) for f in fps),
                "hosts": sorted({g[1] for g in gathered}),
                "rank_hosts": [g[1] for g in gathered],  # rank r's host, servers after workers
                "trace": [g[2] for g in gathered] if cfg.trace else None,
                "server_stats": [g[3] for g in gathered[W:]] or None,
                "world": world,
                "gloo_loops": gloo_loops,
                "rank_cores": [g[4] for g in gathered] if cores is not None else None,  # launcher.pin_ranks
            })
        # Tear down only when every rank is done: a rank that closes its Gloo connections
        # while a peer still finishes the last collective makes that peer abort at exit.
        dist.barrier(group=ending)
    finally:
        dist.destroy_process_group()


def _close(a: dict, b: dict, rel: float = 1e-9) -> bool:
    return all(abs(a[k] - b[k]) <= rel * max(1.0, abs(b[k])) for k in b)


if __name__ == "__main__":
    main(sys.argv[1])
