"""Helpers shared by the multi-process tests: run the CLI, read its records, start Slurm."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ddlbench import models
from ddlbench.models.data import batch_index, stream_seed

REPO = Path(__file__).resolve().parents[1]


def ddlbench(*args: str, results: Path, timeout: float = 300, check: bool = False,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m ddlbench ARGS results_dir=RESULTS` (with `env` added to the environment)
    and return the finished process."""
    cmd = [sys.executable, "-m", "ddlbench", *args, f"results_dir={results}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**_env(), **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _env() -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1")


SLURM_SCRIPT = REPO / "tests" / "cluster" / "slurm.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


PORT_TRIES = 3  # `two_ranks`' rendezvous ports, each a fresh one after the last was taken


def two_ranks(script: str, timeout_s: float) -> list[str]:
    """`script` (python -c) as ranks 0 and 1 at once, each given its rank and a free port
    (argv 1 and 2) for its process group's rendezvous; their stdouts, once both exited 0. A
    rank that fails ends the other at once, and the assertion shows the failed rank's stderr
    (else the survivor waits out its start-up bound and the cause is lost). `free_port` only
    found the port free: where another process took it before rank 0 bound it (the suite runs
    two pytest workers, whose processes take ports all the time), rank 0 fails with the address
    in use and the pair starts again on a fresh port, PORT_TRIES times at most."""
    for _ in range(PORT_TRIES):
        port = str(free_port())
        # files, not pipes: nobody reads a pipe while the ranks run, and a full one would stall them
        with contextlib.ExitStack() as files:
            logs = [tuple(files.enter_context(tempfile.TemporaryFile("w+")) for _ in "oe") for _ in range(2)]
            procs = [subprocess.Popen([sys.executable, "-c", script, str(r), port], cwd=REPO, text=True,
                                      stdout=out, stderr=err) for r, (out, err) in enumerate(logs)]
            failed = _first_failure(procs, timeout_s)
            outs = [tuple(_read(f) for f in pair) for pair in logs]
        if failed is None:
            return [out for out, _ in outs]
        err = outs[failed][1]
        if "address already in use" not in err.lower():
            raise AssertionError(f"rank {failed} exited {procs[failed].returncode}:\n{err[-2000:]}")
    raise AssertionError(f"rank 0 found its rendezvous port in use {PORT_TRIES} times:\n{err[-2000:]}")


def _read(f) -> str:
    f.seek(0)
    return f.read()


