"""The ZeroMQ wire's sockets (`ps_zmq.open_dealer` / `close_dealer`): closing a transport never
wedges the process's ZeroMQ I/O thread, which every later socket of the process needs.

A commbench ps job runs two transports one after the other in the same processes; its second
one hung for 60 s about once in ten runs on a loaded machine: its DEALER never connected. gdb
showed the context's I/O thread blocked in zmq_msg_send: libzmq sends each monitor event with a
blocking send, and the first transport's monitor reader had been dropped while its DEALER's
connection was still being torn down, so the server's disconnection had no reader. Each case
runs in a child process: a wedged context cannot be terminated."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("zmq")

PROBE = r"""
import os, sys, time
import zmq
from ddlbench.methods.ps_zmq import close_dealer, open_dealer

ctx = zmq.Context()

def connected():
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    d, mon = open_dealer(ctx, f"tcp://127.0.0.1:{port}", b"w0")
    d.send(b"push")
    if not router.poll(5000):
        print("a new DEALER never reached its server", flush=True)
        os._exit(1)
    router.recv_multipart()
    return router, d, mon

router, d, mon = connected()
if sys.argv[1] == "reader-first":
    mon.close(linger=0)  # the monitor's reader gone while the DEALER can still report
else:
    close_dealer(d, mon)
router.close(linger=0)   # the server goes away: a disconnection event
time.sleep(0.5)
connected()              # the process's next transport
print("connected", flush=True)
os._exit(0)
"""


def probe(order: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, order], capture_output=True, text=True, timeout=60)


def test_a_monitor_whose_reader_is_gone_wedges_the_io_thread_the_hazard():
    """The hazard itself, so that the test below can fail: an event with no reader blocks the
    I/O thread, and a new DEALER in the same context never connects."""
    proc = probe("reader-first")
    assert proc.returncode == 1 and "never reached its server" in proc.stdout, proc.stdout + proc.stderr


def test_close_dealer_stops_the_monitor_first_so_the_next_transport_connects():
    proc = probe("close_dealer")
    assert proc.returncode == 0 and "connected" in proc.stdout, proc.stdout + proc.stderr


def test_inproc_names_are_never_reused():
    """libzmq unbinds a closed socket's inproc endpoint later, on its reaper thread: a name
    taken from id() or a file descriptor (pyzmq's default monitor name) can be reused while
    still bound."""
    from ddlbench.methods.ps_zmq import _inproc

    names = {_inproc("monitor") for _ in range(1000)}
    assert len(names) == 1000 and all(n.startswith("inproc://ddlbench-monitor-") for n in names)
