"""Slurm launcher: one batch job per run, submitted and watched with submitit.

Topology (`node_procs`): workers fill worker nodes `workers_per_node` at a time (one per GPU on
cuda; the study used 4), ranks 0..W-1; the PS methods' servers, ranks W..W+S-1, get nodes of
their own (the study's placement; `servers_per_node` each) or, with `servers_on_own_nodes:
false`, share the last worker node. Ranks stay contiguous per node, which is how torchrun's
static rendezvous numbers them, so each node runs one torchrun with its own process count.

The job runs one task per node (`node_main`): it starts that node's torchrun, rendezvous at the
first node on a port derived from the job id, under the same watchdog as the local launcher.
With `profile.repeat_mode=launch` every node does so once per repeat, one launch after another
inside the one batch job (a port of its own per launch), so the R launches share one allocation
and one queue wait. Node 0 writes the run record when the last launch ends, so records land in
`results_dir` whether or not anyone waits. The submitter prints the job id; with `launcher.wait`
it follows the job and records a failure Slurm caused (time limit, cancel, node failure) that
the job could not.

GPUs: with device=cuda (the default here, `device: auto`) the job asks for `workers_per_node`
GPUs per node (`--gpus-per-node`). A Slurm job's nodes all get the same resources (only a
heterogeneous job could differ, which submitit cannot write), so where PS servers have nodes of
their own those nodes are allocated GPUs too, which they leave idle (servers run on the CPU);
`launcher.servers_on_own_nodes=false` puts the servers beside the workers instead.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ddlbench.config import ConfigError

POLL_S = 2.0
# No job spans more nodes than this (the largest machines have ~10,000): a bound checked before any
# per-node list is built, where sinfo cannot say how many nodes the partition has.
MAX_NODES = 16384


def workers_per_node(cfg) -> int:
    return int(cfg.launcher.workers_per_node)


def node_procs(workers: int, servers: int, per_node: int, servers_per_node: int = 1,
               servers_on_own_nodes: bool = True) -> list[int]:
    """Processes per node, node 0 first; ranks are numbered node after node."""
    counts = [min(per_node, workers - start) for start in range(0, workers, per_node)]
    if servers and servers_on_own_nodes:
        counts += [min(servers_per_node, servers - start) for start in range(0, servers, servers_per_node)]
    elif servers:
        counts[-1] += servers
    return counts


def worker_nodes(cfg) -> int:
    """The nodes the workers fill, `workers_per_node` at a time (nodes 0..n-1 of the plan)."""
    return math.ceil(cfg.workers / workers_per_node(cfg))


def nodes_needed(cfg) -> int:
    """len(plan(cfg)), by arithmetic: a bound to check before any per-node list exists."""
    L = cfg.launcher
    nodes = worker_nodes(cfg)
    if cfg.servers and bool(L.servers_on_own_nodes):
        nodes += math.ceil(cfg.servers / int(L.servers_per_node))
    return nodes


def plan(cfg) -> list[int]:
    L = cfg.launcher
    return node_procs(cfg.workers, cfg.servers, workers_per_node(cfg), int(L.servers_per_node),
                      bool(L.servers_on_own_nodes))


# -- checks before anything is submitted ---------------------------------------------------------
def check(cfg) -> None:
    """Cluster settings, checked against `sinfo` where Slurm's tools are installed."""
    L = cfg.launcher
    for key in ("workers_per_node", "servers_per_node", "time_min"):
        v = L[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"launcher.{key}={v!r} is invalid; accepted: an integer >= 1")
    need = nodes_needed(cfg)
    if need > MAX_NODES:
        raise ConfigError(f"workers={cfg.workers} + servers={cfg.servers} need {need} nodes; accepted: at most "
                          f"{MAX_NODES} nodes ({MAX_NODES * workers_per_node(cfg)} workers at "
                          f"launcher.workers_per_node={workers_per_node(cfg)})")
    if not L.partition:
        parts = partitions()
        accepted = ", ".join(parts) if parts else "a partition of your cluster (sinfo -s)"
        raise ConfigError("launcher.partition is not set; accepted: " + accepted +
                          " (set it in conf/local/default.yaml, or PARTITION=... / launcher.partition=...)")
    if L.dry_run:
        return
    if shutil.which("sbatch") is None:
        raise ConfigError("launcher=slurm: sbatch is not on PATH; accepted: a Slurm login node, or launcher.dry_run=true")
    parts = partitions()
    if parts and L.partition not in parts:
        raise ConfigError(f"unknown launcher.partition {L.partition!r}; accepted: {', '.join(parts)}")
    if cfg.device == "cuda":
        offered = gpus_per_node_offered(L.partition)
        if offered == 0:
            raise ConfigError(f"device=cuda, but the nodes of partition {L.partition!r} offer no GPUs (gres); "
                              "accepted: a partition with GPUs, or device=cpu")
        if offered is not None and workers_per_node(cfg) > offered:
            raise ConfigError(f"launcher.workers_per_node={workers_per_node(cfg)} GPUs per node, but the nodes of "
                              f"partition {L.partition!r} offer at most {offered}; accepted: 1..{offered}")
    nodes = nodes_in(L.partition)
    if nodes is not None and need > nodes:
        raise ConfigError(f"workers={cfg.workers} + servers={cfg.servers} need {need} nodes of partition "
                          f"{L.partition!r}, which has {nodes}; accepted: at most {nodes} nodes")


