"""The suite's own plumbing (tests/conftest.py): it must run without pytest-xdist too, as a
GPU machine's bare pytest or `pytest -p no:xdist` runs it, not only under `make test`'s two
workers; and under xdist a module's shared runs stay on one worker while the GPU tier spreads."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_the_suite_collects_with_xdist_turned_off():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "tests/unit/test_metrics.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "test_metrics.py::" in proc.stdout


def _conftest():
    """tests/conftest.py itself: `import conftest` gets whichever conftest pytest loaded last
    (tests/emulated has one too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_conftest", REPO / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_xdist_keeps_a_module_together_but_spreads_the_gpu_tier_by_test():
    scope_of = _conftest().scope_of

    a, b = "tests/multiproc/test_methods.py::test_a[x]", "tests/multiproc/test_methods.py::test_b"
    assert scope_of(a) == scope_of(b) == "tests/multiproc/test_methods.py"  # its module fixtures are made once
    assert scope_of("tests/emulated/test_netns.py::t") == scope_of("tests/emulated/test_emulated_runs.py::t")
    g1, g2 = "tests/gpu/test_gpu.py::test_x[bsp-a2a]", "tests/gpu/test_gpu.py::test_x[ddp]"
    assert scope_of(g1) != scope_of(g2)
    # the tests that time the GPU stay together, apart from the runs
    timing = {scope_of("tests/gpu/test_gpu.py::test_cuda_clock_times_each_call_and_covers_the_loop"),
              scope_of("tests/gpu/test_ps_staging.py::test_a_pull_lands_divided_before_it_counts_as_done_and_off_the_io_thread"),
              scope_of("tests/gpu/test_measure_gpu.py::test_a_measured_profile_keeps_up_with_the_run")}
    assert len(timing) == 1 and scope_of(g1) not in timing


def test_every_gpu_timing_entry_names_a_test():
    import re

    for entry in _conftest().GPU_TIMING:
        path, name = entry.split("::")
        assert re.search(rf"^def {re.escape(name)}", (REPO / path).read_text(), re.M), entry


def test_a_gpu_timing_test_holds_the_gpu_alone_and_gets_its_turn(tmp_path):
    """gpu_turn: shared holders run side by side; one that wants the GPU alone waits for them,
    and shared holders that come while it waits wait behind it (else, with xdist's workers
    starting GPU tests one after another, its turn might never come)."""
    import threading
    import time

    gpu_turn = _conftest().gpu_turn
    order, first_in = [], threading.Event()
    release_first = threading.Event()

    def hold(name, alone, release=None, entered=None):
        with gpu_turn(tmp_path, alone):
            order.append(f"{name} in")
            if entered is not None:
                entered.set()
            if release is not None:
                release.wait(10)
            else:
                time.sleep(0.05)
            order.append(f"{name} out")

    first = threading.Thread(target=hold, args=("shared1", False, release_first, first_in))
    first.start()
    assert first_in.wait(10)
    with gpu_turn(tmp_path, False):  # a second shared holder gets in beside the first
        order.append("shared2 in+out")
    timing = threading.Thread(target=hold, args=("alone", True))
    timing.start()
    time.sleep(0.3)  # the timing test now waits for shared1, holding the turnstile
    late = threading.Thread(target=hold, args=("shared3", False))
    late.start()
    time.sleep(0.3)
    assert order == ["shared1 in", "shared2 in+out"]  # neither the timing test nor the late one is in
    release_first.set()
    for t in (first, timing, late):
        t.join(10)
    assert order == ["shared1 in", "shared2 in+out", "shared1 out", "alone in", "alone out", "shared3 in", "shared3 out"]
