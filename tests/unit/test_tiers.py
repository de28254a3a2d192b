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


def test_xdist_keeps_a_module_together_but_spreads_the_gpu_tier_by_test():
    from conftest import scope_of

    a, b = "tests/multiproc/test_methods.py::test_a[x]", "tests/multiproc/test_methods.py::test_b"
    assert scope_of(a) == scope_of(b) == "tests/multiproc/test_methods.py"  # its module fixtures are made once
    assert scope_of("tests/emulated/test_netns.py::t") == scope_of("tests/emulated/test_emulated_runs.py::t")
    g1, g2 = "tests/gpu/test_gpu.py::test_x[bsp-a2a]", "tests/gpu/test_gpu.py::test_x[ddp]"
    assert scope_of(g1) != scope_of(g2)
