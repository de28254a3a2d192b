"""`python -m ddlbench.commbench` (`make commbench`): measure, append records, print the table,
draw the plots and recommend a backend per size range. --help lists the options."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ddlbench import hostcpu, record
from ddlbench.commbench.backends import BACKENDS, mpiexec, why_unavailable
from ddlbench.commbench.collectives import COLLECTIVES, DTYPES
from ddlbench.commbench.modes import AFTER_COMPUTE_S, FUSION_PACE_S
from ddlbench.commbench.worker import CPU_WINDOW_S, MIN_ITERS, SECONDS_PER_SIZE

DEVICES = ("cpu", "cuda")
MODES = ("sizes", "groups", "fusion", "ps")
ACROSS_HOSTS = ("gloo", "nccl", "mpi", "ucc")  # torch.distributed backends: a torchrun per emulated host


class BadInput(ValueError):
    pass


def _list(text: str, accepted, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    for t in items:
        if t not in accepted:
            raise BadInput(f"unknown {what} {t!r}; accepted: {', '.join(accepted)}")
    if not items:
        raise BadInput(f"no {what} given; accepted: {', '.join(accepted)}")
    return items


def _bytes(text: str, what: str) -> int:
    units = {"": 1, "k": 1 << 10, "ki": 1 << 10, "m": 1 << 20, "mi": 1 << 20, "g": 1 << 30, "gi": 1 << 30}
    t = text.strip().lower().removesuffix("b")
    num = t.rstrip("kmgi")
    try:
        value = int(float(num) * units[t[len(num):]])
    except (ValueError, KeyError):
        raise BadInput(f"{what}={text!r} is not a size; accepted: bytes like 4, 64K, 256MiB") from None
    if value <= 0:
        raise BadInput(f"{what}={text!r} is invalid; accepted: a size > 0")
    return value


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ddlbench.commbench", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="3", help="N: measure 2..N workers, or a comma list (default 3)")
    ap.add_argument("--backends", default="auto", help=f"comma list of {', '.join(BACKENDS)}; auto = every available")
    ap.add_argument("--collectives", default="all_reduce", help=f"comma list of {', '.join(COLLECTIVES)}")
    ap.add_argument("--dtypes", default="fp32,fp16", help=f"comma list of {', '.join(DTYPES)}")
    ap.add_argument("--devices", default="cpu", help="cpu, cuda or both")
    ap.add_argument("--min-bytes", default="4")
    ap.add_argument("--max-bytes", default="64MiB", help="largest size (default 64MiB keeps the default run within 15 min on 2 cores; up to 256MiB and beyond)")
    ap.add_argument("--factor", type=int, default=4, help="size step: 2 or 4")
    ap.add_argument("--iters", type=int, default=100, help="timed iterations per size (at least 1)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seconds-per-size", type=float, default=SECONDS_PER_SIZE,
                    help=f"fewer calls for a size (sizes and ps modes) or a round (fusion, ps bursts) whose "
                         f"calls are slow, so that its timed calls take about this long (at least {MIN_ITERS}; "
                         f"default {SECONDS_PER_SIZE:g}; 0, or --warmup 0: always --iters), timed on the second of "
                         f"at least two warm-ups")
    ap.add_argument("--mode", default="sizes,groups,fusion,ps",
                    help=f"comma list of {', '.join(MODES)} (ps: push/pull through ddlbench's PS engine, W workers + 1 server)")
    ap.add_argument("--group-bytes", default="400", help="groups mode: bytes per all-reduce (seed 002: 10x10 fp32)")
    ap.add_argument("--fusion-models", default="resnet50,bert-base")
    ap.add_argument("--fusion-iters", type=int, default=10)
    ap.add_argument("--cpu-window-s", type=float, default=CPU_WINDOW_S,
                    help=f"fusion mode: a round whose machine CPU is recorded (cpu_busy_s, in /proc/stat's "
                         f"10 ms ticks) runs again until its rounds fill this many seconds, so that the ticks "
                         f"resolve it (default {CPU_WINDOW_S:g}; 0: --fusion-iters rounds only)")
    ap.add_argument("--fusion-pace-ms", type=float, default=FUSION_PACE_S * 1e3,
                    help=f"fusion mode: also launch the per-tensor all-reduces one every this many ms "
                         f"(per_tensor_paced), as WFBP does during backward, and so again with every rank "
                         f"computing between launches (per_tensor_computing); the predictor's lane speed comes "
                         f"from the first, what all-reduces get beside compute from the second "
                         f"(default {FUSION_PACE_S * 1e3:g}; 0: neither round)")
    ap.add_argument("--after-compute-ms", type=float, default=AFTER_COMPUTE_S * 1e3,
                    help=f"fusion mode: also time the fused all-reduce right after every rank computed this "
                         f"many ms (fused_after_compute), as BSP sends after backward; the predictor charges "
                         f"what it costs beyond its fit to a collective that starts after compute "
                         f"(default {AFTER_COMPUTE_S * 1e3:g}; 0: no such round)")
    ap.add_argument("--results", default="results")
    ap.add_argument("--network-name", default=None,
                    help="write conf/network/NAME.yaml from the 2-worker all-reduce (default local-<hostname>; 'none': do not)")
    ap.add_argument("--network-dir", default=None,
                    help="write the network config into this folder, not conf/network (make bench-local keeps the "
                         "one measured beside its runs with their profiles; make predict does not read it there)")
    ap.add_argument("--pool", action="store_true",
                    help="fit the network config from this invocation's records and every earlier one under "
                         "--results measured in the same place (this host, or the same --link): one session's "
                         "fit moves the predictions about as much as the machine's drift does")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one job may take")
    ap.add_argument("--link", default=None,
                    help="run each job across hosts of an emulated cluster (one worker per host, links shaped "
                         "to this tc rate, e.g. 1gbit; root), as from several nodes; the network config is "
                         "then emulated-LINK")
    ap.add_argument("--gloo-loop-policy", default="auto",
                    help="scheduling policy of Gloo's socket loop threads in the ranks: idle or none; auto "
                         "(default): idle where the ranks share this machine's cores (on this host, or --link), "
                         "where their spinning would hold up the threads they wait for (ddlbench/hostcpu.py), "
                         "none with --slurm")
    ap.add_argument("--pin-ranks", default="auto",
                    help="bind each rank to its own core (as mpirun --bind-to core); auto (default): yes where "
                         "the ranks share this machine's cores (on this host, or --link), as the local and "
                         "emulated launchers do (ddlbench/hostcpu.py), no with --slurm")
    ap.add_argument("--slurm", action="store_true",
                    help="run every measurement in one Slurm job, one rank per node, as from your own nodes; "
                         "the network config is then slurm-PARTITION (results must be on a filesystem the nodes share)")
    ap.add_argument("--partition", default=None, help="with --slurm: the Slurm partition (required)")
    ap.add_argument("--time-min", type=int, default=None, help="with --slurm: the job's time limit in minutes (60)")
    ap.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                    help="with --slurm: another sbatch option, e.g. account=proj or qos=high (repeatable)")
    a = ap.parse_args(argv)
    a.collectives = _list(a.collectives, tuple(COLLECTIVES), "collective")
    a.dtypes = _list(a.dtypes, tuple(DTYPES), "dtype")
    a.devices = _list(a.devices, DEVICES, "device")
    a.modes = _list(a.mode, MODES, "mode")
    a.min_bytes, a.max_bytes = _bytes(a.min_bytes, "min-bytes"), _bytes(a.max_bytes, "max-bytes")
    a.group_bytes = _bytes(a.group_bytes, "group-bytes")
    if a.min_bytes > a.max_bytes:
        raise BadInput(f"min-bytes={a.min_bytes} is above max-bytes={a.max_bytes}; accepted: min <= max")
    if a.factor not in (2, 4):
        raise BadInput(f"factor={a.factor} is invalid; accepted: 2, 4")
    if a.iters < 1 or a.warmup < 0:
        raise BadInput(f"iters={a.iters}, warmup={a.warmup} are invalid; accepted: iters >= 1, warmup >= 0")
    if not a.seconds_per_size >= 0:
        raise BadInput(f"seconds-per-size={a.seconds_per_size:g} is invalid; accepted: seconds >= 0 (0: always --iters)")
    if a.fusion_iters < 1:
        raise BadInput(f"fusion-iters={a.fusion_iters} is invalid; accepted: >= 1")
    if not 0 <= a.cpu_window_s <= 60:
        raise BadInput(f"cpu-window-s={a.cpu_window_s:g} is invalid; accepted: 0 <= seconds <= 60 (0: --fusion-iters only)")
    if not 0 <= a.fusion_pace_ms < 1000:
        raise BadInput(f"fusion-pace-ms={a.fusion_pace_ms:g} is invalid; accepted: 0 <= ms < 1000 (0: no paced round)")
    if not 0 <= a.after_compute_ms < 1000:
        raise BadInput(f"after-compute-ms={a.after_compute_ms:g} is invalid; accepted: 0 <= ms < 1000 (0: no such round)")
    if not a.timeout > 0:
        raise BadInput(f"timeout={a.timeout:g} is invalid; accepted: seconds > 0")
    if a.pin_ranks not in ("auto", "yes", "no"):
        raise BadInput(f"pin-ranks={a.pin_ranks!r} is invalid; accepted: auto, yes, no")
    if a.pool and a.slurm:
        raise BadInput("--pool with --slurm is not supported; accepted: --pool on this host or with --link "
                       "(a Slurm job's nodes can differ from one session to the next)")
    a.pin_ranks = not a.slurm if a.pin_ranks == "auto" else a.pin_ranks == "yes"
    if a.gloo_loop_policy == "auto":
        a.gloo_loop_policy = None if a.slurm else "idle"
    elif a.gloo_loop_policy == "none":
        a.gloo_loop_policy = None
    elif a.gloo_loop_policy not in hostcpu.GLOO_LOOP_POLICIES:
        raise BadInput(f"gloo-loop-policy={a.gloo_loop_policy!r} is invalid; accepted: "
                       f"{', '.join(hostcpu.GLOO_LOOP_POLICIES)}, none, auto")
    if "fusion" in a.modes:
        from ddlbench.config import choices

        _list(a.fusion_models, tuple(choices("model")), "fusion model")  # the models whose gradients it sends
    try:
        counts = [int(w) for w in a.workers.split(",")]
    except ValueError:
        raise BadInput(f"workers={a.workers!r} is invalid; accepted: N >= 2 or a comma list") from None
    a.workers = list(range(2, counts[0] + 1)) if len(counts) == 1 else counts
    if not a.workers or min(a.workers) < 2:
        raise BadInput(f"workers={counts} is invalid; accepted: N >= 2 (collectives need two workers)")
    if a.link is not None:
        from ddlbench.launch.netns import BadSetting, check_rate

        try:
            rate = check_rate(a.link, "link")
        except BadSetting as exc:
            raise BadInput(str(exc)) from None
        if rate is None:
            raise BadInput(f"link={a.link!r} sets no rate; accepted: a tc rate such as 100mbit or 1gbit")
        across_hosts_only(a, f"--link={a.link}")
    if a.slurm:
        check_slurm(a)
    elif a.partition is not None or a.time_min is not None or a.sbatch:
        raise BadInput("--partition, --time-min and --sbatch are for --slurm; accepted: add --slurm "
                       "(make commbench CLUSTER=slurm), or leave them out")
    a.backends = resolve_backends(a)
    if a.link is not None or a.slurm:  # auto: every available one that torchrun starts across the hosts
        a.backends = [x for x in a.backends if x[0] in ACROSS_HOSTS]
    if a.slurm:
        check_slurm_nodes(a)
    else:
        check_gpus_here(a)
    return a


def check_gpus_here(a) -> None:
    """On this machine every rank of a local CUDA measurement sets its local rank's GPU, the ps
    mode's server included: the largest measurement needs that many, or its ranks fail at
    start-up. Across emulated hosts (--link) host i takes visible GPU i modulo their number, so
    hosts share GPUs, which Gloo takes and NCCL refuses: there only NCCL needs a GPU per rank."""
    todo = [m for m in measurements(a) if m[2] == "cuda" and (a.link is None or m[1] == "nccl")]
    if not todo:
        return
    import torch

    need, have = max(procs_of(mode, w) for mode, _, _, _, w in todo), torch.cuda.device_count()
    if need > have:
        within = f"--workers and --mode within {have} GPUs (WORKERS=2 CB_MODE=sizes needs 2), or " if have >= 2 else ""
        how = "NCCL across emulated hosts" if a.link else "devices=cuda"
        raise BadInput(f"{how} needs {need} GPUs here (a GPU per rank: up to {max(a.workers)} workers, 4 in "
                       f"the groups mode, workers + 1 in the ps mode) and {have} are visible; accepted: {within}"
                       f"--devices cpu" + (", or --backends gloo" if a.link else ""))


def across_hosts_only(a, how: str) -> None:
    other = [] if a.backends == "auto" else [b for b in _list(a.backends, BACKENDS, "backend") if b not in ACROSS_HOSTS]
    if other:
        raise BadInput(f"backends {','.join(other)} with {how}: each host's rank starts under torchrun; "
                       f"accepted: {', '.join(ACROSS_HOSTS)}")


def check_slurm(a) -> None:
    """--slurm's settings, before anything is submitted."""
    import shutil

    if a.link is not None:
        raise BadInput(f"--slurm with --link={a.link}: one or the other; accepted: --slurm (your nodes) or "
                       "--link RATE (emulated hosts of this machine)")
    if not a.partition:
        raise BadInput("--slurm needs --partition (make commbench CLUSTER=slurm PARTITION=...); accepted: a "
                       "partition sinfo lists")
    a.time_min = 60 if a.time_min is None else a.time_min
    if a.time_min < 1:
        raise BadInput(f"--time-min={a.time_min} is invalid; accepted: minutes >= 1")
    bad = [o for o in a.sbatch if "=" not in o or not o.split("=", 1)[0].strip()]
    if bad:
        raise BadInput(f"--sbatch {bad[0]!r} is invalid; accepted: KEY=VALUE, e.g. account=proj")
    a.sbatch = dict(o.split("=", 1) for o in a.sbatch)
    across_hosts_only(a, "--slurm")
    if shutil.which("sbatch") is None:
        raise BadInput("--slurm: no sbatch on PATH; accepted: a host with Slurm's client commands")
    from ddlbench.launch.slurm import partitions

    known = partitions()
    if known and a.partition not in known:
        raise BadInput(f"--partition={a.partition!r} is unknown to Slurm; accepted: {', '.join(known)}")


