"""Launchers start the workers (and servers) of one run; measurement lives in the workers.

`run(cfg)` prepares the run directory, starts the configured launcher, and writes the run
record, ok or failed, as a file of its own under `<results_dir>/records/` (ddlbench.record.write).

Repeats (`profile.repeat_mode`): `process` runs all R repeats in one launch, one after the other
in the same processes; `launch` starts the run R times with one repeat each, one after another,
as the study relaunched its five runs, so whatever a method decides at start-up (MG-WFBP's
profile and merge) is decided afresh each time and its variance shows in the std. Each launch
keeps its own directory (`<run_dir>/launch-<k>`); their results merge into the one record, which
fails if any launch failed (and no launch starts after a failed one).
"""
from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from ddlbench import hostcpu, metrics, record
from ddlbench.config import threads_per_worker


def worker_args(run_dir: Path) -> list[str]:
    """`-m ddlbench.launch.worker RUN_DIR`: what every rank runs, after torchrun or a Python."""
    return ["-m", "ddlbench.launch.worker", str(run_dir)]


def worker_command(run_dir: Path) -> list[str]:
    """A rank as a Python process of its own (under horovodrun or mpirun)."""
    return [sys.executable, *worker_args(run_dir)]


def run(cfg) -> dict:
    results = Path(cfg.results_dir)
    rec = base_record(cfg)
    if cfg.skip_recorded:
        from .slurm import QueueUnreadable

        try:
            skip = skip_reason(cfg, rec, results)
        except QueueUnreadable as exc:  # submitting now could run a queued job twice
            print(f"ddlbench: error: {exc}", file=sys.stderr, flush=True)
            return {**rec, "status": "failed", "error": str(exc)}
        if skip:
            why, extra = skip
            print(f"[ddlbench] skipped: {why}", flush=True)
            return {**rec, **extra, "status": "skipped"}
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
        return slurm.submit(cfg, rec, run_dir, results)
    from . import local

    # SIGTERM and SIGHUP end the run as Ctrl-C does; no calibration times the cores meanwhile
    with local.terminations(), hostcpu.measuring():
        _prepare(cfg, run_dir)
        if cfg.launcher.name == "emulated":  # hosts as namespaces, up for the run: see emulated.py
            from . import emulated

            emulated.run(cfg, rec, run_dir, results)
            return rec
        env = run_env(cfg)
        rec["env"] = record.env_knobs(env)
        launch_and_record(cfg, rec, run_dir, results, lambda k, d: local.start(cfg, d, env, command(cfg, d, env)))
    return rec


def launch_and_record(cfg, rec: dict, run_dir: Path, results_dir: Path, start) -> None:
    """`run_launches`, then the record, whatever happens: a launch ended by Ctrl-C, a
    termination signal or an error in the launcher (its workers already stopped by
    `local.start`) is recorded as failed, saying why, and the interruption then propagates so
    the process exits (a sweep does not go on to its next run)."""
    from . import local

    try:
        rc, reason = run_launches(cfg, run_dir, start)
    except BaseException as exc:
        with local.deferred_signals():
            finish(cfg, rec, run_dir, *local.interruption(exc), results_dir)
        raise
    with local.deferred_signals():  # a signal now waits until the record is written
        finish(cfg, rec, run_dir, rc, reason, results_dir)


def launch_dirs(cfg, run_dir: Path) -> list[Path]:
    """Where each launch of the run writes: the run directory itself (repeat_mode=process), or
    one directory per repeat under it (repeat_mode=launch)."""
    if cfg.profile.repeat_mode == "process":
        return [run_dir]
    return [run_dir / f"launch-{k}" for k in range(cfg.profile.repeats)]


