"""The wire codec: round trips, arbitrary chunking, and garbage that only ever raises WireError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import example, given, strategies as st

from replicast.engine.messages import (Ack, Batch, Committed, ConnectStream, DeployReplica, Determinant, DeterminantAck,
                             DisconnectStream, Heartbeat,
                             Hello, Hold, JoinStamping, Mark, NoSnapshot, NotHosted, SnapshotRefusal, Proof, RemoveReplica, Resume, Snapshot,
                             SnapshotRequest, StampAck, Stamped, Standby, Statistics, StatisticsRequest, StreamHead, View,
                             ViewBallot, ViewDecided, ViewReply)
from replicast.engine import frames as schema
from replicast.engine.wire import (EncodedRecords, FrameDecoder, WireError, ack_frame_size, ack_header_size, batch_frame_size,
                                   batch_header_size, decode, encode)
from replicast.operators.plan import ReplicaId, StreamReplica
from tests.operators.strategies import keyed_records
from tests.operators.test_dedup import _arrivals, filters_agree

S = StreamReplica(ReplicaId("load", 1), ReplicaId("correlate", 0), 0)
fields = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=8), st.booleans())
records = st.lists(st.tuples(st.integers(-2**62, 2**62), fields, fields), max_size=20)

EXAMPLES = [
    Batch(S, 12, 7, ((1, "a", 0.5), (2, "b", 1.5)), 3), Batch(S, 0, 0, (), None), Ack(S, 12, 42), Heartbeat(5, None),
    Heartbeat(5, 3), DeployReplica(ReplicaId("cpu_a", 0), ("n1", "n2")), RemoveReplica(ReplicaId("x", 2)),
    ConnectStream(S, "n1", "n2"), DisconnectStream(S), StatisticsRequest(), Statistics("n1", {"a": 1}),
    Hello("n1", b"\x00" * 16), Proof(b"m" * 32),
    Resume(S, 12, 40), Resume(S, None, 0), Hold(S), StreamHead(S, 12, 40, -(2**63)),
    StreamHead(S, 12, 0, 5, (ReplicaId("load", 0), 9, 4, 20)), Mark(S, 12, 7),
    SnapshotRequest(ReplicaId("join", 1), ReplicaId("join", 0)),
    Snapshot(ReplicaId("join", 1), ReplicaId("join", 0), {"kind": "operator", "positions": ((b"x", 1),)}),
    NoSnapshot(ReplicaId("join", 1), ReplicaId("join", 0), SnapshotRefusal.JOINING),
    Standby(S, 12), Standby(S, -(2**63)), NotHosted(S),
    ViewBallot("cpu", 1, 65537), ViewBallot("cpu", 1, 65537, View(65537, 1, ((0, 5), (1, 9)))),
    ViewReply("cpu", 1, 65537, 2, True, 65537, View(65537, 1, ((1, 9),))), ViewReply("cpu", 0, 3, 1, False, 7, None),
    ViewDecided("cpu", -1, View(65537, 1, ((1, 9),)), 4, -(2**63), -1, 2), Stamped("cpu", 0, 65537, 4, ((1, "s", 0.5),), 3),
    Stamped("cpu", 0, 65537, 5, (), None), StampAck("cpu", 1, 0, 65537, 6), Committed("cpu", 0, 65537, 6),
    JoinStamping("cpu", 2, 10_000),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    [body] = FrameDecoder().feed(encode(message))
    assert decode(body) == message


@given(records, st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), st.lists(st.integers(1, 50), max_size=30))
def test_batches_survive_any_chunking(recs, punctuation, cuts):
    batch = Batch(S, 3, 0, tuple(recs), punctuation)
    data = encode(batch) * 2
    decoder, bodies, at = FrameDecoder(), [], 0
    for cut in cuts + [len(data)]:
        bodies += decoder.feed(data[at:at + cut])
        at += cut
    assert [decode(b) for b in bodies] == [batch, batch]


@given(st.text(max_size=300), st.integers(0, 2**31), st.integers(0, 3), records, st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), st.integers(0, 300))
def test_batch_frame_size_is_the_encoded_length(name, index, port, recs, epoch, offset, punctuation, padding):
    """The simulator's bandwidth accounting sizes batches without encoding them: the same bytes."""
    stream = StreamReplica(ReplicaId(name, index), ReplicaId("target", index // 2), port)
    for records in (tuple(recs), EncodedRecords(recs + [(0, "x" * padding, 0)])):
        batch = Batch(stream, epoch, offset, records, punctuation)
        assert batch_frame_size(batch_header_size(stream), batch) == len(encode(batch))


def test_batch_frame_size_counts_each_bin_header():
    """Records whose encoding needs a bin 8, 16 or 32 header (engine/frame_size.py counts it, not packs it)."""
    stream = StreamReplica(ReplicaId("a", 0), ReplicaId("b", 0), 0)
    for padding in (0, 200, 250, 300, 65_000, 65_600, 70_000):
        batch = Batch(stream, 1, 2, EncodedRecords([(0, "x" * padding, 0)]), None)
        assert batch_frame_size(batch_header_size(stream), batch) == len(encode(batch)), padding


@given(st.text(max_size=300), st.integers(0, 2**31), st.integers(0, 3), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1))
def test_ack_frame_size_is_the_encoded_length(name, index, port, epoch, offset):
    """The simulator's bandwidth accounting sizes acks without encoding them: the same bytes."""
    stream = StreamReplica(ReplicaId(name, index), ReplicaId("target", index // 2), port)
    ack = Ack(stream, epoch, offset)
    assert ack_frame_size(ack_header_size(stream), ack) == len(encode(ack))


@given(st.binary(max_size=200))
def test_garbage_bodies_raise_only_wire_error(data):
    try:
        decode(data)
    except WireError:
        pass


@given(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=4), st.binary(max_size=4), st.none(), st.booleans(),
                          st.lists(st.integers(-5, 5), max_size=3)), max_size=10), st.integers(0, 20))