def check_slurm_nodes(a) -> None:
    """The job's size (the largest measurement's ranks, one per node) against the partition's."""
    from ddlbench.launch.slurm import nodes_in

    todo = measurements(a)
    if not todo:
        raise BadInput("no measurement to run on Slurm; accepted: a backend torchrun starts (gloo, nccl, mpi, ucc)")
    need = max(procs_of(mode, w) for mode, _, _, _, w in todo)
    have = nodes_in(a.partition)
    if have is not None and need > have:
        raise BadInput(f"this sweep needs {need} nodes (one rank per node: up to {max(a.workers)} workers, 4 in the "
                       f"groups mode, workers + 1 in the ps mode) and partition {a.partition} has {have}; accepted: "
                       f"--workers and --mode within {have} nodes (WORKERS=2 CB_MODE=sizes needs 2)")


def resolve_backends(a) -> list[tuple[str, str, str | None]]:
    """[(backend, device, fallback_from)]: what runs. A requested backend this machine lacks is
    said in one line and replaced by Gloo (recorded); NCCL without GPUs is an error. With --slurm
    the GPUs are the nodes', which this host (a login node) need not see."""
    requested = list(BACKENDS) if a.backends == "auto" else _list(a.backends, BACKENDS, "backend")
    remote = a.slurm
    out = []
    for device in a.devices:
        if device == "cuda" and not remote and "NCCL needs" in (why_unavailable("nccl", "cuda") or ""):
            raise BadInput("devices=cuda but no CUDA GPU is visible; accepted here: cpu")
        for b in requested:
            if device == "cpu" and b == "nccl":
                if a.backends == "auto":
                    continue
                raise BadInput("backend 'nccl' runs on CUDA GPUs only; accepted: --devices cuda, or on cpu gloo")
            if device == "cuda" and b in ("mpi4py", "horovod"):
                continue
            reason = why_unavailable(b, device, gpus_here=not remote)
            if reason is None:
                out.append((b, device, None))
            elif a.backends != "auto":
                print(f"commbench: {b} unavailable ({reason}); falling back to gloo", file=sys.stderr)
                out.append(("gloo", device, b))
    seen, unique = set(), []
    for item in out:
        if item[:2] not in seen:
            seen.add(item[:2])
            unique.append(item)
    return unique