def run_launches(cfg, run_dir: Path, start) -> tuple[int, str | None]:
    """Call `start(k, launch_dir)` -> (exit code, reason) for each launch in turn; stop at the
    first that fails and say which it was."""
    dirs = launch_dirs(cfg, run_dir)
    for k, d in enumerate(dirs):
        if len(dirs) > 1:
            print(f"[ddlbench] {cfg.method.name} {cfg.model.name} x{cfg.workers}: launch {k + 1}/{len(dirs)} "
                  f"(profile.repeat_mode=launch)", flush=True)
        rc, reason = start(k, d)
        if rc != 0:
            return rc, f"launch {k + 1}/{len(dirs)}: {reason}" if len(dirs) > 1 else reason
    return 0, None


def _prepare(cfg, run_dir: Path) -> None:
    """The run directory with the resolved config; with repeat_mode=launch, one directory per
    launch whose config asks for a single repeat."""
    run_dir.mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    one = OmegaConf.merge(cfg, {"profile": {"repeats": 1}})
    for d in launch_dirs(cfg, run_dir):
        if d != run_dir:
            d.mkdir()
            OmegaConf.save(one, d / "config.yaml", resolve=True)


def run_env(cfg, local_procs: int | None = None) -> dict:
    """The ranks' environment: OpenMP threads shared out over this host's processes, the
    policy of Gloo's loop threads and the ranks' binding to cores where the launcher sets them
    (`launcher.gloo_loop_policy`, `launcher.pin_ranks`), and the engine's knobs (Horovod's fusion
    off for the methods)."""
    threads = threads_per_worker(cfg, local_procs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    policy = cfg.launcher.get("gloo_loop_policy")
    if policy is not None:  # hosts sharing this machine's cores: Gloo's spinning loops yield them (hostcpu)
        env[hostcpu.GLOO_LOOP_POLICY_ENV] = policy
    if cfg.launcher.get("pin_ranks"):  # likewise: each rank bound to its own cores (hostcpu.pin_rank)
        env[hostcpu.PIN_RANKS_ENV] = "1"
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


def finish(cfg, rec: dict, run_dir: Path, rc: int, reason: str | None, results_dir: Path) -> None:
    """Turn what the ranks left in the run's launch directories into the run record and write it
    under `results_dir` (every record, ok or failed, from any launcher, goes through record.write).
    A record that cannot be written (disk full) is said in one line and fails the run; the
    measurements stay in the run directory."""
    files = [d / "result.json" for d in launch_dirs(cfg, run_dir)]
    missing = [f for f in files if not f.exists()]
    if rc == 0 and not missing:
        results = [{k: v for k, v in json.loads(f.read_text()).items() if k != "world"} for f in files]
        rec.update(merge_launches(cfg, results, [f.parent for f in files]), status="ok", error=None)
    else:
        if reason is None and missing:
            reason = f"no result was written in {missing[0].parent}"
        rec.update(status="failed", error=reason or "no result was written", hosts=[os.uname().nodename])
    try:
        where = record.write(results_dir, rec)
    except record.RecordError as exc:
        print(f"ddlbench: error: {exc} (the run's outputs stay in {run_dir})", file=sys.stderr, flush=True)
        rec.update(status="failed", error=str(exc))
        return
    _say(rec, where)


def merge_launches(cfg, results: list[dict], dirs: list[Path]) -> dict:
    """One record's worth of results from the run's launches: a single launch's as it is; for
    repeat_mode=launch, the first launch's fields (trace, fingerprint, the method's choices)
    with the measurements of every launch joined, throughput's mean and std taken over all the
    launches' repeats, and each launch's own result kept under `launches`."""
    if cfg.profile.repeat_mode == "process":
        return {**results[0], "launch_dirs": None, "launches": None}
    per_repeat = [sps for r in results for sps in r["samples_per_sec_per_repeat"]]
    mean, std = metrics.mean_std(per_repeat)
    joined = {key: [v for r in results for v in r.get(key, [])]
              for key in ("block_time_s", "iter_times_s", "host_busy_cores", "host_steal_cores", "thread_cpu_ms_per_iter",
                          "thread_runq_ms_per_iter", "compute_probe_s", "compute_probe_iter_s", "compute_probe_lockstep_s",
                          "compute_probe_lockstep_own_s", "compute_probe_after_idle_s",
                          "compute_probe_after_idle_own_s", "comm_probe_s", "ps_probe_s") if key in results[0]}
    return {
        **results[0], **joined,
        "samples_per_sec": mean, "samples_per_sec_std": std, "samples_per_sec_per_repeat": per_repeat,
        "iterations_total": sum(r["iterations_total"] for r in results),
        "params_consistent": all(r["params_consistent"] for r in results),
        "hosts": sorted({h for r in results for h in r["hosts"]}),
        "launch_dirs": [str(d) for d in dirs], "launches": results,
    }


def base_record(cfg) -> dict:
    p = cfg.profile
    rec = dict.fromkeys(record.FIELDS)
    rec.update(
        method=cfg.method.name, model=cfg.model.name, workers=cfg.workers, servers=cfg.servers,
        engine=cfg.engine.name, backend=cfg.backend, device=cfg.device, local_batch=cfg.local_batch,
        warmup_iters=p.warmup_iters, measured_iters=p.measured_iters, repeats=p.repeats, repeat_mode=p.repeat_mode,
        config=OmegaConf.to_container(cfg, resolve=True), versions=record.versions(),
        git_commit=record.git_commit(), started_at=record.now_iso(), launcher=cfg.launcher.name,
    )
    rec["config_hash"] = record.config_hash(rec["config"])
    if cfg.get("prediction"):  # METHOD=auto: the prediction that chose this method, beside the measurement
        rec["prediction"] = OmegaConf.to_container(cfg.prediction, resolve=True)
    return rec


def skip_reason(cfg, rec: dict, results: Path) -> tuple[str, dict] | None:
    """Why `skip_recorded` skips this run (and fields for the returned record), or None to run it.
    The queue is asked before the records: a job writes its record before it leaves the queue,
    so a job that ends between the two looks is found by the second, never missed by both (and
    run twice). slurm.QueueUnreadable where the queue cannot be read."""
    label = f"{cfg.method.name} {cfg.model.name} x{cfg.workers}"
    if cfg.launcher.name == "slurm" and not cfg.launcher.dry_run:
        from . import slurm

        queued = slurm.queued_job(slurm.job_name(cfg, rec))
        if queued:
            return f"{label} is already queued as Slurm job {queued}", {"job_id": queued}
    if already_recorded(results, rec):
        return f"an ok record of {label} (config {rec['config_hash']}) exists in {results}", {}
    return None


def already_recorded(results: Path, rec: dict) -> bool:
    """An ok record of the same configuration (record.config_key: the whole resolved config less
    output paths and switches) is among the results' records."""
    from ddlbench.analysis.records import load

    key = record.config_key(rec)
    return key is not None and any(r.get("status") == "ok" and record.config_key(r) == key
                                   for r in load([results], check=False).records)


def _say(rec: dict, where: Path) -> None:
    if rec["status"] == "ok":
        print(f"[ddlbench] ok: {rec['method']} {rec['model']} x{rec['workers']}: "
              f"{rec['samples_per_sec']:.2f} ± {rec['samples_per_sec_std']:.2f} samples/s -> {where}", flush=True)
        blocks = rec.get("host_steal_cores") or []  # one per repeat
        stolen = metrics.disturbed_repeats(blocks, rec.get("host_cores"), len(blocks))
        if stolen:
            print(f"[ddlbench] warning: {rec['method']} {rec['model']} x{rec['workers']}: its machine lost "
                  + ", ".join(f"{share:.0%}" for _, share in stolen) + " of its cores to other guests of the "
                  f"hypervisor while repeat(s) " + ", ".join(str(i + 1) for i, _ in stolen) + f" of {len(blocks)} "
                  f"were timed (host_steal_cores): they measured them too; run it again on a quieter machine "
                  f"(the validation leaves such repeats out)", file=sys.stderr, flush=True)
    else:
        print(f"[ddlbench] FAILED: {rec['method']} {rec['model']} x{rec['workers']}: {rec['error']} -> {where}", flush=True)
