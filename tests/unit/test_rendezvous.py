"""engines.init_process_group: the ranks meet under the start-up bound, and one that never comes
is named."""
from __future__ import annotations

import time

import pytest

from ddlbench.engines import init_process_group


def test_a_rank_that_never_comes_is_named_after_the_startup_bound(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank\(s\) 1 never reached the rendezvous within startup_timeout_s=1 s"):
        init_process_group("gloo", 0, 2, startup_timeout_s=1, comm_timeout_s=30,
                           init_method=f"file://{tmp_path / 'store'}")
    assert time.monotonic() - t0 < 20  # the start-up bound, not the communication one
