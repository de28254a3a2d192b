"""The torch engine under mpirun: ranks from the MPI environment (MPICH's PMI_* or Open MPI's
OMPI_COMM_WORLD_*), workers and a parameter server in one MPI job, lossless."""
from pathlib import Path

import pytest
import torch

from helpers import ddlbench, records, reference_parameters

pytestmark = pytest.mark.multiproc


def test_mpirun_runs_workers_and_a_server_losslessly(tmp_path):
    import shutil
    import sys

    if not (shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))):
        pytest.skip("no mpiexec (pip install mpich)")
    ddlbench("method=wfbp-ps", "model=tiny-resnet", "workers=2", "launcher=mpirun", "profile.warmup_iters=1",
             "profile.measured_iters=2", "profile.repeats=1", "local_batch=4", "save_params=true",
             results=tmp_path, check=True)
    (rec,) = records(tmp_path)
    assert rec["status"] == "ok" and rec["launcher"] == "mpirun" and rec["servers"] == 1
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6)


def test_mpirun_without_an_mpi_is_a_clear_error(tmp_path):
    proc = ddlbench("method=bsp-a2a", "launcher=mpirun", "launcher.command=no-such-mpiexec", results=tmp_path)
    assert proc.returncode == 2 and not records(tmp_path)
    assert proc.stderr.strip().splitlines() == [
        "ddlbench: error: launcher=mpirun: 'no-such-mpiexec' is not on PATH; accepted: an MPI's mpiexec or mpirun "
        "(pip install mpich, or your cluster's MPI module)"]
