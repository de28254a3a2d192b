"""commbench across the nodes of a Slurm job (`make commbench CLUSTER=slurm PARTITION=p`): what a
user runs on their own nodes to write the predictor's network config for their cluster.

One batch job (submitit, one task per node, as the Slurm launcher's; never requeued, so no
attempt meets another's files) runs every measurement of the invocation, one after another, so
the sweep waits in the queue once. Measurement k of R ranks runs one rank on each of nodes
0..R-1: each starts one torchrun (node rank = its node, rendezvous at the job's first node on
`launch.slurm.rendezvous_port(job, k)`); nodes beyond R sit it out. Before measurement k every
node waits for node 0 to have finished measurement k-1 (its `done-<k-1>.json` in the folder),
so a node that sat one out never dials a rendezvous that is not up yet, and a node that comes
to measurement k after node 0 has finished it skips it. Node 0 writes each measurement's records
as it ends (they land whether or not anyone follows the job) and its rows into its done file,
which the submitter reads. Every wait is bounded: a measurement by `timeout_s` (its torchrun's
process group is then killed, as on one host), a wait for node 0 by that and NODE0_GRACE_S.
The folder (specs, rows, done files, submitit's logs with each node's stderr) is under the
results directory, which the nodes must share (as the Slurm launcher's `results_dir`); on NFS a
new file can take seconds to be seen by the other nodes, which only delays the next measurement."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

POLL_S = 0.5
NODE0_GRACE_S = 60.0  # beyond a measurement's timeout, how long a node waits for node 0's done file


def executor(folder: Path, partition: str, time_min: int, nodes: int, cuda: bool, sbatch: dict | None = None):
    import submitit

    ex = submitit.SlurmExecutor(folder=str(folder / "slurm"), max_num_timeout=0)
    params = dict(job_name="ddlbench-commbench", partition=partition, time=int(time_min), nodes=nodes,
                  ntasks_per_node=1, signal_delay_s=30,
                  additional_parameters={"no_requeue": True, **(sbatch or {})})
    if cuda:
        params["gpus_per_node"] = 1  # one rank per node: the link between nodes is what is measured
    ex.update_parameters(**params)
    return ex


def done_path(folder: Path, k: int) -> Path:
    return Path(folder) / f"done-{k}.json"


def done_rows(folder: Path, k: int) -> list[dict] | None:
    """The records node 0 wrote for measurement k, or None where it has not finished it."""
    path = done_path(folder, k)
    return json.loads(path.read_text())["rows"] if path.exists() else None


def node_main(folder: str, jobs: list[dict], timeout_s: float, common: dict) -> None:
    """Each Slurm task (one per node): this node's share of every measurement."""
    import submitit

    env = submitit.JobEnvironment()
    run_node(Path(folder), env.node, env.hostnames, str(env.job_id), jobs, timeout_s, common)


def run_node(folder: Path, node: int, hostnames: list[str], job_id: str, jobs: list[dict], timeout_s: float,
             common: dict) -> None:
    """Run this node's rank of each measurement in `jobs` ({procs, spec, mode, backend,
    fallback_from, workers}) in order. Node 0 then writes the measurement's records under
    common["results"] (with common["base"], and where it ran) and done-<k>.json ({rc, rows})."""
    from ddlbench.commbench.cli import _rows, job_rows, run_jobs
    from ddlbench.launch.local import terminations, torchrun
    from ddlbench.launch.slurm import rendezvous_port

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with terminations():  # scancel's SIGTERM: run_jobs kills the running torchrun's group on the way out
        for k, job in enumerate(jobs):
            if k and not wait_for(done_path(folder, k - 1), timeout_s + NODE0_GRACE_S):
                say(node, f"node 0 did not finish measurement {k - 1} within {timeout_s + NODE0_GRACE_S:g} s; stopping")
                return
            procs = int(job["procs"])
            if node >= procs or (node and done_path(folder, k).exists()):
                continue  # not one of its ranks, or node 0 has finished it without this node
            say(node, f"measurement {k} ({job['mode']}, {job['backend']}, {procs} ranks) starts at {time.time():.3f}")
            cmd = torchrun(1, ["-m", "ddlbench.commbench.worker", job["spec"]],
                           (f"--nnodes={procs}", f"--node-rank={node}", f"--master-addr={hostnames[0]}",
                            f"--master-port={rendezvous_port(job_id, k)}"))
            try:
                rc = run_jobs([(cmd, env)], timeout_s, keep_stderr=True)  # into the job's log
            except KeyboardInterrupt:  # scancel: node 0 keeps what the measurement had finished
                if node == 0:
                    keep_done(folder, k, job, job_rows(json.loads(Path(job["spec"]).read_text())) + [
                        {"error": f"Slurm job {job_id} cancelled during this measurement"}], 1, common, job_id,
                         hostnames[:procs])
                raise
            if node == 0:
                spec = json.loads(Path(job["spec"]).read_text())
                rows = _rows(spec, rc, job["backend"], job["workers"], timeout_s, env)
                if rc:
                    rows = [{**r, "error": f"{r['error']} (each node's stderr: {folder / 'slurm'})"} if "error" in r
                            else r for r in rows]
                keep_done(folder, k, job, rows, rc, common, job_id, hostnames[:procs])


