"""Refused frames say what was wrong: one line naming the message, the field and the value (engine/wire.py
rule 3), for every kind of malformation; and the frames are the bytes they were before msgspec read them."""

from __future__ import annotations

import msgpack
import pytest

from replicast.engine.messages import (Batch, Hello, NoSnapshot, Report, Snapshot, SnapshotRefusal, StreamHead, View,
                                       ViewDecided)
from replicast.engine.wire import FrameDecoder, WireError, decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.reports import InputReport, ServerReport

S = StreamReplica(ReplicaId("load", 1), ReplicaId("correlate", 0), 0)
STREAM = ["load", 1, "correlate", 0, 0]


def refusal(fields: list) -> str:
    with pytest.raises(WireError) as caught:
        decode(msgpack.packb(fields, use_bin_type=True))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("fields, expected", [
    # a field of the wrong type: the message, the field by name, the value
    ([2, *STREAM, "seven", 1], "Ack frame: bad signed 64-bit integer at epoch: 'seven' (Expected `int`, got `str`)"),
    ([1, *STREAM, 0, 0, "recs", None], "Batch frame: bad bytes at records: 'recs' (Expected `bytes`, got `str`)"),
    ([10, "n1", "a nonce"], "Hello frame: bad bytes at nonce: 'a nonce'"),
    # a bool or a float where an int belongs (msgpack tells them apart; Python's 1 == True does not)
    ([2, "load", True, "correlate", 0, 0, 0, 1], "Ack frame: bad replica index at source_index: True"),
    ([3, 1.5, None], "Heartbeat frame: bad signed 64-bit integer at sent_us: 1.5"),
    # ints outside their range
    ([2, *STREAM, 0, 2**64 - 1], "Ack frame: bad signed 64-bit integer at offset: 18446744073709551615 "
                                 "(Expected `int` <= 9223372036854775807)"),
    ([2, "load", 2**40, "correlate", 0, 0, 0, 1], "Ack frame: bad replica index at source_index: 1099511627776"),
    ([2, "load", 1, "correlate", 0, 2**20, 0, 1], "Ack frame: bad port at port: 1048576"),
    ([44, "cpu", -1, 0, 1, 1], "StampAck frame: bad replica index at target: -1 (Expected `int` >= 0)"),
    ([2, "x" * 300, 1, "correlate", 0, 0, 0, 1], "Ack frame: bad replica name at source: 'xxxx"),
    # nested fields: named by their path
    ([42, "cpu", 0, [1, 1, [[0, 5], [1, "x"]], -1], 4, None, -1, 2],
     "ViewDecided frame: bad signed 64-bit integer at view.members[1][1]: 'x'"),
    ([42, "cpu", 0, None, 4, None, -1, 2], "ViewDecided frame: bad array at view: None"),
    ([15, *STREAM, 1, 0, 5, ["load", 0, 9, 4]], "StreamHead frame: bad array at lineage: ('load', 0, 9, 4)"),
    ([21, "s", {"n2": 1.0, "n3": "slow"}, 0.5, 1.0, [], [], [], []], "Report frame: bad float at rtt_ms['n3']: 'slow'"),
    ([21, "s", {}, 0.5, 1.0, [["busy", 0]], [["busy", 0, 1.5]], [], []],
     "Report frame: bad signed 64-bit integer at records_out[0].records: 1.5"),
    # free-form fields that are not maps
    ([9, "n1", [1, 2]], "field data must be a map, got tuple (Statistics frame)"),
    ([17, "join", 1, "join", 0, "state"], "field state must be a map, got str (Snapshot frame)"),
    # a reason that is none of the typed ones
    ([18, "join", 1, "join", 0, "it is bored"], "NoSnapshot frame: bad snapshot refusal at reason: 'it is bored'"),
    ([1, *STREAM, 0, 0, b"\x01", None], "batch records must be a msgpack array (Batch frame)"),
])
def test_a_bad_field_is_named_with_its_value(fields, expected):
    assert expected in refusal(fields)


@pytest.mark.parametrize("fields, expected", [
    ([2, *STREAM, 0], "message code 2 (Ack) needs 7 fields, got 6"),
    ([2, *STREAM, 0, 1, 2], "message code 2 (Ack) needs 7 fields, got 8"),
    ([1, *STREAM, 0, 0, b"\x90", None, "extra"], "message code 1 (Batch) needs 9 fields, got 10"),
    ([8, "anything"], "message code 8 (StatisticsRequest) needs 0 fields, got 1"),
])
def test_a_wrong_field_count_names_the_message_and_both_counts(fields, expected):
    assert refusal(fields) == expected


