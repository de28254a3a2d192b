"""Run records: one JSON object per run in `<results>/runs.jsonl`, appended atomically.

The record is the source of truth; tables and figures are views of it. Appending rewrites the
file through a temporary copy and `os.replace` under an exclusive lock, so a reader (or a crash
at any moment) sees either the old file or the old file plus one whole new line.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import functools
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path

# Environment knobs that change what a run measures: recorded in every run (STYLE: Horovod).
KNOB_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "UCX_", "OMPI_MCA_", "TORCH_DISTRIBUTED_", "TORCH_NCCL_", "DDLBENCH_")
KNOB_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")
PACKAGES = ("torch", "torchvision", "transformers", "hydra-core", "omegaconf", "numpy", "horovod", "mpi4py", "byteps")

FIELDS = (
    "method", "model", "workers", "servers", "engine", "backend", "device", "local_batch",
    "warmup_iters", "measured_iters", "repeats", "iter_times_s", "samples_per_sec", "samples_per_sec_std",
    "param_fingerprint", "groups", "trace", "config", "versions", "git_commit", "hosts", "started_at",
    "status", "error",
)


def append(path: Path, *records: dict) -> None:
    """Append the records as one step: all of them land, or none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "".join(json.dumps(r, default=str) + "\n" for r in records).encode()
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = path.read_bytes() if path.exists() else b""
        if old and not old.endswith(b"\n"):
            old += b"\n"  # never glue a record onto a line someone else left unfinished
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(old + line)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


@functools.lru_cache(maxsize=None)
def _versions() -> tuple:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return tuple(out.items())


def versions() -> dict:
    """Python's and the packages' versions, looked up once per process (a sweep runs its jobs in it)."""
    return dict(_versions())


def env_knobs(environ=None) -> dict:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(KNOB_PREFIXES) or k in KNOB_NAMES}


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """The commit of this checkout, with `-dirty` when it has uncommitted changes: the code this
    process imported, so asked once per process."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def config_key(rec: dict) -> tuple:
    """What makes two runs the same configuration (for resuming sweeps and grouping)."""
    return (rec.get("method"), rec.get("model"), rec.get("workers"), rec.get("servers"), rec.get("engine"),
            rec.get("backend"), rec.get("device"), rec.get("local_batch"), rec.get("warmup_iters"),
            rec.get("measured_iters"), rec.get("repeats"))
