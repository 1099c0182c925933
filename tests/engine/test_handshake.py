"""The link handshake and frame tags (engine/handshake.py): mutual proof in a fixed role order,
no proof for anyone who has not proved first, no reflection, no replay, tagged frames."""

from __future__ import annotations

import itertools
import struct

import pytest

from replicast.engine.handshake import (FrameOpener, FrameSealer, Handshake, Role, Stage, MAX_HANDSHAKE_FRAME, MAX_NAME,
                                        shorten)
from replicast.engine.messages import Ack, Hello, Proof
from replicast.engine.wire import WireError, encode
from replicast.operators.plan import ReplicaId, StreamReplica

SECRET = b"a-shared-secret"
NODES = {"a", "b", "c"}
_nonces = itertools.count()


def nonce() -> bytes:
    return next(_nonces).to_bytes(16, "big")


def pair(secret_a: bytes = SECRET, secret_b: bytes = SECRET):
    return (Handshake(secret_a, "a", Role.DIALER, nonce(), peers=NODES, expected="b"),
            Handshake(secret_b, "b", Role.ACCEPTOR, nonce(), peers=NODES))


def run(dialer: Handshake, acceptor: Handshake) -> None:
    """Bytes back and forth, as the driver does (each side's feed() returns what it sends)."""
    to_acceptor = dialer.start()
    while to_acceptor:
        to_dialer = acceptor.feed(to_acceptor)
        to_acceptor = dialer.feed(to_dialer) if to_dialer else b""


def test_both_sides_prove_and_agree_on_frame_keys():
    dialer, acceptor = pair()
    run(dialer, acceptor)
    assert dialer.stage is acceptor.stage is Stage.DONE
    assert dialer.peer == "b" and acceptor.peer == "a"
    assert dialer.keys() == tuple(reversed(acceptor.keys()))
    assert dialer.keys()[0] != dialer.keys()[1]
    d_sealer, d_opener, _, early = dialer.link()
    a_sealer, a_opener, _, _ = acceptor.link()
    frame = encode(Ack(StreamReplica(ReplicaId("s", 0), ReplicaId("f", 0), 0), 0, 1))
    assert a_opener.open(b"".join(d_sealer.seal(frame))[4:]) == frame[4:] and early == []


def test_the_acceptor_proves_nothing_before_the_dialer_has_proved():
    dialer, acceptor = pair(secret_a=b"wrong-secret")
    hello = Hello("a", dialer.nonce)
    answer = acceptor.receive(hello)
    assert [type(m) for m in answer] == [Hello]                 # a challenge, no proof
    [bad_proof] = dialer.receive(answer[0])
    with pytest.raises(WireError, match="failed the shared-secret challenge"):
        acceptor.receive(bad_proof)
    assert acceptor.stage is not Stage.DONE


@pytest.mark.parametrize("large", [False, True], ids=["small frames", "a frame over the handshake limit"])
def test_frames_that_arrive_with_the_last_handshake_frame_belong_to_the_link(large):
    """The acceptor sends its proof and, at once, its first frames; a relay (or a busy reader) may
    get them in one read.  (Found by the relay tests: the frame right after the proof was dropped,
    so every later frame failed its tag.  And a restarted node's peers replay at once: the first
    frame after the proof, read at the handshake's 512-byte limit, was refused as "1099 bytes
    exceeds the 512-byte limit" and the link dropped.)"""
    dialer, acceptor = pair()
    to_dialer = acceptor.feed(dialer.start())
    proof = acceptor.feed(dialer.feed(to_dialer))
    sealer, _, _, _ = acceptor.link()
    frames = [encode(Ack(StreamReplica(ReplicaId("s", 0), ReplicaId("f", 0), 0), 0, i)) for i in range(3)]
    if large:
        frames.insert(0, struct.pack(">I", 4 * MAX_HANDSHAKE_FRAME) + bytes(4 * MAX_HANDSHAKE_FRAME))
    assert dialer.feed(proof + b"".join(bytes(p) for f in frames for p in sealer.seal(f))) == b""
    _, opener, _, early = dialer.link()
    assert [opener.open(body) for body in early] == [f[4:] for f in frames]


def test_a_proof_cannot_be_reflected_or_replayed():
    # The attacker holds a dialer proof from one real session a -> b ...
    dialer, acceptor = pair()
    hello = Hello("a", dialer.nonce)
    [challenge] = acceptor.receive(hello)
    [proof] = dialer.receive(challenge)
    # ... replaying it on a new session fails (fresh acceptor nonce) ...
    fresh = Handshake(SECRET, "b", Role.ACCEPTOR, nonce(), peers=NODES)
    fresh.receive(hello)
    with pytest.raises(WireError):
        fresh.receive(proof)
    # ... and so does reflecting it to the dialer as the acceptor's proof (different role).
    with pytest.raises(WireError):
        dialer.receive(Proof(proof.mac))


def test_an_acceptor_takes_dials_only_from_names_that_sort_before_its_own():
    acceptor = Handshake(SECRET, "b", Role.ACCEPTOR, nonce(), peers=NODES)
    with pytest.raises(WireError, match="sorts first dials"):
        acceptor.receive(Hello("c", nonce()))


@pytest.mark.parametrize("hello", [Hello("zz", b"n" * 16), Hello("b", b"n" * 16), Hello("a", b"short"),
                                   Hello("x" * (MAX_NAME + 1), b"n" * 16)])
def test_bad_hellos_are_refused(hello):
    with pytest.raises(WireError):
        Handshake(SECRET, "b", Role.ACCEPTOR, nonce(), peers=NODES | {"x" * (MAX_NAME + 1)}).receive(hello)


def test_messages_out_of_order_are_refused():
    with pytest.raises(WireError, match="unexpected Proof"):
        Handshake(SECRET, "b", Role.ACCEPTOR, nonce(), peers=NODES).receive(Proof(b"x" * 32))
    with pytest.raises(WireError):
        Handshake(SECRET, "a", Role.DIALER, nonce(), peers=NODES, expected="b").keys()


def test_tagged_frames_open_in_order_and_nothing_else_does():
    key = b"k" * 32
    sealer, opener = FrameSealer(key), FrameOpener(key)
    frames = [encode(Ack(StreamReplica(ReplicaId("s", 0), ReplicaId("f", 0), 0), 0, i)) for i in range(3)]
    tagged = [b"".join(sealer.seal(f))[4:] for f in frames]
    assert opener.open(tagged[0]) == frames[0][4:]
    with pytest.raises(WireError):
        opener.open(tagged[2])                     # frame 1 dropped by a relay
    opener = FrameOpener(key)
    with pytest.raises(WireError):
        opener.open(frames[0][4:] + b"\0" * 16)    # an untagged (forged) frame
    with pytest.raises(WireError):
        FrameOpener(b"other key".ljust(32, b"!")).open(tagged[0])


def test_untrusted_strings_are_logged_short():
    assert len(shorten("x" * 10**6)) < 120
