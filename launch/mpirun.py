"""mpirun/mpiexec launcher: one MPI job of workers + servers, supervised like the local launcher.

Every rank reads its rank and size from the MPI environment (Open MPI's OMPI_COMM_WORLD_*, or
MPICH/Intel's PMI_*). torch.distributed then rendezvous at the first host on a free port; with
engine=horovod, Horovod's MPI controller takes the same ranks.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from ddlbench import hostcpu
from ddlbench.config import ConfigError


def executable(cfg) -> str:
    exe = shutil.which(cfg.launcher.command) or shutil.which(cfg.launcher.command, path=str(Path(sys.executable).parent))
    if exe is None:
        raise ConfigError(f"launcher=mpirun: {cfg.launcher.command!r} is not on PATH; accepted: an MPI's "
                          "mpiexec or mpirun (pip install mpich, or your cluster's MPI module)")
    return exe


def flavour(exe: str) -> str:
    """'openmpi', 'mpich' (Hydra: MPICH, Intel MPI, MVAPICH) or 'unknown'."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    return "mpich" if "HYDRA" in out or "Intel" in out else "unknown"


def command(cfg, run_dir: Path, env: dict, hosts: str | None = None, ssh: str | None = None) -> list[str]:
    """The mpiexec line for every rank: on `hosts` ("h1:n1,h2:n2"; default launcher.hosts, null =
    this host), reached with `ssh` where given (the emulated cluster's job-local ssh; default:
    the MPI's own choice)."""
    from . import worker_command

    exe = executable(cfg)
    kind = flavour(exe)
    n = cfg.workers + cfg.servers
    cmd = [exe, "-n", str(n)]
    hosts = cfg.launcher.get("hosts") if hosts is None else hosts
    if kind == "openmpi":
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if cfg.device == "cpu":
            cmd.append("--oversubscribe")
        if hosts:
            cmd += ["--host", hosts]
        if ssh:
            cmd += ["--mca", "plm_rsh_agent", ssh]
        for key in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "PYTHONUNBUFFERED"):
            cmd += ["-x", key]
        for key in (hostcpu.GLOO_LOOP_POLICY_ENV, hostcpu.PIN_RANKS_ENV):
            if key in env:
                cmd += ["-x", key]
    else:
        if hosts:
            cmd += ["-hosts", hosts]
        if ssh:  # Hydra's ssh bootstrap, with this ssh (else it may pick slurm or rsh by itself)
            cmd += ["-launcher", "ssh", "-launcher-exec", ssh]
    first = hosts.split(",")[0].split(":")[0] if hosts else "localhost"
    env["MASTER_ADDR"] = "127.0.0.1" if first == "localhost" else first
    env["MASTER_PORT"] = str(free_port())
    return cmd + list(cfg.launcher.get("extra_args", [])) + worker_command(run_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