@functools.lru_cache(maxsize=None)
def _sinfo(*fmt: str) -> tuple[str, ...] | None:
    """sinfo's answer, asked once per process: a sweep checks every combination against it."""
    if shutil.which("sinfo") is None:
        return None
    try:
        out = subprocess.run(["sinfo", "-h", *fmt], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tuple(out.stdout.split()) if out.returncode == 0 else None


def partitions() -> list[str]:
    return sorted({p.rstrip("*") for p in (_sinfo("-o", "%P") or [])})


def nodes_in(partition: str) -> int | None:
    out = _sinfo("-p", partition, "-o", "%D")
    return sum(int(x) for x in out if x.isdigit()) if out else None


def gpus_per_node_offered(partition: str) -> int | None:
    """The most GPUs one node of the partition offers, from its generic resources (gres)."""
    out = _sinfo("-p", partition, "-o", "%G")
    if out is None:
        return None
    best = 0
    for gres in ",".join(out).split(","):
        parts = gres.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            best = max(best, int(parts[-1]))
    return best


# -- submission ------------------------------------------------------------------------------
def executor(cfg, run_dir: Path, name: str, script_only: bool = False):
    """submitit's executor for the run; `script_only` (a dry run) also works where Slurm is not
    installed: it only writes the script, so it needs no `srun` here."""
    import submitit

    class ScriptOnly(submitit.SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:  # submitit refuses to build an executor without srun on PATH
            return 1

    L = cfg.launcher
    ex = (ScriptOnly if script_only else submitit.SlurmExecutor)(folder=str(run_dir / "slurm"), max_num_timeout=0)
    params = dict(
        job_name=name,
        partition=L.partition, time=int(L.time_min), nodes=len(plan(cfg)), ntasks_per_node=1,
        setup=list(L.setup), signal_delay_s=30,
    )
    if cfg.device == "cuda":  # a GPU per worker; server-only nodes get them too (see the module's docstring)
        params["gpus_per_node"] = min(cfg.workers, workers_per_node(cfg))
    for key in ("account", "qos", "cpus_per_task", "mem", "constraint"):
        if L.get(key) is not None:
            params[key] = L[key]
    if L.get("exclusive"):
        params["exclusive"] = True
    if L.get("additional"):
        params["additional_parameters"] = dict(L.additional)
    ex.update_parameters(**params)
    return ex


def job_name(cfg, rec: dict) -> str:
    """Names the configuration by the record's `config_hash` (record.config_key, the key
    skip_recorded uses), so a resumed sweep can tell which runs are still queued."""
    from ddlbench import record

    return f"ddlbench-{cfg.method.name}-{cfg.model.name}-w{cfg.workers}-{record.config_key(rec)}"


# squeue is asked again after a failure (a busy or restarting slurmctld answers with an error or
# not at all), waiting SQUEUE_BACKOFF_S, then twice as long, ..., SQUEUE_TRIES times in all.
SQUEUE_TRIES = 5
SQUEUE_BACKOFF_S = 2.0


class QueueUnreadable(RuntimeError):
    """squeue failed every try: whether the job is queued is unknown."""


def squeue(*args: str) -> str | None:
    """squeue's output once it answers; None where it answers that the job id is unknown (a job
    that left the queue some time ago). Only a successful answer is read: an error or a timeout
    is asked again, and QueueUnreadable ends the tries."""
    why = ""
    for attempt in range(SQUEUE_TRIES):
        if attempt:
            time.sleep(SQUEUE_BACKOFF_S * 2 ** (attempt - 1))
        try:
            out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
            continue
        if out.returncode == 0:
            return out.stdout
        if "invalid job id" in out.stderr.lower():
            return None
        why = f"exit {out.returncode}: {' '.join(out.stderr.split())[:200]}"
    raise QueueUnreadable(f"squeue {' '.join(args)} failed {SQUEUE_TRIES} times ({why}); accepted: a "
                          f"working squeue (the queue must be read before anything is submitted or recorded)")


def queued_job(name: str) -> str | None:
    """The id of this user's pending or running job of that name, if any."""
    ids = (squeue("--me", "-n", name, "-o", "%i") or "").split()
    return ids[0] if ids else None


def batch_script(cfg, rec: dict, run_dir: Path) -> str:
    """What sbatch gets (submitit's script; its `srun` runs `node_main` once per node), with the
    launch line each node then runs."""
    ex = executor(cfg, run_dir, job_name(cfg, rec), script_only=True)
    # submitit writes this text into the job folder at submit time; the helper is not public
    text = ex._make_submission_file_text(ex._submitit_command_str, "DRYRUN")
    from . import launch_dirs

    dirs = launch_dirs(cfg, run_dir)
    launch_dir = run_dir if dirs == [run_dir] else run_dir / "launch-$K"
    lines = [text.rstrip(), "", "# each srun task (one per node) runs ddlbench.launch.slurm.node_main, which starts the line below",
             "# (FIRST_NODE: the first host of the job; PORT: 20000 + (job id % 2000) * 20 + K % 20, K the launch):"]
    if launch_dir != run_dir:
        lines.append(f"# profile.repeat_mode=launch: every node runs it {len(dirs)} times, K = 0..{len(dirs) - 1}, "
                     "one launch after another")
    counts = plan(cfg)
    for node, n in enumerate(counts):
        lines.append(f"#   node {node}: {' '.join(node_command(launch_dir, node, n, len(counts), '$FIRST_NODE', '$PORT'))}")
    servers_only = len(counts) - math.ceil(cfg.workers / workers_per_node(cfg))
    if cfg.device == "cuda" and servers_only:
        lines.append(f"# the last {servers_only} node(s) run PS servers only, on the CPU: one job's nodes all get "
                     "the same GPUs, which these leave idle (launcher.servers_on_own_nodes=false avoids them)")
    return "\n".join(lines) + "\n"


def rendezvous_port(job_id: str, launch: int) -> int:
    """Launch `launch`'s rendezvous port at the job's first node: 20 ports per job, spread by job
    id over 20000..59999. Each launch gets a fresh port, so a node that starts the next launch
    never meets the previous launch's store still closing; launches k and k + 20 never overlap."""
    return 20000 + int(str(job_id).split("_")[0]) % 2000 * 20 + launch % 20


def submit(cfg, rec: dict, run_dir: Path, results: Path) -> dict:
    """Submit the run's job (skip_recorded has asked the queue already: launch.skip_reason)."""
    from ddlbench import record

    name = job_name(cfg, rec)
    ex = executor(cfg, run_dir, name)
    job = ex.submit(node_main, str(run_dir), rec)
    label = f"{cfg.method.name} {cfg.model.name} x{cfg.workers}"
    print(f"[ddlbench] submitted {label} as Slurm job {job.job_id} ({len(plan(cfg))} node(s)); "
          f"logs in {run_dir / 'slurm'}; the record lands in {record.records_dir(results)}", flush=True)
    if not cfg.launcher.wait:
        return {**rec, "status": "submitted", "job_id": job.job_id}
    try:
        follow(job.job_id, "[ddlbench]")
    except QueueUnreadable as exc:  # the job may well be running: it records itself
        print(f"[ddlbench] stopped following Slurm job {job.job_id}: {exc}; the job writes its record "
              f"when it ends", flush=True)
        return {**rec, "status": "submitted", "job_id": job.job_id}
    except KeyboardInterrupt:
        return _record_unless_written(cfg, rec, run_dir, results,
                                      lambda: f"interrupted (Ctrl-C); Slurm job {job.job_id} cancelled")
    return _record_unless_written(cfg, rec, run_dir, results,
                                  lambda: f"Slurm job {job.job_id} ended ({final_state(job.job_id)}) before the run was recorded")


def follow(job_id: str, tag: str) -> None:
    """Print the job's state as it changes until it leaves the queue (squeue says so). Ctrl-C
    cancels the job (scancel) and propagates; QueueUnreadable where squeue keeps failing."""
    state = None
    try:
        while (now := queue_state(job_id)) is not None:
            if now != state:
                state = now
                print(f"{tag} Slurm job {job_id}: {state}", flush=True)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        subprocess.run(["scancel", str(job_id)], capture_output=True)
        raise


def queue_state(job_id: str) -> str | None:
    """The job's state while it is in the queue (squeue needs no accounting); None once squeue
    answers that it is gone. QueueUnreadable where squeue keeps failing."""
    state = (squeue("-j", str(job_id), "-o", "%T") or "").strip()
    return state or None


def final_state(job_id: str) -> str:
    """Slurm's final state from accounting (sacct), where the cluster keeps it."""
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "state unknown"
    return (out.stdout.split() or ["state unknown: no accounting"])[0]


def _record_unless_written(cfg, rec: dict, run_dir: Path, results: Path, reason) -> dict:
    """The job's own record, or a failed one saying why there is none (`reason()`)."""
    from ddlbench.analysis.records import load

    from . import _say, finish

    # a requeued job leaves a record per attempt that got to write one: the last attempt's counts
    mine = [r for r in load([results], check=False).records  # as written: the tables' field checks are not for resume
            if r.get("run_dir") == str(run_dir)]
    if mine:
        r = max(mine, key=lambda r: r.get("slurm_attempt") or 0)
        _say(r, results)
        return r
    tail = _log_tail(run_dir)
    rec = dict(rec)
    finish(cfg, rec, run_dir, 1, reason() + (f": {tail}" if tail else ""), results)
    return rec


def _log_tail(run_dir: Path) -> str:
    for f in sorted((run_dir / "slurm").glob("*_0_log.err")):
        lines = [ln for ln in f.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1][:300]
    return ""


# -- inside the job ----------------------------------------------------------------------------
def node_command(run_dir: Path, node: int, nprocs: int, nnodes: int, first_node: str, port) -> list[str]:
    from . import worker_args
    from .local import torchrun

    return torchrun(nprocs, worker_args(run_dir), [f"--nnodes={nnodes}", f"--node-rank={node}",
                                                   f"--master-addr={first_node}", f"--master-port={port}"])


def start_node(cfg, launch_dir: Path, node: int, first_node: str, port: int, env: dict) -> tuple[int, str | None]:
    """This node's share of one launch (a Slurm node's, an emulated host's): its torchrun,
    rendezvous at `first_node:port`, under the local launcher's watchdog."""
    from . import local

    counts = plan(cfg)
    return local.start(cfg, launch_dir, env, node_command(launch_dir, node, counts[node], len(counts), first_node, port))


def node_main(run_dir: str, rec: dict) -> int:
    """One per node: run this node's ranks; node 0 also writes the run record. SIGTERM and
    SIGHUP (scancel, preemption, Slurm's warning before its kill) end the launch as Ctrl-C does,
    and so does submitit's own handler when the time limit nears: this node's ranks are
    stopped, and node 0 records the run as failed, saying why."""
    import submitit
    from omegaconf import OmegaConf

    from . import launch_and_record, local, run_env, run_launches

    run_dir = Path(run_dir)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    job = submitit.JobEnvironment()
    node = job.node
    counts = plan(cfg)
    env = run_env(cfg, local_procs=counts[node])
    attempt = int(os.environ.get("SLURM_RESTART_COUNT", 0))
    base = attempt_dir(cfg, run_dir, attempt)

    def start(k: int, launch_dir: Path) -> tuple[int, str | None]:
        if cfg.engine.name != "horovod":
            return start_node(cfg, launch_dir, node, job.hostnames[0], rendezvous_port(job.job_id, k), env)
        if node == 0:
            return local.start(cfg, launch_dir, env, _horovod_command(cfg, launch_dir, job.hostnames, counts))
        return wait_for_node0(launch_dir, float(cfg.launcher.get("stall_timeout_s", 600)))

    with local.terminations():
        if node == 0:
            # node 0's own environment: its threads follow the CPUs Slurm allotted on the node,
            # which the submitting host cannot know
            from ddlbench.record import env_knobs

            rec = dict(rec, job_id=job.job_id, hosts=job.hostnames, slurm_attempt=attempt, env=env_knobs(env))
            launch_and_record(cfg, rec, base, Path(cfg.results_dir), start)
            rc, reason = (0, None) if rec["status"] == "ok" else (1, rec["error"])
        else:
            rc, reason = run_launches(cfg, base, start)
    if rc != 0:
        raise RuntimeError(reason or f"node {node}: ranks exited with {rc}")
    return rc


def attempt_dir(cfg, run_dir: Path, attempt: int) -> Path:
    """Where attempt `attempt` (SLURM_RESTART_COUNT: 0, then 1, 2, ... after each requeue) runs
    its launches: the run directory first, then a fresh `attempt-<n>` in it, so a requeued job
    never reads the last attempt's error, pid or result files (and kill itself over them). Every
    node calls this; each writes the same config files, atomically."""
    if attempt == 0:
        return run_dir
    from . import launch_dirs

    d = run_dir / f"attempt-{attempt}"
    for first, fresh in zip(launch_dirs(cfg, run_dir), launch_dirs(cfg, d)):
        fresh.mkdir(parents=True, exist_ok=True)
        tmp = fresh / f".config.yaml.{socket.gethostname()}.{os.getpid()}.tmp"
        shutil.copyfile(first / "config.yaml", tmp)
        os.replace(tmp, fresh / "config.yaml")
    return d


def wait_for_node0(launch_dir: Path, stall_s: float) -> tuple[int, str | None]:
    """A node other than 0 under horovodrun, whose ranks node 0 starts: wait for the launch to
    end (a result, or a rank's error), but no longer than `stall_s` without a sign of life from
    any rank (the watchdog's bound; before, it waited forever for a node 0 that might be gone),
    then stop this host's ranks either way."""
    from . import local, pids

    last = time.monotonic()
    try:
        while not (launch_dir / "result.json").exists():
            if any(launch_dir.glob("error-rank*.json")):
                return 1, "a rank reported an error"
            beat = local.heartbeat(launch_dir)
            if beat is not None:
                last = max(last, beat)
            if time.monotonic() - last > stall_s:
                return 1, (f"no progress from any rank for {stall_s:.0f} s while waiting for node 0's horovodrun "
                           "(launcher.stall_timeout_s)")
            time.sleep(min(POLL_S, stall_s / 4))
        return 0, None
    finally:  # the ranks get the watchdog's grace to leave by themselves (their last barrier)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            for e in pids.own(launch_dir) if sig else ():
                pids.send(e, sig)
            if local.wait_gone(launch_dir, local.GRACE_S):
                break


def _horovod_command(cfg, run_dir: Path, hosts: list[str], counts: list[int]) -> list[str]:
    """horovodrun on node 0 over every node of the job (ssh to the others, as horovodrun does)."""
    from . import horovodrun, worker_command

    hosts_arg = host_slots(hosts, counts) if len(hosts) > 1 else None
    return horovodrun.argv(sum(counts), hosts_arg, cfg.launcher.get("network_interface"), cfg.comm_timeout_s) + \
        worker_command(run_dir)


def host_slots(hosts: list[str], counts: list[int]) -> str:
    """`host0:n0,host1:n1,...`: the plan's processes per host, as horovodrun -H and mpiexec -hosts
    take them (both fill the hosts in order, so ranks stay contiguous per host, as here)."""
    return ",".join(f"{h}:{n}" for h, n in zip(hosts, counts))