def test_frames_that_are_not_messages_say_so():
    assert refusal([99, 1]) == "unknown message code 99"
    assert refusal(["ack", 1]).startswith("a frame must hold an array [code, fields…], got ('ack', 1)")
    assert refusal({"code": 2}).startswith("a frame must hold an array [code, fields…]")
    with pytest.raises(WireError, match="^not msgpack: "):
        decode(b"\xc1")
    with pytest.raises(WireError, match="^not msgpack: "):
        decode(b"\x93\x01")                                # truncated
    with pytest.raises(WireError):
        decode(b"\x92\x09" + b"\x91" * 100_000 + b"\xc0")  # nested past any stack
    with pytest.raises(WireError, match="^not msgpack: a string that is not UTF-8"):
        decode(bytes.fromhex("930aa2fffec400"))           # found by benchmarks/fuzz.py: Hello("\xff\xfe", b"")


def test_a_value_nested_deeper_than_repr_goes_is_still_one_line():
    """Found by benchmarks/fuzz.py: msgpack reads a 1020-deep array that repr() cannot print."""
    deep = b"\x91" * 1020 + b"\xc0"
    for body in (b"\x92" + deep + b"\x01", b"\x98\x02" + deep + b"\x01\xa1c\x00\x00\x00\x00"):
        with pytest.raises(WireError) as caught:
            decode(body)
        assert "nested too deep to show" in str(caught.value), caught.value


def test_untrusted_values_are_cut_short():
    message = refusal([10, "n1", "z" * 10_000])
    assert len(message) < 200 and "(10002 chars)" in message


def test_a_batch_whose_records_are_not_records_is_refused_when_read():
    [body] = FrameDecoder().feed(encode(Batch(S, 0, 0, ((1, "a"),), None)))
    good = decode(body)
    bad = decode(msgpack.packb([1, *STREAM, 0, 0, msgpack.packb([["not a timestamp"]]), None]))
    assert len(bad.records) == 1 and list(good.records) == [(1, "a")]
    with pytest.raises(WireError, match="integer timestamp"):
        list(bad.records)


#: Frames as the hand-written codec wrote them (protocol v3, before the msgspec schema): the same bytes now.
GOLDEN = {
    "000000349a01a46c6f616401a9636f7272656c61746500000c07c41b929301a161cb3fe00000000000009302a162cb3ff8000000"
    "00000003": Batch(S, 12, 7, ((1, "a", 0.5), (2, "b", 1.5)), 3),
    "000000219a0fa46c6f616401a9636f7272656c61746500000c000595a46c6f616400090414":
        StreamHead(S, 12, 0, 5, (ReplicaId("load", 0), 9, 4, 20)),
    "0000001f982aa3637075ff94ce000100010191920109ff04d38000000000000000ff02":
        ViewDecided("cpu", -1, View(65537, 1, ((1, 9),)), 4, -(2**63), -1, 2),
    "0000002d9611a46a6f696e01a46a6f696e0082a46b696e64a86f70657261746f72a9706f736974696f6e739192c4017801":
        Snapshot(ReplicaId("join", 1), ReplicaId("join", 0), {"kind": "operator", "positions": ((b"x", 1),)}),
    "000000679915a26e3181a26e32cb4029000000000000cb3fd0000000000000cb40000000000000009192a462757379009193a462"
    "75737900079197a46c6f616401a9636f7272656c6174650000cb3fe0000000000000789195a46c6f616401a9636f7272656c61"
    "74650000": Report(ServerReport("n1", {"n2": 12.5}, 0.25, 2.0, (ReplicaId("busy", 0),), {ReplicaId("busy", 0): 7},
                                    {S: InputReport(0.5, 120)}, (S,))),
    "00000017930aa26e31c410000102030405060708090a0b0c0d0e0f": Hello("n1", bytes(range(16))),
    "0000001f9612a46a6f696e01a46a6f696e00b069742069732072656275696c64696e67":
        NoSnapshot(ReplicaId("join", 1), ReplicaId("join", 0), SnapshotRefusal.REBUILDING),
}


@pytest.mark.parametrize("frame, message", GOLDEN.items(), ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_frames_are_the_bytes_of_protocol_v3(frame, message):
    assert encode(message).hex() == frame
    assert decode(bytes.fromhex(frame)[4:]) == message