def test_well_formed_msgpack_with_wrong_fields_raises_only_wire_error(fields_, code):
    try:
        decode(msgpack.packb([code, *fields_]))
    except WireError:
        pass


def test_oversized_frame_is_refused():
    with pytest.raises(WireError):
        FrameDecoder(max_frame=10).feed(b"\x00\x00\x01\x00" + b"x" * 300)




@pytest.mark.parametrize("fields", [
    [7, "load", 1, "correlate", 0, 0, 0, 2**64 - 1],          # Ack offset beyond signed 64 bits
    [7, "load", 1, "correlate", 0, 0, -(2**63) - 1 + 2**63, 2**63],
    [7, "load", 2**40, "correlate", 0, 0, 0, 1],              # a replica index no plan has
    [7, "load", 1, "correlate", 0, 2**20, 0, 1],              # a port no operator has
])
def test_ints_the_core_could_not_send_back_are_refused(fields):
    """Found by benchmarks/fuzz.py: msgpack carries 2**63 … 2**64-1, and a core replying with
    offset + 1 (or echoing such a value) then produced a message it could not encode."""
    code = schema.code(schema.BY_MESSAGE[Ack])
    with pytest.raises(WireError, match="64-bit|bad replica|bad port"):
        decode(msgpack.packb([code, *fields[1:]]))


# -- the decoder's fast paths give what the plain reading gives ---------------------------------------

# ints and what equals them as a dict key (or lies outside 64 bits): collisions are frequent
ints_or_lookalikes = st.sampled_from([0, 1, True, False, 0.0, 1.0, 2**63, 2**64 - 1, -(2**63)])


@example([("load", 1, "correlate", 0, 0, 0, 0, None, 7), ("load", True, "correlate", 0, 0, 0, 0, None, 7)])
@example([("load", 1, "correlate", 0, 0, 0, 0, None, 9), ("load", 1, "correlate", 0, 0, 0, 0, 2**63, 9)])
@example([("load", 1, "correlate", 0, 0, 0, 0, None, 9), ("load", 1, "correlate", 0, 0, 1.0, 0, None, 9)])
@given(st.lists(st.tuples(st.just("load"), ints_or_lookalikes, st.just("correlate"),
                          ints_or_lookalikes, ints_or_lookalikes, ints_or_lookalikes, ints_or_lookalikes,
                          st.one_of(st.none(), ints_or_lookalikes), st.sampled_from([7, 9])),
                min_size=1, max_size=12))
