"""The suite's own plumbing (tests/conftest.py): it must run without pytest-xdist too, as a
GPU machine's bare pytest or `pytest -p no:xdist` runs it, not only under `make test`'s two
workers."""
from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_the_suite_collects_with_xdist_turned_off():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "tests/unit/test_metrics.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "test_metrics.py::" in proc.stdout
