"""`python -m ddlbench.commbench` (`make commbench`): measure, append records, print the table,
draw the plots and recommend a backend per size range. --help lists the options."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddlbench import record
from ddlbench.commbench.backends import BACKENDS, mpiexec, why_unavailable
from ddlbench.commbench.collectives import COLLECTIVES, DTYPES

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
    ap.add_argument("--mode", default="sizes,groups,fusion,ps",
                    help=f"comma list of {', '.join(MODES)} (ps: push/pull through ddlbench's PS engine, W workers + 1 server)")
    ap.add_argument("--group-bytes", default="400", help="groups mode: bytes per all-reduce (seed 002: 10x10 fp32)")
    ap.add_argument("--fusion-models", default="resnet50,bert-base")
    ap.add_argument("--fusion-iters", type=int, default=10)
    ap.add_argument("--results", default="results")
    ap.add_argument("--network-name", default=None,
                    help="write conf/network/NAME.yaml from the 2-worker all-reduce (default local-<hostname>; 'none': do not)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one job may take")
    ap.add_argument("--link", default=None,
                    help="run each job across hosts of an emulated cluster (one worker per host, links shaped "
                         "to this tc rate, e.g. 1gbit; root), as from several nodes; the network config is "
                         "then emulated-LINK")
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
        other = [] if a.backends == "auto" else [b for b in _list(a.backends, BACKENDS, "backend") if b not in ACROSS_HOSTS]
        if other:
            raise BadInput(f"backends {','.join(other)} with --link={a.link}: each host's rank starts under torchrun; "
                           f"accepted: {', '.join(ACROSS_HOSTS)}")
    a.backends = resolve_backends(a)
    if a.link is not None:  # auto: every available one that torchrun starts across the hosts
        a.backends = [x for x in a.backends if x[0] in ACROSS_HOSTS]
    return a


def resolve_backends(a) -> list[tuple[str, str, str | None]]:
    """[(backend, device, fallback_from)]: what runs. A requested backend this machine lacks is
    said in one line and replaced by Gloo (recorded); NCCL without GPUs is an error."""
    requested = list(BACKENDS) if a.backends == "auto" else _list(a.backends, BACKENDS, "backend")
    out = []
    for device in a.devices:
        if device == "cuda" and "NCCL needs" in (why_unavailable("nccl", "cuda") or ""):
            raise BadInput("devices=cuda but no CUDA GPU is visible; accepted here: cpu")
        for b in requested:
            if device == "cpu" and b == "nccl":
                if a.backends == "auto":
                    continue
                raise BadInput("backend 'nccl' needs CUDA GPUs and none is visible; accepted here: gloo, mpi4py")
            if device == "cuda" and b in ("mpi4py", "horovod"):
                continue
            reason = why_unavailable(b, device)
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
        target = ["-m", "ddlbench.commbench.worker", f"{tmp}/spec.json"]
        procs = workers + (1 if spec["mode"] == "ps" else 0)  # ps: the last rank is the server
        if cluster is not None:
            rc = run_jobs(across_hosts(cluster, procs, target, env, cuda=device == "cuda"), timeout)
            return _rows(spec, rc, backend, workers, timeout, env)
        if backend == "mpi4py":
            cmd = [mpiexec(), "-n", str(workers), sys.executable, *target]
        elif backend == "horovod":
            from ddlbench.engines import unfused_env
            from ddlbench.launch.horovodrun import argv

            # one collective per call, as for the methods; HOROVOD_* set by the user win
            env.update({k: v for k, v in unfused_env().items() if k not in os.environ})
            cmd = argv(workers, None, None) + [sys.executable, *target]
        else:
            from ddlbench.launch.local import torchrun

            cmd = torchrun(procs, target)
        return _rows(spec, run_jobs([(cmd, env)], timeout), backend, workers, timeout, env)


def _rows(spec: dict, rc: int | None, backend: str, workers: int, timeout: float, env: dict) -> list[dict]:
    rows = [json.loads(line) for line in Path(spec["out"]).read_text().splitlines()] if Path(spec["out"]).exists() else []
    if rc is None:
        rows = [{"error": f"{backend} x{workers} job timed out after {timeout:g} s (--timeout); every process "
                          "of it was killed"}]
    elif rc != 0 and not rows:
        rows = [{"error": f"{backend} x{workers} job exited with {rc}"}]
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


def run_jobs(jobs: list[tuple[list[str], dict]], timeout_s: float) -> int | None:
    """Run one job's launchers (torchrun, mpiexec or horovodrun and their ranks; one per host
    across emulated hosts), each in a process group of its own; the first non-zero exit code (0
    if none), or None when they ran past `timeout_s`. Whatever ends the wait (the timeout, a
    failed host, Ctrl-C, an error), every group is killed: killing a launcher alone would leave
    its ranks running, and a host whose peer died would wait for it."""
    err = None if sys.stderr.isatty() else subprocess.DEVNULL
    procs = []
    deadline = time.monotonic() + timeout_s
    try:
        for cmd, env in jobs:
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, start_new_session=True, stderr=err))
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


def main(argv=None) -> int:
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
    except BadInput as exc:
        print(f"commbench: error: {exc}", file=sys.stderr)
        return 2
    out_dir = record.records_dir(a.results)
    base = {"started_at": record.now_iso(), "versions": record.versions(), "git_commit": record.git_commit()}
    spec = {"collectives": a.collectives, "dtypes": a.dtypes, "min_bytes": a.min_bytes, "max_bytes": a.max_bytes,
            "factor": a.factor, "iters": a.iters, "warmup": a.warmup, "group_bytes": a.group_bytes,
            "fusion_models": a.fusion_models.split(","), "fusion_iters": a.fusion_iters, "fusion_warmup": 2}
    t0 = time.monotonic()
    try:
        with _hosts(a) as cluster:
            new = _measure_all(a, spec, base, cluster)
    except BadInput as exc:
        print(f"commbench: error: {exc}", file=sys.stderr)
        return 2
    from ddlbench.commbench import report

    print(report.render(new))
    print(report.plots(new, Path(a.results) / "commbench"))
    print(f"\n{len(new)} records written under {out_dir} in {time.monotonic() - t0:.0f} s")
    name = a.network_name or (f"emulated-{a.link}" if a.link else None)
    write_network(new, name, out_dir, f"make commbench LINK={a.link} (emulated hosts)" if a.link else "make commbench")
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


def _measure_all(a, spec: dict, base: dict, cluster) -> list[dict]:
    new = []
    where = {} if cluster is None else {"network": {"emulated": True, "link": a.link,
                                                     "hosts": [h.hostname for h in cluster.hosts]}}
    for mode in a.modes:
        # seed 002 pairs ranks: even worker counts, 2 and 4 at least
        counts = list(range(2, max(4, max(a.workers)) + 1, 2)) if mode == "groups" else a.workers
        for backend, device, fallback_from in a.backends:
            if mode != "sizes" and backend in ("mpi4py", "horovod"):
                continue  # the seeds' experiments are about torch.distributed process groups
            if mode == "ps" and backend != "gloo":
                continue  # the PS engine has its own wire; Gloo only meets the ranks
            for w in counts:
                print(f"[commbench] {mode}: {backend} on {device}, {w} workers", flush=True)
                rows = launch(backend, device, w, {**spec, "mode": mode}, a.timeout, cluster)
                rows = [{**base, "backend": backend, "fallback_from": fallback_from, "mode": mode, **where, **r}
                        for r in rows]
                if rows:
                    record.write_rows(a.results, rows)  # each step lands whole, no lock needed
                new += rows
    return new


def write_network(rows: list[dict], name: str | None, data_path: Path, how: str = "make commbench") -> Path | None:
    """The predictor's network config for this machine from this invocation's 2-worker
    all-reduce records (predict.network.commbench_network), if they include any."""
    from ddlbench.predict import auto, network

    if name == "none" or not any(r.get("workers") == 2 and r.get("collective") == "all_reduce" for r in rows):
        return None
    name = name or auto.local_network_name()
    try:
        spec = network.commbench_network(rows, name, f"{how}, {data_path} at {record.now_iso()}")
    except ValueError as exc:
        print(f"commbench: no network config written: {exc}", file=sys.stderr)
        return None
    path = network.write_config(spec)
    print(f"network config for the predictor written to {path} (NETWORK={name})")
    return path
