"""Test tiers, by what a test needs: tests/unit (pure, in-process), tests/multiproc (several
worker processes on this host, CPU and Gloo), tests/gpu (CUDA workers and NCCL) and
tests/cluster (a real Slurm). GPU and cluster tests carry the `gpu` and `cluster` markers and
skip, with the reason, where those are absent.

`make test` runs the suite on two pytest-xdist workers: most of its time is start-ups and
timeouts, not CPU. A worker takes a whole test module at a time, so a module's shared runs
(module- and session-scoped fixtures) are made once; tests/emulated, which shares one emulated
cluster per machine, goes to one worker as a whole; tests/gpu, which shares no fixtures, goes
test by test, but for its tests that time the GPU, which go to one worker together so that
they do not time each other (`scope_of`), and which hold the GPU alone while they run: the
other GPU tests' launches would otherwise run kernels beside them (`gpu_turn`). (xdist's
`--dist loadgroup` would do this with markers, but it rewrites `item._nodeid`, which pytest 9
no longer reads.)"""
import contextlib
import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from ddlbench import hostcpu

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # without pytest-xdist the suite runs in one process
    LoadScopeScheduling = None

# Each pytest process its own measuring lock (ddlbench.hostcpu.measuring): a run one xdist worker
# launches must not refuse the calibration another times beside it (they share the machine by
# design here), nor a bench on this machine the suite's.
MEASURING_LOCK = Path(tempfile.gettempdir()) / f"ddlbench-measuring-tests-{os.getpid()}.lock"
os.environ[hostcpu.MEASURING_LOCK_ENV] = str(MEASURING_LOCK)


def pytest_unconfigure(config):
    with contextlib.suppress(OSError):
        MEASURING_LOCK.unlink()


SHARED_SCOPES = {"tests/emulated/": "emulated-cluster"}  # folders whose modules share a machine-wide resource
# Folders whose tests share nothing (no module- or session-scoped fixtures): each test is its own
# unit. On a GPU machine the GPU tier's launches then run side by side (one GPU holds them
# all), not one module after another: test_gpu.py alone took over 5 minutes so on an H100.
PER_TEST = ("tests/gpu/",)
# ...but for the tests there that time the GPU: one unit, one after another on one worker.
GPU_TIMING = ("tests/gpu/test_ps_staging.py::test_a_", "tests/gpu/test_gpu.py::test_cuda_clock",
              "tests/gpu/test_gpu.py::test_mgwfbp_profiles", "tests/gpu/test_measure_gpu.py::test_a_measured_profile")


def scope_of(nodeid: str) -> str:
    """The unit pytest-xdist hands a worker at once (see the module's docstring)."""
    path = nodeid.split("::")[0]
    if nodeid.startswith(GPU_TIMING):
        return "gpu-timing"
    if path.startswith(PER_TEST):
        return nodeid
    return next((name for folder, name in SHARED_SCOPES.items() if path.startswith(folder)), path)


if LoadScopeScheduling is not None:
    class ModuleScheduling(LoadScopeScheduling):
        """One module per worker at a time; the folders of SHARED_SCOPES as one."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    @pytest.hookimpl(optionalhook=True)  # `pytest -p no:xdist` has no such hook: then it is not called
    def pytest_xdist_make_scheduler(config, log):
        return ModuleScheduling(config, log)


@contextlib.contextmanager
def gpu_turn(lock_dir: Path, alone: bool):
    """Hold the GPU, shared with the other GPU tests (`alone=False`) or alone (a GPU_TIMING
    test), across every pytest(-xdist) process that uses `lock_dir`. Two flock files: a test
    that wants the GPU alone takes the turnstile and keeps it while it waits for the shared
    holders to finish, so no new shared holder gets in meanwhile (it would never be its turn
    while the other workers keep starting GPU tests)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "gpu.turnstile", "a") as turnstile, open(lock_dir / "gpu.lock", "a") as gpu:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(gpu, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(gpu, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _gpu_turn(request, tmp_path_factory):
    """Every GPU test holds the GPU: the timing ones alone (`gpu_turn`). The lock files sit in
    the directory every xdist worker's base temp dir shares."""
    if "gpu" not in request.keywords:
        yield
        return
    with gpu_turn(tmp_path_factory.getbasetemp().parent / "gpu-turn", request.node.nodeid.startswith(GPU_TIMING)):
        yield


def pytest_collection_modifyitems(config, items):
    import torch

    no_gpu = pytest.mark.skip(reason="needs CUDA GPUs; none visible here")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
