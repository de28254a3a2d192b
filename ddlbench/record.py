"""Run records: one JSON file per run under `<results>/records/`, written whole and then renamed.

The record is the source of truth; tables and figures are views of it. `write` needs no lock, so
it holds on filesystems whose locks do not span nodes (Lustre `localflock`, NFSv3 `nolock`,
BeeGFS): every writer creates a file of its own, under a temporary name (host, pid, random) that
it renames into place, so a reader (or a crash at any moment) sees the whole record or none, and
the cost of a write does not grow with the number of runs. Readers (`analysis.records.load`)
merge these files with any `runs.jsonl` earlier versions appended to.

Commbench's rows go the same way, one `.jsonl` file per measured step (`write_rows`). `append`
(one file, one `O_APPEND` write of whole lines) is for `make predict`'s `predictions.jsonl`, which
its contract names: it takes `flock` where the filesystem has it and goes on without it where it
does not (ENOLCK), so a prediction is never lost to a missing lock.
"""
from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import secrets
import socket
import subprocess
from pathlib import Path

RECORDS_DIR = "records"   # <results>/records/<written>-<host>-<pid>-<random>.json, one run each
LEGACY_FILE = "runs.jsonl"  # what earlier versions appended to; still read

# Environment knobs that change what a run measures: recorded in every run (STYLE: Horovod).
KNOB_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "UCX_", "OMPI_MCA_", "TORCH_DISTRIBUTED_", "TORCH_NCCL_", "DDLBENCH_")
KNOB_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")
PACKAGES = ("torch", "torchvision", "transformers", "hydra-core", "omegaconf", "numpy", "horovod", "mpi4py", "byteps")

FIELDS = (
    "method", "model", "workers", "servers", "engine", "backend", "device", "local_batch",
    "warmup_iters", "measured_iters", "repeats", "iter_times_s", "samples_per_sec", "samples_per_sec_std",
    "param_fingerprint", "groups", "trace", "config", "versions", "git_commit", "hosts", "started_at",
    "status", "error", "config_hash", "network",
)


class RecordError(OSError):
    """A record could not be written; the message is one line saying where and why."""


def records_dir(results_dir) -> Path:
    return Path(results_dir) / RECORDS_DIR


def write(results_dir, rec: dict) -> Path:
    """Write one run's record as its own file under `<results_dir>/records/` and return its path.

    The bytes go to a hidden temporary name unique to this host, process and call, are flushed
    to disk, and the file is then renamed to its final (equally unique) name: no lock, no other
    writer's file touched. Directories are created with the caller's umask and never chmod-ed, so
    a shared results directory keeps its owner's mode. On any error (a full disk, a read-only or
    foreign directory) the temporary file is removed and RecordError says so in one line."""
    return _write_whole(results_dir, (json.dumps(rec, default=str) + "\n").encode(), ".json")


def write_rows(results_dir, rows: list[dict]) -> Path:
    """Several records (commbench's rows of one step) as one `.jsonl` file of their own under
    `<results_dir>/records/`, written as `write` writes one: all of them land, or none."""
    return _write_whole(results_dir, "".join(json.dumps(r, default=str) + "\n" for r in rows).encode(), ".jsonl")


def host_tag() -> str:
    """This host's name as record file names carry it."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


def _write_whole(results_dir, data: bytes, suffix: str) -> Path:
    folder = records_dir(results_dir)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")  # names sort as written
    name = f"{stamp}-{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"
    final, tmp = folder / f"{name}{suffix}", folder / f".{name}{suffix}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        why = exc.strerror or str(exc)
        code = f" ({errno.errorcode.get(exc.errno, exc.errno)})" if exc.errno else ""
        raise RecordError(f"run record not written to {folder}: {why}{code}; "
                          f"free space or fix permissions there, then run again") from None
    return final


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def unusable_dir(path: Path) -> tuple[Path, str] | None:
    """Why `path` cannot be a directory this user writes in (or creates): (the deepest of it and
    its parents that exists, "not a directory" or "not writable"), or None. A dangling link
    counts as there. Nothing is created."""
    for d in (path, *Path(path).absolute().parents):
        if not d.exists() and not d.is_symlink():
            continue
        if not d.is_dir():
            return d, "not a directory"
        if not os.access(d, os.W_OK | os.X_OK):
            return d, "not writable"
        return None
    return None


def append(path: Path, *records: dict) -> None:
    """Append the records' lines to `path` in one write. Under `flock` where the filesystem
    has locks; where it has none (ENOLCK: NFS `nolock`, Lustre without `flock`) without one,
    as `O_APPEND` alone still places each write at the end on a local or single-writer file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "".join(json.dumps(r, default=str) + "\n" for r in records).encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":
            line = b"\n" + line  # never glue a record onto a line someone else left unfinished
        _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


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


# Settings of the resolved config that do not change what a run measures: where its outputs
# go and what it keeps (results_dir, trace files, params.pt), whether it runs at all
# (skip_recorded, launcher.dry_run), what was predicted for it (METHOD=auto), how long anyone waits before calling it failed (timeouts,
# launcher.wait, the job's time limit) and whom the cluster bills. Every other setting (method,
# partition, credit and fusion sizes, transport, seed, engine, launcher topology, model
# dimensions, profile, device, backend, ...) is part of the configuration.
UNMEASURED = ("results_dir", "prediction", "trace", "save_params", "skip_recorded", "comm_timeout_s", "startup_timeout_s",
              "hydra", "launcher.wait", "launcher.dry_run", "launcher.stall_timeout_s", "launcher.time_min",
              "launcher.account", "launcher.qos")


def config_hash(config: dict | None, drop: tuple[str, ...] = ()) -> str | None:
    """A digest of the whole resolved configuration (the record's `config`) less UNMEASURED and
    `drop` (dotted keys): two runs with the same hash measured the same thing. None without a
    config (records from before configs were recorded)."""
    if not config:
        return None
    config = json.loads(json.dumps(config, default=str))  # a deep copy, with every value as recorded
    for dotted in UNMEASURED + tuple(drop):
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_key(rec: dict):
    """What makes two runs the same configuration (resuming sweeps, Slurm job names): the record's
    `config_hash`, or for records written before it existed, the hash of their recorded config."""
    return rec.get("config_hash") or config_hash(rec.get("config"))
