"""The ZeroMQ PS wire under attack: while a real wfbp-ps run trains, another process's sockets
send the server every malformed shape, random bytes, STOPs, foreign and squatted identities and
oversized frames. The run must end ok and lossless, its server bound loopback (one host), and
its record must count the rejections. (What needs the job's secret to forge, a wrong proof,
key, iteration, size or a duplicate from a pusher's identity, is covered by
tests/unit/test_ps_wire.py: no outside peer can deliver it.)"""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import torch
import zmq

from ddlbench.methods.ps_zmq import ADDRESS_FILE_ENV, PUSH, STOP, _header

from helpers import ddlbench, records, reference_parameters

pytestmark = pytest.mark.multiproc
# The squatter takes a pusher's identity this long after the server binds: the pushers connect
# as it binds (the same rendezvous), and a squatter that came first would take their place.
SQUAT_AFTER_S = 0.25


def attack(address_file: Path, done: threading.Event, sent: dict) -> None:
    """Until `done`: connect to the advertised server and send it garbage of every kind."""
    while not address_file.exists() or not address_file.read_text().strip():
        if done.wait(0.05):
            return
    address = address_file.read_text().split()[0]
    ctx = zmq.Context()
    rng = random.Random(0)

    def dealer(identity: bytes | None = None):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            d.setsockopt(zmq.IDENTITY, identity)
        d.connect(address)
        return d

    # at once: a run on a fast machine ends well within a second of its server binding
    anonymous, foreign, idle_worker = dealer(), dealer(b"w9"), dealer(b"w1")  # w1 pushes nothing (per-machine)
    socks = [anonymous, foreign, idle_worker]
    squat_at = time.monotonic() + SQUAT_AFTER_S
    oversized = rng.randbytes(1 << 22)  # above any tiny-resnet partition: libzmq drops the connection
    shapes = [
        lambda: [rng.randbytes(rng.randrange(1, 64))],                               # one frame of noise
        lambda: [rng.randbytes(8) for _ in range(rng.randrange(4, 7))],              # too many frames
        lambda: [rng.randbytes(23), b"", b"\0" * 32],                                # short header
        lambda: [rng.randbytes(25), rng.randbytes(16), b"\0" * 32],                  # long header
        lambda: [_header(STOP, -1, -1), b"\0", rng.randbytes(32)],                   # STOP, no proof
        lambda: [_header(PUSH, 0, 1), rng.randbytes(4), rng.randbytes(32)],          # 1-element push
        lambda: [_header(PUSH, 0, 10**9), b"", b""],                                 # empty payload
        lambda: [_header(PUSH, 10**6, 0), rng.randbytes(64), rng.randbytes(32)],     # unknown key
    ]
    rounds = 0
    while not done.is_set():
        rounds += 1
        if len(socks) == 3 and time.monotonic() >= squat_at:
            socks.append(dealer(b"w0"))  # the pushers are connected by now: squatting must change nothing
        for sock in socks:
            big = [lambda: [_header(PUSH, 0, 0), oversized, rng.randbytes(32)]] if rounds % 100 == 0 else []
            for shape in shapes + big:
                try:
                    sock.send_multipart(shape(), zmq.NOBLOCK)
                    sent["messages"] += 1
                except zmq.Again:
                    pass
        done.wait(0.01)
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


def test_the_zmq_server_survives_an_attack_and_the_run_stays_lossless(tmp_path, monkeypatch):
    address_file = tmp_path / "ps_address"
    monkeypatch.setenv(ADDRESS_FILE_ENV, str(address_file))
    done, sent = threading.Event(), {"messages": 0}
    attacker = threading.Thread(target=attack, args=(address_file, done, sent), daemon=True)
    attacker.start()
    try:
        proc = ddlbench("method=wfbp-ps", "model=tiny-resnet", "workers=2", "profile.warmup_iters=1",
                        "profile.measured_iters=3", "profile.repeats=1", "local_batch=4", "save_params=true",
                        results=tmp_path / "results")
    finally:
        done.set()
        attacker.join(30)
    rec = records(tmp_path / "results")[-1]
    assert rec["status"] == "ok", (rec["error"], proc.stderr[-3000:])
    stats = rec["server_stats"][0]
    assert stats["address"].startswith("tcp://127.0.0.1:")  # one host: loopback only
    assert address_file.read_text().split() == [stats["address"]]
    assert rec["env"][ADDRESS_FILE_ENV] == str(address_file)
    rejected = stats["rejected"]
    print("attack:", sent, "rejected:", rejected)
    assert sent["messages"] > 100
    assert rejected.get("frames", 0) > 0 and rejected.get("header", 0) > 0 and rejected.get("identity", 0) > 0
    assert set(rejected) <= {"frames", "header", "identity"}  # nothing unproven got further
    got = torch.load(Path(rec["run_dir"]) / "params.pt")
    for name, ref in reference_parameters(Path(rec["run_dir"])).items():
        torch.testing.assert_close(got[name], ref, rtol=1e-5, atol=1e-6)
