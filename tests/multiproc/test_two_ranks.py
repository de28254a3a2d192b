"""The two-rank harness the multi-process tests share (helpers.two_ranks): a rank that fails
ends the pair at once with its own stderr, and a rendezvous port taken between `free_port`
and rank 0's bind is retried on a fresh one (CI once lost a run to it: rank 1 waited out its
120 s start-up bound on a port rank 0 never held, and rank 0's error was never shown)."""
from __future__ import annotations

import socket
import textwrap
import time

import helpers
import pytest

pytestmark = pytest.mark.multiproc

# rank 0 serves one line on the port; rank 1 reads it (connecting until it is up)
ECHO = textwrap.dedent("""
    import socket, sys, time
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    if rank == 0:
        with socket.create_server(("127.0.0.1", port)) as srv:
            conn, _ = srv.accept()
            conn.sendall(b"hello")
            conn.close()
        print("served")
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        print(c.recv(5).decode())
""")


def test_a_port_taken_before_rank_0_binds_it_is_retried_on_a_fresh_one(monkeypatch):
    with socket.create_server(("127.0.0.1", 0)) as taken:  # listening: rank 0's bind fails, rank 1 hangs on it
        ports = [taken.getsockname()[1]]
        fresh = helpers.free_port
        monkeypatch.setattr(helpers, "free_port", lambda: ports.pop() if ports else fresh())
        assert [out.strip() for out in helpers.two_ranks(ECHO, timeout_s=60)] == ["served", "hello"]
        assert ports == []  # the taken port was handed out first


FAILS = textwrap.dedent("""
    import sys, time
    if sys.argv[1] == "0":
        raise SystemExit("rank 0 gave up: boom")
    time.sleep(120)  # a survivor waiting on its peer
""")


def test_a_failed_rank_ends_the_pair_at_once_with_its_stderr():
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)rank 0 exited 1:.*rank 0 gave up: boom"):
        helpers.two_ranks(FAILS, timeout_s=120)
    assert time.monotonic() - t0 < 60  # not the survivor's 120 s


def test_ranks_past_the_timeout_are_killed_and_the_wait_fails():
    with pytest.raises(AssertionError, match="the ranks ran past 2 s"):
        helpers.two_ranks("import time; time.sleep(120)", timeout_s=2)