def keep_done(folder: Path, k: int, job: dict, rows: list[dict], rc: int | None, common: dict, job_id: str, hosts) -> None:
    """Node 0: measurement k's rows as records, and done-<k>.json ({rc, rows}) for the submitter."""
    from ddlbench.commbench.cli import keep
    from ddlbench.launch.worker import write_json  # whole or absent, for nodes reading a shared filesystem

    rows = keep(common["results"], common["base"], rows, job["mode"], job["backend"], job["fallback_from"],
                where(job_id, common["partition"], hosts))
    write_json(done_path(folder, k), {"rc": rc, "rows": rows})


def where(job_id: str, partition: str, hosts) -> dict:
    """Where a measurement ran, as its records say it: the Slurm job, its partition and the nodes."""
    return {"network": {"emulated": False, "slurm_job": job_id, "partition": partition, "hosts": list(hosts)}}


def say(node: int, text: str) -> None:
    print(f"[commbench node {node}] {text}", file=sys.stderr, flush=True)


def wait_for(path: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


class StillRunning(Exception):
    """squeue could not be read while following the job: it may still be measuring (node 0
    records the rest as they end), so `rows`, those done so far, are not the whole sweep."""

    def __init__(self, rows: list[dict], message: str):
        super().__init__(message)
        self.rows = rows


def submit_and_collect(folder: Path, jobs: list[dict], partition: str, time_min: int, cuda: bool,
                       timeout_s: float, common: dict, sbatch: dict | None = None) -> list[dict]:
    """Submit the one job, follow it until it leaves the queue, and return the rows node 0 wrote;
    a measurement the job never finished gets an error record here, saying why. Where squeue
    cannot be read, the job goes on and node 0 records the rest: StillRunning with the rows so far."""
    from submitit.core.utils import FailedJobError

    from ddlbench.commbench.cli import BadInput, keep
    from ddlbench.launch.local import signal_of
    from ddlbench.launch.slurm import QueueUnreadable, final_state, follow

    nodes = max(j["procs"] for j in jobs)
    try:
        job = executor(folder, partition, time_min, nodes, cuda, sbatch).submit(node_main, str(folder), jobs,
                                                                                 timeout_s, common)
    except FailedJobError as exc:
        raise BadInput(f"sbatch refused the job ({nodes} nodes, partition {partition}): "
                       f"{' '.join(str(exc).split())[-300:]}") from None
    print(f"[commbench] submitted {len(jobs)} measurement(s) as Slurm job {job.job_id} ({nodes} nodes, "
          f"partition {partition}); logs in {folder / 'slurm'}", flush=True)
    why = interrupted = None
    try:
        follow(job.job_id, "[commbench]")
    except QueueUnreadable as exc:
        done = [d for d in (done_rows(folder, k) for k in range(len(jobs))) if d is not None]
        raise StillRunning([r for d in done for r in d],
                           f"stopped following Slurm job {job.job_id} with {len(done)} of {len(jobs)} measurements "
                           f"done: {exc}; node 0 records the rest under {common['results']} as they end (folder "
                           f"{folder})") from None
    except KeyboardInterrupt as exc:  # follow() has cancelled the job; re-raised once the rows are kept
        why, interrupted = f"stopped by {signal_of(exc).name}; Slurm job {job.job_id} cancelled", exc
    rows = []
    for k, j in enumerate(jobs):
        done = done_rows(folder, k)
        if done is not None:
            rows += done
            continue
        why = why or f"Slurm job {job.job_id} ended ({final_state(job.job_id)}) before this measurement ran"
        rows += keep(common["results"], common["base"], [{"error": f"{why}; logs in {folder / 'slurm'}"}],
                     j["mode"], j["backend"], j["fallback_from"], where(job.job_id, partition, []))
    if interrupted is not None:  # commbench ends as on a local signal: no network from part of the sweep
        raise interrupted
    return rows