def launch(backend: str, device: str, workers: int, spec: dict, timeout: float, cluster=None) -> list[dict]:
    """One job of `workers` ranks: on this host, or with `cluster` (an emulated cluster that is
    up) one rank on each of its first `workers` hosts, rendezvous at the first, as torchrun runs
    on several nodes."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {**spec, "backend": backend, "device": device, "out": f"{tmp}/rows.jsonl",
                "torch_backend": backend}
        Path(f"{tmp}/spec.json").write_text(json.dumps(spec))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if spec.get("gloo_loop_policy") is not None:
            env[hostcpu.GLOO_LOOP_POLICY_ENV] = spec["gloo_loop_policy"]
        if spec.get("pin_ranks"):
            env[hostcpu.PIN_RANKS_ENV] = "1"
        target = ["-m", "ddlbench.commbench.worker", f"{tmp}/spec.json"]
        procs = procs_of(spec["mode"], workers)
        log = Path(tmp) / "stderr.log"  # the ranks' stderr: its tail goes into a failed job's error
        if cluster is not None:
            jobs = across_hosts(cluster, procs, target, env, cuda=device == "cuda")
        elif backend == "mpi4py":
            jobs = [([mpiexec(), "-n", str(workers), sys.executable, *target], env)]
        elif backend == "horovod":
            from ddlbench.engines import unfused_env
            from ddlbench.launch.horovodrun import argv

            # one collective per call, as for the methods; HOROVOD_* set by the user win
            env.update({k: v for k, v in unfused_env().items() if k not in os.environ})
            jobs = [(argv(workers, None, None) + [sys.executable, *target], env)]
        else:
            from ddlbench.launch.local import torchrun

            jobs = [(torchrun(procs, target), env)]
        try:
            return _rows(spec, run_jobs(jobs, timeout, log=log), backend, workers, timeout, env, log)
        except KeyboardInterrupt as exc:  # the measurements that finished before it, for the caller to keep
            exc.rows = [{**r, "env": record.env_knobs(env)} for r in job_rows(spec)]
            raise


def job_rows(spec: dict) -> list[dict]:
    """The rows rank 0 wrote, a line per measurement as it finished (a line cut short by a kill
    is left out)."""
    path, rows = Path(spec["out"]), []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


LOG_TAIL_LINES = 20


def log_tail(log: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """What a failed job's stderr says: its first Python traceback (the root cause; the
    launcher's summary and the other ranks' follow it), then its last `lines` lines ('' if
    there is no log). A `[rankN]:` prefix (torchrun's) does not hide a traceback's end."""
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").rstrip().splitlines()
    first = next((i for i, line in enumerate(text) if "Traceback (most recent call last)" in line), None)
    if first is None:
        return "\n".join(text[-lines:])
    # the traceback ends at its exception's line: the first one after it that is not indented
    last = min(first + 80, len(text)) - 1
    end = next((j for j in range(first + 1, last + 1)
                if re.sub(r"^\[rank\d+\]: ?", "", text[j])[:1] not in (" ", "\t", "")), last)
    rest = text[max(end + 1, len(text) - lines):]
    return "\n".join(text[first:end + 1] + (["..."] if len(text) - lines > end + 1 else []) + rest)


def _rows(spec: dict, rc: int | None, backend: str, workers: int, timeout: float, env: dict,
          log: Path | None = None) -> list[dict]:
    """The job's rows: the measurements it finished, then, for a failed job, one error row that
    carries its ranks' last stderr lines (`stderr_tail`), printed here too, so a failure says why
    without a rerun."""
    rows = job_rows(spec)
    done = f" after {len(rows)} measurement(s)" if rows else ""
    if rc is None:
        rows.append({"error": f"{backend} x{workers} job timed out after {timeout:g} s (--timeout){done}; every "
                              "process of it was killed"})
    elif rc != 0:
        rows.append({"error": f"{backend} x{workers} job exited with {rc}{done}"})
    if rc != 0 and (tail := log_tail(log)):
        print(f"commbench: {backend} x{workers} job failed; its ranks' last stderr lines:\n{tail}", file=sys.stderr)
        rows = [{**r, "stderr_tail": tail} if "error" in r else r for r in rows]
    return [{**r, "env": record.env_knobs(env)} for r in rows]  # the knobs this job ran with


def across_hosts(cluster, workers: int, target: list[str], env: dict, cuda: bool = False) -> list[tuple[list[str], dict]]:
    """(command, environment) per host: torchrun with one process, node rank i of `workers`,
    inside host i's namespaces, its rank on the host's shaped interface (`cuda`: on one GPU of
    this machine's, launch.emulated.gpu_slice)."""
    import random

    from ddlbench.launch.local import torchrun

    if workers > len(cluster.hosts):
        raise BadInput(f"{workers} ranks need {workers} emulated hosts and the cluster that is up has "
                       f"{len(cluster.hosts)}; accepted: at most {len(cluster.hosts)}, or `make cluster-down` first")
    from ddlbench.launch.emulated import gpu_slice

    port = random.randrange(20000, 60000)  # host 0's namespace has its own port space
    first = cluster.hosts[0].address
    # hosts of one machine share its GPUs: host i's rank gets visible GPU i (wrapping around)
    return [([*h.exec_prefix(), *torchrun(1, target, (f"--nnodes={workers}", f"--node-rank={i}",
                                                      f"--master-addr={first}", f"--master-port={port}"))],
             {**env, **h.env(), **({"CUDA_VISIBLE_DEVICES": gpu_slice(env, i, 1)} if cuda else {})})
            for i, h in enumerate(cluster.hosts[:workers])]


def run_jobs(jobs: list[tuple[list[str], dict]], timeout_s: float, keep_stderr: bool = False,
             log: Path | None = None) -> int | None:
    """Run one job's launchers (torchrun, mpiexec or horovodrun and their ranks; one per host
    across emulated hosts), each in a process group of its own; the first non-zero exit code (0
    if none), or None when they ran past `timeout_s`. Whatever ends the wait (the timeout, a
    failed host, Ctrl-C, an error), every group is killed: killing a launcher alone would leave
    its ranks running, and a host whose peer died would wait for it. Their stdout (rank 0's
    progress, a line per measurement) is this one's; their stderr: this one's with `keep_stderr`
    or on a terminal, else appended to `log` (dropped without one)."""
    shown = keep_stderr or sys.stderr.isatty()
    sink = open(log, "ab") if log is not None and not shown else None
    err = None if shown else (sink or subprocess.DEVNULL)
    procs, relays = [], []
    deadline = time.monotonic() + timeout_s
    try:
        for cmd, env in jobs:
            procs.append(subprocess.Popen(cmd, env=env, start_new_session=True, stderr=err, stdout=subprocess.PIPE))
            relays.append(relay(procs[-1].stdout))
        while None in (codes := [p.poll() for p in procs]):
            if time.monotonic() > deadline:
                return None
            if any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.2)
        return next((p.returncode for p in procs if p.returncode not in (None, 0)), 0)
    finally:
        for proc in procs:
            if proc.returncode is None:  # not reaped yet, so its pid still names its group
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        for thread, pipe in relays:  # a process that outlived its group must not hold our stdout
            thread.join(timeout=1.0)
            pipe.close()
        if sink is not None:
            sink.close()


def relay(pipe) -> tuple[threading.Thread, object]:
    """Copy a launcher's stdout (its rank 0's progress) to ours, line by line, on a thread of
    its own: the ranks never hold this process's stdout, so a caller reading it to its end (a
    pipe, `| tee`) is not kept waiting by one that outlived the kill of its group. Where our
    stdout is gone (`| head`), it goes on draining the pipe, so rank 0 never blocks on a full one."""
    def copy():
        shown = True
        try:
            for line in iter(pipe.readline, b""):
                if shown:
                    try:
                        sys.stdout.write(line.decode(errors="replace"))
                        sys.stdout.flush()
                    except (OSError, ValueError):
                        shown = False
        except (OSError, ValueError):  # closed under it by run_jobs
            pass
    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread, pipe


def main(argv=None) -> int:
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
    except BadInput as exc:
        print(f"commbench: error: {exc}", file=sys.stderr)
        return 2
    out_dir = record.records_dir(a.results)
    base = {"started_at": record.now_iso(), "versions": record.versions(), "git_commit": record.git_commit()}
    spec = {"collectives": a.collectives, "dtypes": a.dtypes, "min_bytes": a.min_bytes, "max_bytes": a.max_bytes,
            "factor": a.factor, "iters": a.iters, "warmup": a.warmup, "seconds_per_size": a.seconds_per_size,
            "group_bytes": a.group_bytes,
            "fusion_models": a.fusion_models.split(","), "fusion_iters": a.fusion_iters, "fusion_warmup": 2,
            "cpu_window_s": a.cpu_window_s,
            "fusion_pace_s": a.fusion_pace_ms / 1e3, "after_compute_s": a.after_compute_ms / 1e3,
            "gloo_loop_policy": a.gloo_loop_policy,
            "pin_ranks": a.pin_ranks}
    from ddlbench.commbench.slurm import StillRunning

    from ddlbench.launch.local import signal_of, terminations

    t0 = time.monotonic()
    still_running = None
    try:
        # SIGTERM and SIGHUP (timeout, a CI cancel, scancel) end it as Ctrl-C does: the running
        # job's ranks are killed and the emulated hosts removed on the way out
        with terminations(), hostcpu.measuring(), _hosts(a) as cluster:
            new = _measure_all(a, spec, base, cluster)
    except BadInput as exc:
        print(f"commbench: error: {exc}", file=sys.stderr)
        return 2
    except StillRunning as exc:
        new, still_running = exc.rows, exc
    except KeyboardInterrupt as exc:
        print(f"commbench: stopped by {signal_of(exc).name}: every rank was stopped; the measurements that finished "
              f"are kept under {out_dir}; no network config written", file=sys.stderr)
        return 128 + signal_of(exc)
    from ddlbench.commbench import report

    print(report.render(new))
    print(report.plots(new, Path(a.results) / "commbench"))
    print(f"\n{len(new)} records written under {out_dir} in {time.monotonic() - t0:.0f} s")
    if still_running is not None:  # a network fitted from part of the sweep would pass for the whole
        print(f"commbench: no network config written: {still_running}; rerun make commbench once squeue "
              f"answers", file=sys.stderr)
        return 1
    if a.slurm:
        jobs = sorted({r["network"]["slurm_job"] for r in new if r.get("network")})
        name, how = a.network_name or f"slurm-{a.partition}", \
            f"make commbench CLUSTER=slurm (Slurm job {', '.join(map(str, jobs))}, partition {a.partition}, one rank per node)"
    elif a.link:
        name, how = a.network_name or f"emulated-{a.link}", f"make commbench LINK={a.link} (emulated hosts)"
    else:
        name, how = a.network_name, "make commbench"
    # workers and servers share this machine's cores (host_cpu) on one host or its emulated hosts,
    # never across a Slurm job's nodes
    rows = new
    if a.pool:
        rows = pooled_rows(out_dir, new)
        how += f" (pooled: {len(rows)} records of {len({r.get('started_at') for r in rows})} sessions)"
    write_network(rows, name, out_dir, how, shared_cores=not a.slurm,
                  directory=Path(a.network_dir) if a.network_dir else None)
    return 1 if any("error" in r for r in new) else 0


@contextlib.contextmanager
def _hosts(a):
    """The emulated cluster for --link (brought up for this invocation and removed after; an
    interactive `make cluster-up` one is used as it is if it fits), else none."""
    if a.link is None:
        yield None
        return
    from ddlbench.launch.emulated import run_cluster
    from ddlbench.launch.netns import NetnsError

    need = a.workers + ([4] if "groups" in a.modes else []) + ([max(a.workers) + 1] if "ps" in a.modes else [])
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(run_cluster(max(need), a.link, None))  # groups: 2 and 4; ps: a server host
        except NetnsError as exc:
            raise BadInput(f"--link={a.link}: {exc}") from None
        yield cluster


def measurements(a) -> list[tuple[str, str, str, str | None, int]]:
    """(mode, backend, device, fallback_from, workers) of every measurement, in the order they run."""
    out = []
    for mode in a.modes:
        # seed 002 pairs ranks: even worker counts, 2 and 4 at least
        counts = list(range(2, max(4, max(a.workers)) + 1, 2)) if mode == "groups" else a.workers
        for backend, device, fallback_from in a.backends:
            if mode != "sizes" and backend in ("mpi4py", "horovod"):
                continue  # the seeds' experiments are about torch.distributed process groups
            if mode == "ps" and backend != "gloo":
                continue  # the PS engine has its own wire; Gloo only meets the ranks
            out += [(mode, backend, device, fallback_from, w) for w in counts]
    return out


def procs_of(mode: str, workers: int) -> int:
    return workers + (1 if mode == "ps" else 0)  # ps: the last rank is the server


def keep(results, base: dict, rows: list[dict], mode: str, backend: str, fallback_from, where: dict) -> list[dict]:
    """One measurement's rows as records, written under `results`."""
    rows = [{**base, "backend": backend, "fallback_from": fallback_from, "mode": mode, **where, **r} for r in rows]
    if rows:
        record.write_rows(results, rows)  # each step lands whole, no lock needed
    return rows


def _measure_all(a, spec: dict, base: dict, cluster) -> list[dict]:
    if a.slurm:
        return _measure_on_slurm(a, spec, base)
    new = []
    where = {} if cluster is None else {"network": {"emulated": True, "link": a.link,
                                                     "hosts": [h.hostname for h in cluster.hosts]}}
    for mode, backend, device, fallback_from, w in measurements(a):
        print(f"[commbench] {mode}: {backend} on {device}, {w} workers", flush=True)
        # one_host: every rank a process of this host (ps mode then times the per-machine topology too)
        mark = hostcpu.steal_mark()
        try:
            rows = launch(backend, device, w, {**spec, "mode": mode, "one_host": cluster is None}, a.timeout, cluster)
        except KeyboardInterrupt as exc:  # a signal: what this job had measured is kept too
            keep(a.results, base, getattr(exc, "rows", []), mode, backend, fallback_from, where)
            raise
        # every rank ran on this machine's cores (one host, or its emulated hosts): what the
        # hypervisor gave other guests meanwhile (`job_steal_share`, of the cores; `steal_warnings`)
        share = hostcpu.stolen_share(mark)
        stolen = {} if share is None else {"job_steal_share": share}
        new += keep(a.results, base, rows, mode, backend, fallback_from, {**where, **stolen})
    return new


def steal_warnings(rows: list[dict]) -> list[str]:
    """One line per commbench job whose machine lost metrics.DISTURBED_STEAL_SHARE of its cores or
    more to the hypervisor's other guests while it ran (`job_steal_share`): what it timed, and
    the network fitted from it, measured that neighbour too."""
    from ddlbench import metrics

    jobs = {(r.get("mode"), r.get("backend"), r.get("workers"), r.get("started_at")): r["job_steal_share"]
            for r in rows if metrics.disturbed(r.get("job_steal_share"))}
    return [f"the {mode} job of {backend} at {w} workers lost {share:.0%} of this machine's cores to other guests "
            f"of the hypervisor while it ran: what it timed, and the network fitted from it, measured them too; "
            f"run make commbench again on a quieter machine"
            for (mode, backend, w, _), share in sorted(jobs.items(), key=lambda kv: tuple(map(str, kv[0])))]


def _measure_on_slurm(a, spec: dict, base: dict) -> list[dict]:
    """Every measurement in one Slurm job, one rank per node (commbench.slurm); the records say
    which job and which nodes each one ran on."""
    from ddlbench.commbench import slurm

    todo = measurements(a)
    folder = Path(a.results).resolve() / "commbench" / f"slurm-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = []
    for k, (mode, backend, device, fallback_from, w) in enumerate(todo):
        path = folder / f"spec-{k}.json"
        path.write_text(json.dumps({**spec, "mode": mode, "backend": backend, "device": device,
                                    "torch_backend": backend, "out": str(folder / f"rows-{k}.jsonl")}))
        jobs.append({"procs": procs_of(mode, w), "spec": str(path), "mode": mode, "backend": backend,
                     "fallback_from": fallback_from, "workers": w})
    cuda = any(device == "cuda" for _, _, device, _, _ in todo)
    common = {"results": str(Path(a.results).resolve()), "base": base, "partition": a.partition}
    return slurm.submit_and_collect(folder, jobs, a.partition, a.time_min, cuda, a.timeout, common, a.sbatch)


def placement(row: dict) -> tuple | None:
    """Where a commbench record was measured, as `pooled_rows` matches it: ("emulated", link)
    across the emulated hosts, ("local",) on one host; None for anything else (a Slurm job)."""
    net = row.get("network")
    if not net:
        return ("local",)
    if net.get("emulated"):
        return ("emulated", net.get("link"))
    return None


def pooled_rows(records: Path, new: list[dict]) -> list[dict]:
    """This invocation's rows (`new`, already written under `records`) and every earlier commbench
    record there measured in the same place (`placement`; on one host, only this host's files:
    record.write_rows names each after its host). The fits take medians over repeated records
    (predict.network.commbench_network), so several sessions' rounds steady a calibration that one
    session's noise moves: two emulated benches here scored 8 and 5 of 8 methods within 10% on
    their own sessions' networks, 7 and 6 on both sessions pooled."""
    places = {placement(r) for r in new} - {None}
    if len(places) != 1:
        return new
    [place] = places
    from ddlbench.analysis.records import load

    host = f"-{record.host_tag()}-"
    files = [f for f in sorted(Path(records).glob("*.jsonl")) if place != ("local",) or host in f.name]
    rows = [r for r in load(files, check=False).records if "mode" in r and placement(r) == place]
    return rows or new


def write_network(rows: list[dict], name: str | None, data_path: Path, how: str = "make commbench",
                  shared_cores: bool = True, directory: Path | None = None) -> Path | None:
    """The predictor's network config for this machine from this invocation's 2-worker
    all-reduce records (predict.network.commbench_network), if they include any, written as
    conf/network/<name>.yaml, or into `directory` (--network-dir)."""
    from ddlbench.predict import network

    if name == "none" or not any(r.get("workers") == 2 and r.get("collective") == "all_reduce" for r in rows):
        return None
    name = name or network.local_network_name()
    try:
        spec = network.commbench_network(rows, name, f"{how}, {data_path} at {record.now_iso()}",
                                         shared_cores=shared_cores)
    except ValueError as exc:
        print(f"commbench: no network config written: {exc}", file=sys.stderr)
        return None
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    path, kept = network.replace_config(spec, directory)
    print(f"network config for the predictor written to {path}{f' (NETWORK={name})' if directory is None else ''}"
          + (f"; the one it replaced is kept as {kept}" if kept else ""))
    for warning in (spec.get("warnings") or []) + steal_warnings(rows):
        print(f"commbench: warning: {warning}", file=sys.stderr)
    return path