def _first_failure(procs: list[subprocess.Popen], timeout_s: float) -> int | None:
    """Wait for `procs`: the index of the first to exit non-zero (the others killed), else None
    once all exited 0. Past `timeout_s` every one is killed and the wait fails."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None or None not in codes:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    if failed is None and None in codes:
        raise AssertionError(f"the ranks ran past {timeout_s} s")
    return failed


@contextlib.contextmanager
def slurm_cluster(d: Path, emulated: bool = False):
    """A Slurm cluster of tests/cluster/slurm.sh in `d` (single-node, or one slurmd per host of
    the emulated cluster that is up), on free ports; yields its slurm.conf. At the end every
    daemon is stopped by its pid file and must be gone. Skips, with the reason, where Slurm
    cannot be started or installed (not root, no apt-get)."""
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld and slurmd here needs root")
    inst = subprocess.run(["bash", str(SLURM_SCRIPT), "install"], capture_output=True, text=True, timeout=1200)
    if inst.returncode == 3:
        pytest.skip(inst.stderr.strip())
    assert inst.returncode == 0, inst.stderr[-2000:]
    env = dict(os.environ, SLURMCTLD_PORT=str(free_port()), SLURMD_PORT=str(free_port()), PYTHON=sys.executable,
               EMULATED=str(int(emulated)))
    # SIGTERM (a CI cancel, `timeout`) ends the session as Ctrl-C does, so the daemons are stopped
    old_handler = signal.signal(signal.SIGTERM, _interrupt)
    start = subprocess.run(["bash", str(SLURM_SCRIPT), "start", str(d)], env=env, capture_output=True, text=True,
                           timeout=120)
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        yield d / "slurm.conf"
    finally:
        pid_files = [*d.glob("slurm*.pid"), d / "munge" / "munged.pid"]
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop", str(d)], timeout=60)
        for f in pid_files:
            if f.exists():
                pid = int(f.read_text())
                for _ in range(50):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.1)
                assert not Path(f"/proc/{pid}").exists(), f"{f.name}: daemon {pid} still running"
        signal.signal(signal.SIGTERM, old_handler)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def records(results: Path) -> list[dict]:
    """Every record under the results directory (records/*.json merged with any runs.jsonl), in
    the order written, as written: the tables' field checks (analysis.records.problem) would hide
    an earlier version's minimal records, which these tests show are never lost."""
    from ddlbench.analysis.records import load

    return load([results], check=False).records


def reference_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    """Single-process SGD on the union of the workers' batches: each worker's micro-batch
    (BatchNorm normalises per worker, as in data-parallel training) contributes loss / N.

    The iterations of one launch: every repeat with repeat_mode=process, one repeat with
    repeat_mode=launch (each launch starts afresh from the seed). Batches are picked as the
    driver picks them (`batch_index` over `profile.distinct_batches`)."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    p = cfg.profile
    w = models.build(cfg.model, cfg.local_batch, cfg.seed)
    opt = torch.optim.SGD(w.model.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum)
    repeats = 1 if p.repeat_mode == "launch" else p.repeats
    for it in range(repeats * (p.warmup_iters + p.measured_iters)):
        for rank in range(cfg.workers):
            batch = w.make_batch(cfg.seed, rank, batch_index(it, p.distinct_batches), torch.device("cpu"))
            torch.manual_seed(stream_seed(cfg.seed, rank, it))
            (w.loss(w.model, batch) / cfg.workers).backward()
        opt.step()
        opt.zero_grad()
    return {n: p.detach() for n, p in w.model.named_parameters()}


def iterations(rec, rank: int = 0) -> dict:
    """{iteration: {category: [trace events]}} of one rank's trace."""
    from collections import defaultdict

    from ddlbench.trace import load

    by_iter = defaultdict(lambda: defaultdict(list))
    for e in load(rec["trace"][rank]):
        by_iter[e["args"]["iter"]][e["cat"]].append(e)
    return by_iter


def scheduled_messages(rec, rank: int = 0) -> list[dict]:
    """One trace event per message a schedule sent: its all-reduce, or (PS) its push/pull to the
    servers (per machine, the node's reduce and broadcast around it carry the same message)."""
    from ddlbench.trace import load

    return [e for e in load(rec["trace"][rank]) if e["cat"] == "comm" and e["name"] in ("allreduce", "push_pull")]


def peak_bytes_in_flight(rec, rank: int = 0) -> int:
    """ByteScheduler's bytes in flight at their peak, from a rank's trace: each message from the
    scheduler's choice (`chosen_us`, else its launch) until credit came back, that is when the
    all-reduce landed or (PS) when the servers held the push (`pushed_us`)."""
    points = []
    for e in scheduled_messages(rec, rank):
        start = e["args"].get("chosen_us", e["ts"])
        end = e["args"]["pushed_us"] if rec["servers"] else e["ts"] + e["dur"]
        points += [(start, e["args"]["bytes"]), (end, -e["args"]["bytes"])]
    level = peak = 0
    for _, delta in sorted(points):  # releases before sends at a tie
        level += delta
        peak = max(peak, level)
    return peak


def terminate_once_iterating(argv: list[str], results: Path, pid_file: str, settle_s: float = 0.0,
                             start_timeout_s: float = 120) -> str:
    """Run `python -m ddlbench *argv`, send it SIGTERM once `runs/*/<pid_file>` exists (that rank
    started) and `settle_s` later, and return its output; it must exit as terminated (128 + 15)."""
    proc = subprocess.Popen([sys.executable, "-m", "ddlbench", *argv, f"results_dir={results}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + start_timeout_s
    while not list(results.glob(f"runs/*/{pid_file}")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    time.sleep(settle_s)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    return out