def test_a_stream_seen_before_is_read_as_strictly_as_a_new_one(frames):
    """Stream ids are remembered by their fields after a first successful read; ``1 == 1.0 == True``
    as dict keys, so a frame naming a remembered stream with a bool or float where an int belongs
    (or epochs, offsets, punctuations out of 64 bits) must still be refused, exactly as with nothing
    remembered.  Batches (code 1, 9 fields) and acks (code 2, 7 fields), over a warm and a cold cache."""
    def outcome(body):
        try:
            return decode(body)
        except WireError:
            return "refused"

    bodies = []
    for name, i, target, j, port, epoch, offset, punctuation, n in frames:
        if n == 9:
            bodies.append(msgpack.packb([1, name, i, target, j, port, epoch, offset, msgpack.packb([[1, 2]]),
                                         punctuation]))
        else:
            bodies.append(msgpack.packb([2, name, i, target, j, port, epoch, offset]))
    warm = [outcome(b) for b in bodies]                  # the cache fills as it goes
    cold = []
    for b in bodies:
        schema._streams.clear()
        cold.append(outcome(b))
    assert warm == cold
    for (_, i, _, j, port, epoch, offset, punctuation, n), got in zip(frames, warm):
        small = all(type(v) is int and 0 <= v < 2**16 for v in (i, j, port))
        exact = all(type(v) is int and -(2**63) <= v < 2**63 for v in (epoch, offset))
        optional = n == 7 or punctuation is None or (type(punctuation) is int and -(2**63) <= punctuation < 2**63)
        assert (got != "refused") == (small and exact and optional)


def test_the_remembered_streams_are_bounded(monkeypatch):
    monkeypatch.setattr(schema, "_STREAMS_KEPT", 4)
    schema._streams.clear()
    for i in range(10):
        stream = StreamReplica(ReplicaId("load", i), ReplicaId("correlate", 0), 0)
        [body] = FrameDecoder().feed(encode(Ack(stream, 1, i)))
        assert decode(body) == Ack(stream, 1, i)
        assert len(schema._streams) <= 4


@given(records)
def test_a_batch_read_off_the_wire_carries_its_timestamps_in_record_order(recs):
    [body] = FrameDecoder().feed(encode(Batch(S, 0, 0, tuple(recs), None)))
    packed = decode(body).records
    assert packed.stamps == [r[0] for r in recs]
    assert list(packed) == recs


@given(keyed_records(), st.integers(1, 4), st.floats(0, 1), st.randoms(use_true_random=False))
def test_batches_read_off_the_wire_filter_exactly_like_their_records(records, k, same_batches, rng):
    """The duplicate filter takes a wire batch's timestamps from the batch (taken out when its
    records were checked) instead of from its records: same records passed, same state, at k = 1
    (the single-replica path) and above (runs), as a filter fed the plain record lists."""
    def as_read(batch):
        [body] = FrameDecoder().feed(encode(Batch(S, 0, 0, batch, None)))
        packed = decode(body).records
        return packed, packed.key

    filters_agree(_arrivals(records, k, same_batches, rng), k, rng, as_read)


def test_every_message_has_its_own_code():
    """Codes are the wire format: two messages on one code would decode as the later row's."""
    codes = [schema.code(frame) for frame in schema.FRAMES]
    assert len(codes) == len(set(codes)) and len({frame.MESSAGE for frame in schema.FRAMES}) == len(codes)


def test_frames_read_by_field_name_have_their_messages_fields_in_order():
    """A frame that keeps the base ``Frame.message`` builds its message from its fields positionally."""
    generic = [frame for frame in schema.FRAMES if frame.message is schema.Frame.message]
    assert generic
    for frame in generic:
        assert list(frame.__struct_fields__) == list(frame.MESSAGE.__dataclass_fields__), frame
