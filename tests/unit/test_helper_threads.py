"""A method's helper threads run their CPU ops on one thread each, and the worker's own thread
keeps the count the launcher gave it (`base.start_thread`). Under OpenMP a helper that ran
ops at the worker's count got a thread team of its own, which slowed the worker's compute: a
lone ByteScheduler-A2A worker at 2 threads on 2 cores stepped in 20 ms, against 9 without."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_helper_thread_runs_its_ops_on_one_thread_and_the_worker_keeps_its_count():
    # in a process of its own: the helper's setting is also the default of threads started later
    script = textwrap.dedent("""
        import torch
        from ddlbench.methods import base

        torch.set_num_threads(2)  # the launcher's count for this worker
        seen = {}

        def helper():
            a = torch.randn(64, 64)
            (a @ a).sum()  # an update's ops
            seen["helper"] = torch.get_num_threads()

        base.start_thread(helper, "test-helper").join()
        print(seen["helper"], torch.get_num_threads())
        # a PS server's engine: the server's count, even after a helper set one as the default
        base.start_thread(helper, "test-engine", ops_threads=None).join()
        print(seen["helper"], torch.get_num_threads())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "2", "2", "2"]
