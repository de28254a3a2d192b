"""Every helper thread of a method makes its CUDA calls on the rank's own GPU.

A new thread starts on cuda:0. Its first CUDA call there (synchronizing an event, or leaving a
`torch.cuda.stream` block, which restores cuda:0's stream) creates a context on GPU 0, so every
rank of a node would hold one there, out of rank 0's memory. This CPU stand-in replaces
torch.cuda with fakes that note, per call, the thread and the device that thread had bound;
the rank's device here is cuda:1.
"""
from __future__ import annotations

import ast
import contextlib
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ddlbench.methods import base
from ddlbench.methods.ps_stage import Lane, Stager
from ddlbench.methods.transport import AllReduce

RANK_DEVICE = torch.device("cuda", 1)
METHODS_DIR = Path(base.__file__).parent


class FakeCuda:
    """torch.cuda's calls that the methods' threads make, each noted with the thread's device."""

    def __init__(self):
        self.bound = threading.local()
        self.calls: list[tuple[str, str, torch.device | None]] = []
        self.lock = threading.Lock()

    def note(self, what: str) -> None:
        with self.lock:
            self.calls.append((threading.current_thread().name, what, getattr(self.bound, "device", None)))

    def set_device(self, device) -> None:
        self.bound.device = torch.device(device)

    def install(self, monkeypatch) -> None:
        fake = self

        class Stream:
            def __init__(self, device=None):
                fake.note("Stream")

            def wait_stream(self, other):
                fake.note("wait_stream")

            def wait_event(self, event):
                fake.note("wait_event")

        class Event:
            def __init__(self, *args, **kwargs):
                fake.note("Event")

            def record(self, stream=None):
                fake.note("Event.record")

            def synchronize(self):
                fake.note("Event.synchronize")

        @contextlib.contextmanager
        def stream(s):
            fake.note("stream")
            yield
            fake.note("stream exit")  # restores cuda:0's stream on an unbound thread

        monkeypatch.setattr(torch.cuda, "set_device", self.set_device)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(device))
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: fake.note("record_stream"))

    def helper_calls(self) -> list[tuple[str, str, torch.device | None]]:
        main = threading.main_thread().name
        return [c for c in self.calls if c[0] != main]


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    fake.install(monkeypatch)
    fake.set_device(RANK_DEVICE)  # the rank's main thread has its device set (launch.worker)
    return fake


def assert_on_rank_device(fake: FakeCuda, threads: set[str]) -> None:
    calls = fake.helper_calls()
    assert {c[0] for c in calls} >= threads, f"expected CUDA calls from {threads}, got {calls}"
    wrong = [c for c in calls if c[2] != RANK_DEVICE]
    assert not wrong, f"CUDA calls on a thread without the rank's device {RANK_DEVICE}: {wrong}"


def test_start_thread_binds_the_device_before_the_target_runs(cuda):
    seen = []
    base.start_thread(lambda: seen.append(getattr(cuda.bound, "device", None)), "probe", RANK_DEVICE).join(5)
    assert seen == [RANK_DEVICE]
    seen.clear()
    base.start_thread(lambda: seen.append(getattr(cuda.bound, "device", None)), "cpu-probe", torch.device("cpu")).join(5)
    assert seen == [None]  # off CUDA nothing is bound


def test_ps_staging_lanes_run_on_the_ranks_gpu(cuda):
    errors = []
    stager = Stager(RANK_DEVICE, errors.append)
    done = threading.Event()
    view, buf = torch.arange(4.0), torch.zeros(4)
    stager.to_host(view, buf, None, lambda host: None)
    out, bounce = torch.zeros(4), torch.zeros(4)
    stager.to_device(torch.full((4,), 6.0), out, 2, bounce, done.set)
    assert done.wait(5), errors
    stager.close(5)
    assert not errors
    assert torch.equal(out, torch.full((4,), 3.0))
    assert_on_rank_device(cuda, {"ps-d2h", "ps-h2d", "ps-h2d-done"})


def test_allreduce_completion_thread_runs_on_the_ranks_gpu(cuda):
    ctx = SimpleNamespace(device=RANK_DEVICE, world=2, group=None, comm_timeout_s=5,
                          tracer=SimpleNamespace(enabled=False))
    transport = AllReduce(ctx)
    work = SimpleNamespace(wait=lambda: cuda.note("work.wait"))
    landed = transport.track(work, 0.0, {}, None)
    assert landed.wait(5)
    transport.close()
    assert_on_rank_device(cuda, {"allreduce-completion"})


def test_a_lane_off_cuda_binds_nothing(cuda):
    ran = threading.Event()
    lane = Lane("cpu-lane", lambda exc: None)
    lane.put(lambda: (cuda.note("call"), ran.set()))
    assert ran.wait(5)
    lane.close(5)
    assert [c[2] for c in cuda.helper_calls()] == [None]


def test_every_helper_thread_of_the_methods_starts_through_start_thread():
    """A thread started any other way would begin on cuda:0 (the tests above cover the staging
    lanes and the all-reduce's completion; this covers every other thread the methods start)."""
    offenders = []
    for path in sorted(METHODS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Thread" \
                    and path.name != "base.py":
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"threads started without binding the rank's device: {offenders}"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc: thread names are Linux's here")
def test_a_helper_thread_is_named_in_the_kernel_for_top_and_per_thread_cpu():
    """`top -H`, `ps -L` and /proc show a method's helper threads by name (Python's own thread
    name never reaches the kernel): "ddlb-" and the start of the name, Linux's 15 characters."""
    seen, go = [], threading.Event()

    def note() -> None:
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())
        go.wait(5)

    thread = base.start_thread(note, "bytescheduler")
    go.set()
    thread.join(5)
    assert seen == ["ddlb-byteschedu"]
