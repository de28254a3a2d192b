"""Launchers start the workers (and servers) of one run; measurement lives in the workers.

`run(cfg)` prepares the run directory, starts the configured launcher, and appends the run
record, ok or failed, to `<results_dir>/runs.jsonl`.
"""
from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from ddlbench import record
from ddlbench.config import threads_per_worker


def worker_args(run_dir: Path) -> list[str]:
    """`-m ddlbench.launch.worker RUN_DIR`: what every rank runs, after torchrun or a Python."""
    return ["-m", "ddlbench.launch.worker", str(run_dir)]


def worker_command(run_dir: Path) -> list[str]:
    """A rank as a Python process of its own (under horovodrun or mpirun)."""
    return [sys.executable, *worker_args(run_dir)]


def run(cfg) -> dict:
    results = Path(cfg.results_dir)
    runs_file = results / "runs.jsonl"
    rec = base_record(cfg)
    if cfg.skip_recorded and already_recorded(runs_file, rec):
        print(f"[ddlbench] skipped: an ok record of {cfg.method.name} {cfg.model.name} x{cfg.workers} exists in {runs_file}")
        return {**rec, "status": "skipped"}
    stamp = rec["started_at"].replace(":", "").replace("-", "")[:15]
    run_dir = results / "runs" / f"{stamp}-{cfg.method.name}-{cfg.model.name}-w{cfg.workers}-{uuid.uuid4().hex[:6]}"
    rec["run_dir"] = str(run_dir)
    if cfg.launcher.name == "slurm":
        from . import slurm

        if cfg.launcher.dry_run:  # print the batch script, create nothing
            print(slurm.batch_script(cfg, rec, run_dir), end="")
            return {**rec, "status": "dry-run"}
        _prepare(cfg, run_dir)
        rec["env"] = record.env_knobs(run_env(cfg, local_procs=max(slurm.plan(cfg))))
        return slurm.submit(cfg, rec, run_dir, runs_file)
    _prepare(cfg, run_dir)
    env = run_env(cfg)
    rec["env"] = record.env_knobs(env)

    from . import local

    cmd = command(cfg, run_dir, env)
    rc, reason = local.start(cfg, run_dir, env, cmd)
    finish(cfg, rec, run_dir, rc, reason, runs_file)
    return rec


def _prepare(cfg, run_dir: Path) -> None:
    run_dir.mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)


def run_env(cfg, local_procs: int | None = None) -> dict:
    """The ranks' environment: OpenMP threads shared out over this host's processes, and the
    engine's knobs (Horovod's fusion off for the methods)."""
    threads = threads_per_worker(cfg) if local_procs is None else max(1, (os.cpu_count() or 1) // local_procs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    if cfg.engine.name == "horovod":
        from ddlbench.engines import horovod_env

        env.update(horovod_env(cfg.engine, cfg.method))
    return env


def command(cfg, run_dir: Path, env: dict) -> list[str]:
    """The command line that starts every rank of the run, by launcher."""
    import importlib

    module = importlib.import_module(f"{__name__}.{LAUNCHERS[cfg.launcher.name]}")
    return module.command(cfg, run_dir, env)


# launcher name -> module with `command(cfg, run_dir, env)` (slurm submits instead; see slurm.py)
LAUNCHERS = {"local": "local", "mpirun": "mpirun", "horovodrun": "horovodrun"}


def finish(cfg, rec: dict, run_dir: Path, rc: int, reason: str | None, runs_file: Path) -> None:
    """Turn what the ranks left in `run_dir` into the run record and append it."""
    result_file = run_dir / "result.json"
    if rc == 0 and result_file.exists():
        result = json.loads(result_file.read_text())
        rec.update({k: v for k, v in result.items() if k != "world"}, status="ok", error=None)
    else:
        rec.update(status="failed", error=reason or "no result was written", hosts=[os.uname().nodename])
    record.append(runs_file, rec)
    _say(rec, runs_file)


def base_record(cfg) -> dict:
    p = cfg.profile
    rec = dict.fromkeys(record.FIELDS)
    rec.update(
        method=cfg.method.name, model=cfg.model.name, workers=cfg.workers, servers=cfg.servers,
        engine=cfg.engine.name, backend=cfg.backend, device=cfg.device, local_batch=cfg.local_batch,
        warmup_iters=p.warmup_iters, measured_iters=p.measured_iters, repeats=p.repeats,
        config=OmegaConf.to_container(cfg, resolve=True), versions=record.versions(),
        git_commit=record.git_commit(), started_at=record.now_iso(), launcher=cfg.launcher.name,
    )
    return rec


def already_recorded(runs_file: Path, rec: dict) -> bool:
    from ddlbench.analysis.records import load

    key = record.config_key(rec)
    return any(r.get("status") == "ok" and record.config_key(r) == key for r in load([runs_file]).records)


def _say(rec: dict, runs_file: Path) -> None:
    if rec["status"] == "ok":
        print(f"[ddlbench] ok: {rec['method']} {rec['model']} x{rec['workers']}: "
              f"{rec['samples_per_sec']:.2f} ± {rec['samples_per_sec_std']:.2f} samples/s -> {runs_file}", flush=True)
    else:
        print(f"[ddlbench] FAILED: {rec['method']} {rec['model']} x{rec['workers']}: {rec['error']} -> {runs_file}", flush=True)
