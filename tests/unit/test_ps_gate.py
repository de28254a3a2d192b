"""The ZeroMQ server's admission (`ps_zmq.Gate`): every malformed or unproven message is
dropped with its reason and never counts toward a round; each pusher counts once per round."""
from __future__ import annotations

import numpy as np
import pytest

from ddlbench.methods.ps_zmq import PUSH, PULL, STOP, Gate, _header, prove

SECRET = b"s" * 32
KEYS = {3: 4, 7: 2}  # key -> numel (float32)


def gate() -> Gate:
    return Gate(SECRET, KEYS, 4, pushers=[0, 1])


def msg(ident=b"w0", kind=PUSH, key=3, iteration=5, numel=None, secret=SECRET):
    header = _header(kind, key, iteration)
    payload = np.ones(KEYS.get(key, 1) if numel is None else numel, dtype=np.float32).tobytes()
    return [ident, header, payload, prove(secret, header, payload)]


def test_a_pushers_proven_push_is_admitted_and_counts_toward_its_round():
    g = gate()
    assert g.check(msg(b"w0")) is None and g.check(msg(b"w1")) is None
    assert g.check(msg(b"w0", iteration=6)) is None  # the round closed: the next one opens
    assert not g.rejected


@pytest.mark.parametrize("frames, reason", [
    (msg()[:3], "frames"),
    (msg() + [b""], "frames"),
    ([], "frames"),
    ([b"w0", b"\x00" * 23, b"", b""], "header"),
    ([b"w0", b"\x00" * 25, b"", b""], "header"),
    (msg(ident=b"w2"), "identity"),           # a job rank that is not a pusher here
    (msg(ident=b"\x00k\x8bEg"), "identity"),  # ZeroMQ's random identity of an anonymous peer
    (msg(secret=b"x" * 32), "proof"),
    (msg()[:3] + [b"\x00" * 32], "proof"),
    (msg()[:3] + [b""], "proof"),
    (msg(kind=PULL), "kind"),
    (msg(kind=99), "kind"),
    (msg(key=4), "key"),
    (msg(key=-1), "key"),
    (msg(iteration=-2), "iteration"),
    (msg(numel=3), "size"),
    (msg(numel=1), "size"),  # a 1-element push is not broadcast into the sum
    (msg(numel=0), "size"),
    (msg(numel=5), "size"),
])
def test_a_malformed_or_unproven_message_is_dropped_with_its_reason(frames, reason):
    g = gate()
    assert g.check(frames) == reason
    assert g.rejected == {reason: 1}
    assert g.check(msg(b"w0")) is None and g.check(msg(b"w1")) is None  # and it entered no round


def test_a_second_push_in_a_round_is_a_duplicate_and_does_not_complete_it():
    g = gate()
    assert g.check(msg(b"w0")) is None
    assert g.check(msg(b"w0")) == "duplicate"
    assert g.check(msg(b"w0", iteration=6)) == "iteration"  # the round of 5 is still open
    assert g.check(msg(b"w1")) is None
    assert g.rejected == {"duplicate": 1, "iteration": 1}


def test_a_push_older_than_the_keys_round_is_stale():
    g = gate()
    for ident in (b"w0", b"w1"):
        assert g.check(msg(ident, iteration=5)) is None
    assert g.check(msg(b"w0", iteration=4)) == "iteration"
    assert g.check(msg(b"w0", key=7, iteration=4)) is None  # rounds are per key


def test_stop_is_admitted_only_from_a_pusher_with_a_valid_proof():
    g = gate()
    assert g.check(msg(b"w9", kind=STOP, key=-1, iteration=-1, numel=1)) == "identity"
    assert g.check(msg(b"w0", kind=STOP, key=-1, iteration=-1, numel=1, secret=b"y" * 32)) == "proof"
    assert g.check(msg(b"w0", kind=STOP, key=-1, iteration=-1, numel=1)) is None


def test_the_proof_covers_the_header_and_size_not_the_bulk_bytes():
    """Hashing every byte would cost more than a fast link moves (see `prove`)."""
    secret, header = b"s" * 32, _header(PUSH, 1, 5)
    same_size = [np.ones(4, np.float32).tobytes(), np.zeros(4, np.float32).tobytes()]
    assert prove(secret, header, same_size[0]) == prove(secret, header, same_size[1])
    assert prove(secret, header, same_size[0]) != prove(secret, header, np.ones(5, np.float32).tobytes())
    assert prove(secret, header, same_size[0]) != prove(secret, _header(PUSH, 2, 5), same_size[0])



def test_a_timeouts_message_names_the_open_rounds_who_they_wait_for_and_who_never_pushed():
    g = Gate(SECRET, KEYS, 4, pushers=[0, 1, 2])
    assert g.open_rounds() == "no round open; never pushed: w0, w1, w2; dropped: none"
    assert g.check(msg(b"w0")) is None and g.check(msg(b"w1")) is None
    assert g.check(msg(b"w1", key=7)) is None
    assert g.check(msg(b"w1", key=7)) == "duplicate"
    assert g.open_rounds() == ("key 3 iteration 5 waits for w2; key 7 iteration 5 waits for w0, w2; "
                               "never pushed: w2; dropped: {'duplicate': 1}")
    assert g.open_rounds(limit=1).startswith("key 3 iteration 5 waits for w2 (+1 keys); ")
