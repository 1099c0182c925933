"""The wire format: length-prefixed msgpack frames, one message per frame (DESIGN.md §4).

Rules of this module:

1. Pure: bytes in, messages out, no sockets.  :class:`FrameDecoder` is fed whatever the transport
   read and returns whole frames, like h11's ``receive_data()`` / ``next_event()``.
2. A frame is a 4-byte big-endian length followed by a msgpack array ``[code, fields…]``.  The
   table :data:`_CODECS` maps each message class to its code and field (de)serialisers; a new
   message is one row.
3. Anything malformed — a short or oversized frame, bad msgpack, an unknown code, a field of the
   wrong type — raises :class:`WireError`; nothing else escapes :func:`decode`.  The driver closes
   the connection on a WireError; a peer can never crash a node with bytes.
4. A batch's records travel as one msgpack ``bin`` field holding the msgpack array of records:
   the sender encodes an emitted batch once for all its downstream replicas
   (:class:`EncodedRecords`), and the receiver decodes it only when a record is read
   (:class:`PackedRecords`) — a duplicate filter that
   already knows these exact bytes from another upstream replica (operators/dedup.py, "runs")
   never reads them.  Records come back as tuples (``use_list=False``), so they are hashable and
   equal to the sender's records (msgpack keeps int/float/str/bool exactly); a malformed record
   array raises :class:`WireError` when first read.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Callable

import msgpack

from replicast.engine.messages import (Ack, Batch, Committed, ConnectStream, DeployReplica, Determinant, DeterminantAck,
                             DisconnectStream, Heartbeat, Hello, Hold, JoinStamping, Mark, Message, NoSnapshot, NotHosted,
                             Proof, RemoveReplica, Report, Resume, Snapshot, SnapshotRequest, StampAck, Stamped, Standby,
                             Statistics, StatisticsRequest, StreamHead, View, ViewBallot, ViewDecided, ViewReply)
from replicast.operators.errors import ReplicastError
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import Record
from replicast.placement.reports import InputReport, ServerReport

#: Largest frame a node accepts (a batch is normally far smaller).
MAX_FRAME = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


class WireError(ReplicastError):
    """Bytes that are not a valid frame or message."""


# -- fields ---------------------------------------------------------------------------------------
#: Ints in messages are signed 64-bit (msgpack also carries 2**63 … 2**64-1; a peer sending those
#: would make the core's replies, offset + 1 and the like, unencodable).
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Replica indexes and ports are small: a replica count is a handful (§III).
_SMALL = 1 << 16


def _replica(name: Any, index: Any) -> ReplicaId:
    if type(name) is not str or type(index) is not int or not 0 <= index < _SMALL or len(name) > 256:
        raise WireError(f"bad replica id {repr(name)[:80]}#{repr(index)[:40]}")
    return ReplicaId(name, index)


def _lineage_fields(lineage: tuple[ReplicaId, int, int, int] | None) -> list | None:
    return None if lineage is None else [lineage[0].name, lineage[0].index, *lineage[1:]]


def _lineage(f: Any) -> tuple[ReplicaId, int, int, int] | None:
    if f is None:
        return None
    if type(f) is not tuple or len(f) != 5:
        raise WireError(f"bad lineage {f!r}")
    return _replica(f[0], f[1]), _int(f[2], "lineage epoch"), _int(f[3], "lineage start"), _int(f[4], "lineage end")


def _replica_fields(r: ReplicaId) -> list:
    return [r.name, r.index]


def _stream_fields(s: StreamReplica) -> list:
    return [s.source.name, s.source.index, s.target.name, s.target.index, s.port]


#: Stream replicas read off the wire so far, by their five fields (validated when first seen).  A
#: node's links carry a handful of streams and every batch and ack names one, so reading it is one
#: lookup; the types of the int fields are checked on every read, because ``1 == 1.0 == True`` as
#: keys.  Bounded: emptied when it reaches ``_STREAMS_KEPT`` entries.
_streams: dict[tuple, StreamReplica] = {}
_STREAMS_KEPT = 4096


def _port(value: Any) -> int:
    if type(value) is not int or not 0 <= value < _SMALL:
        raise WireError(f"bad port {repr(value)[:40]}")
    return value


def _stream(f: tuple) -> StreamReplica:
    key = f[:5]
    try:
        known = _streams.get(key)
    except TypeError:                   # an unhashable field (a map): not a stream, said below
        known = key = None
    if known is not None and type(f[1]) is int and type(f[3]) is int and type(f[4]) is int:
        return known
    stream = StreamReplica(_replica(f[0], f[1]), _replica(f[2], f[3]), _port(f[4]))
    if key is not None:
        if len(_streams) >= _STREAMS_KEPT:
            _streams.clear()
        _streams[key] = stream
    return stream


def _int(value: Any, what: str, optional: bool = False) -> Any:
    if (value is None and optional) or (type(value) is int and _INT_MIN <= value <= _INT_MAX):
        return value
    raise WireError(f"{what} must be a signed 64-bit integer, got {repr(value)[:40]}")


def _batch(f: tuple) -> Batch:
    epoch, offset, packed, punctuation = f[5], f[6], f[7], f[8]
    if type(packed) is not bytes:
        raise WireError(f"batch records must be msgpack bytes, got {type(packed).__name__}")
    # the checks of _int, inline (one batch frame per batch per upstream replica)
    if not (type(epoch) is int and type(offset) is int and _INT_MIN <= epoch <= _INT_MAX
            and _INT_MIN <= offset <= _INT_MAX and (punctuation is None or (type(punctuation) is int
                                                   and _INT_MIN <= punctuation <= _INT_MAX))):
        _int(epoch, "epoch"), _int(offset, "offset"), _int(punctuation, "punctuation", optional=True)
    return Batch(_stream(f), epoch, offset, PackedRecords(packed), punctuation)


def _records_bytes(records: Sequence[Record]) -> bytes:
    return records.packed if type(records) in (PackedRecords, EncodedRecords) else _packb(records)


def _bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise WireError(f"{what} must be bytes, got {type(value).__name__}")
    return value


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise WireError(f"{what} must be a string, got {value!r}")
    return value


def _dict(value: Any, what: str = "statistics") -> dict:
    if type(value) is not dict:
        raise WireError(f"{what} must be a map, got {type(value).__name__}")
    return value


def _index(value: Any, what: str = "replica index", allow_none: bool = False) -> int:
    """A replica index (or -1, "none", where ``allow_none``)."""
    if type(value) is int and (0 <= value < _SMALL or (allow_none and value == -1)):
        return value
    raise WireError(f"bad {what} {repr(value)[:40]}")


def _view_fields(view: View | None) -> list | None:
    return None if view is None else [view.term, view.stamper, [list(m) for m in view.members], view.base]


def _view(f: Any) -> View | None:
    if f is None:
        return None
    if type(f) is not tuple or len(f) != 4 or type(f[2]) is not tuple or len(f[2]) > _SMALL:
        raise WireError(f"bad view {repr(f)[:80]}")
    members = []
    for m in f[2]:
        if type(m) is not tuple or len(m) != 2:
            raise WireError(f"bad view member {repr(m)[:40]}")
        members.append((_index(m[0]), _int(m[1], "member epoch")))
    return View(_int(f[0], "view term"), _index(f[1], "stamper index"), tuple(members), _int(f[3], "view base"))


def _required_view(f: Any) -> View:
    view = _view(f)
    if view is None:
        raise WireError("a decided view is missing")
    return view


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise WireError(f"expected a boolean, got {repr(value)[:40]}")
    return value


def _stamped(f: tuple) -> Stamped:
    return Stamped(_str(f[0], "stream"), _index(f[1]), _int(f[2], "term"), _int(f[3], "seq"),
                   PackedRecords(_bytes(f[4], "stamped records")), _int(f[5], "punctuation", optional=True))


def _number(value: Any, what: str) -> float:
    if type(value) not in (int, float):
        raise WireError(f"{what} must be a number, got {repr(value)[:40]}")
    return float(value)


def _list(value: Any, what: str) -> tuple:
    if type(value) is not tuple:
        raise WireError(f"{what} must be an array, got {type(value).__name__}")
    return value


def _report_fields(r: ServerReport) -> list:
    return [r.server, dict(r.rtt_ms), r.load, r.capacity, [_replica_fields(h) for h in r.hosted],
            [[*_replica_fields(x), n] for x, n in r.records_out.items()],
            [[*_stream_fields(s), i.weight, i.delay_us] for s, i in r.inputs.items()],
            [_stream_fields(s) for s in r.routes]]


def _report(f: tuple) -> Report:
    """A :class:`Report` from its fields, every value type-checked (the coordinator checks ranges)."""
    rtt = {_str(peer, "report peer"): _number(ms, "report RTT") for peer, ms in _dict(f[1], "report RTTs").items()}
    hosted = tuple(_replica(*_list(h, "hosted replica")[:2]) for h in _list(f[4], "hosted replicas"))
    out = {}
    for row in _list(f[5], "records_out"):
        row = _list(row, "records_out row")
        out[_replica(row[0], row[1])] = _int(row[2], "records_out")
    inputs = {}
    for row in _list(f[6], "report inputs"):
        row = _list(row, "report input")
        if len(row) != 7:
            raise WireError(f"a report input needs 7 fields, got {len(row)}")
        inputs[_stream(row)] = InputReport(_number(row[5], "input weight"), _int(row[6], "input delay"))
    routes = []
    for row in _list(f[7], "report routes"):
        row = _list(row, "report route")
        if len(row) != 5:
            raise WireError(f"a report route needs 5 fields, got {len(row)}")
        routes.append(_stream(row))
    return Report(ServerReport(_str(f[0], "report server"), rtt, _number(f[2], "load"), _number(f[3], "capacity"),
                               hosted, out, inputs, tuple(routes)))


# code, class, fields of a message, message from fields (after the code)
_CODECS: list[tuple[int, type, Callable[[Any], list], Callable[[tuple], Message], int]] = [
    (1, Batch, lambda m: [*_stream_fields(m.stream), m.epoch, m.offset, _records_bytes(m.records), m.punctuation],
     _batch, 9),
    (2, Ack, lambda m: [*_stream_fields(m.stream), m.epoch, m.offset],
     lambda f: Ack(_stream(f), _int(f[5], "epoch"), _int(f[6], "offset")), 7),
    (3, Heartbeat, lambda m: [m.sent_us, m.echo_us],
     lambda f: Heartbeat(_int(f[0], "sent_us"), _int(f[1], "echo_us", True)), 2),
    (4, DeployReplica, lambda m: [m.replica.name, m.replica.index, list(m.peers)],
     lambda f: DeployReplica(_replica(f[0], f[1]), tuple(_str(p, "peer") for p in f[2])), 3),
    (5, RemoveReplica, lambda m: [m.replica.name, m.replica.index], lambda f: RemoveReplica(_replica(f[0], f[1])), 2),
    (6, ConnectStream, lambda m: [*_stream_fields(m.stream), m.source_node, m.target_node],
     lambda f: ConnectStream(_stream(f), _str(f[5], "source node"), _str(f[6], "target node")), 7),
    (7, DisconnectStream, lambda m: _stream_fields(m.stream), lambda f: DisconnectStream(_stream(f)), 5),
    (8, StatisticsRequest, lambda m: [], lambda f: StatisticsRequest(), 0),
    (9, Statistics, lambda m: [m.node, m.data], lambda f: Statistics(_str(f[0], "node"), _dict(f[1])), 2),
    (10, Hello, lambda m: [m.node, m.nonce], lambda f: Hello(_str(f[0], "node"), _bytes(f[1], "nonce")), 2),
    (11, Proof, lambda m: [m.mac], lambda f: Proof(_bytes(f[0], "mac")), 1),
    (12, Resume, lambda m: [*_stream_fields(m.stream), m.epoch, m.offset],
     lambda f: Resume(_stream(f), _int(f[5], "epoch", True), _int(f[6], "offset")), 7),
    (13, Hold, lambda m: _stream_fields(m.stream), lambda f: Hold(_stream(f)), 5),
    (15, StreamHead, lambda m: [*_stream_fields(m.stream), m.epoch, m.offset, m.frontier, _lineage_fields(m.lineage)],
     lambda f: StreamHead(_stream(f), _int(f[5], "epoch"), _int(f[6], "offset"), _int(f[7], "frontier"),
                          _lineage(f[8])), 9),
    (16, SnapshotRequest, lambda m: [*_replica_fields(m.joiner), *_replica_fields(m.donor)],
     lambda f: SnapshotRequest(_replica(f[0], f[1]), _replica(f[2], f[3])), 4),
    (17, Snapshot, lambda m: [*_replica_fields(m.joiner), *_replica_fields(m.donor), m.state],
     lambda f: Snapshot(_replica(f[0], f[1]), _replica(f[2], f[3]), _dict(f[4], "snapshot state")), 5),
    (19, Mark, lambda m: [*_stream_fields(m.stream), m.epoch, m.offset],
     lambda f: Mark(_stream(f), _int(f[5], "epoch"), _int(f[6], "offset")), 7),
    (20, Standby, lambda m: [*_stream_fields(m.stream), m.punctuation],
     lambda f: Standby(_stream(f), _int(f[5], "punctuation")), 6),
    (23, Determinant, lambda m: [*_replica_fields(m.backup), m.seq, m.port, _records_bytes(m.records), m.punctuation],
     lambda f: Determinant(_replica(f[0], f[1]), _int(f[2], "seq"), _port(f[3]),
                           PackedRecords(_bytes(f[4], "determinant records")), _int(f[5], "punctuation", True)), 6),
    (25, NotHosted, lambda m: _stream_fields(m.stream), lambda f: NotHosted(_stream(f)), 5),
    (24, DeterminantAck, lambda m: [*_replica_fields(m.primary), m.seq],
     lambda f: DeterminantAck(_replica(f[0], f[1]), _int(f[2], "seq")), 3),
    (18, NoSnapshot, lambda m: [*_replica_fields(m.joiner), *_replica_fields(m.donor), m.reason],
     lambda f: NoSnapshot(_replica(f[0], f[1]), _replica(f[2], f[3]), _str(f[4], "reason")), 5),
    (21, Report, lambda m: _report_fields(m.report), _report, 8),
    # entry-stamped mode (messages rule 8)
    (40, ViewBallot, lambda m: [m.stream, m.candidate, m.term, _view_fields(m.view)],
     lambda f: ViewBallot(_str(f[0], "stream"), _index(f[1]), _int(f[2], "term"), _view(f[3])), 4),
    (41, ViewReply, lambda m: [m.stream, m.candidate, m.term, m.phase, m.ok, m.promised, _view_fields(m.accepted)],
     lambda f: ViewReply(_str(f[0], "stream"), _index(f[1]), _int(f[2], "term"), _index(f[3], "phase"),
                         _flag(f[4]), _int(f[5], "promised"), _view(f[6])), 7),
    (42, ViewDecided, lambda m: [m.stream, m.target, _view_fields(m.view), m.start, m.frontier, m.base, m.since],
     lambda f: ViewDecided(_str(f[0], "stream"), _index(f[1], "target", True), _required_view(f[2]),
                           _int(f[3], "start"), _int(f[4], "frontier", True), _int(f[5], "base"), _int(f[6], "since")), 7),
    (43, Stamped, lambda m: [m.stream, m.target, m.term, m.seq, _records_bytes(m.records), m.punctuation],
     _stamped, 6),
    (44, StampAck, lambda m: [m.stream, m.target, m.member, m.term, m.seq],
     lambda f: StampAck(_str(f[0], "stream"), _index(f[1]), _index(f[2]), _int(f[3], "term"), _int(f[4], "seq")), 5),
    (45, Committed, lambda m: [m.stream, m.target, m.term, m.seq],
     lambda f: Committed(_str(f[0], "stream"), _index(f[1]), _int(f[2], "term"), _int(f[3], "seq")), 4),
    (46, JoinStamping, lambda m: [m.stream, m.index, m.epoch],
     lambda f: JoinStamping(_str(f[0], "stream"), _index(f[1]), _int(f[2], "epoch")), 3),
]
_ENCODERS = {cls: (code, fields) for code, cls, fields, _, _ in _CODECS}
_DECODERS = {code: (build, n) for code, _, _, build, n in _CODECS}
_packb = msgpack.Packer(use_bin_type=True).pack
_first = itemgetter(0)


# -- records --------------------------------------------------------------------------------------
class EncodedRecords(list):
    """What a replica emits (rule 4): a list of records that keeps its msgpack encoding once made,
    so the frames of all its remote stream replicas share one encoding.  A plain list otherwise
    (C-speed ``len`` and iteration on the node's data path)."""

    __slots__ = ("_packed",)

    def __init__(self, records: Sequence[Record]):
        super().__init__(records)
        self._packed: bytes | None = None

    @property
    def key(self) -> bytes | None:
        """The encoding if it was made (the content key a duplicate filter may use), else None."""
        return self._packed

    @property
    def packed(self) -> bytes:
        if self._packed is None:
            self._packed = _packb(self)
        return self._packed


class PackedRecords(Sequence):
    """A batch's records as read off the wire (rule 4): the msgpack bytes, the count read from the
    array header, and the records decoded (and checked) only when first needed.  :attr:`key` is
    the bytes — the content identity a duplicate filter may use."""

    __slots__ = ("packed", "_records", "_stamps", "_n")

    def __init__(self, packed: bytes):
        self.packed = packed
        self._n = _array_length(packed)
        self._records: Sequence[Record] | None = None
        self._stamps: list[int] | None = None

    @property
    def key(self) -> bytes:
        return self.packed

    @property
    def records(self) -> Sequence[Record]:
        """The records; raises :class:`WireError` if the bytes are not an array of records."""
        if self._records is None:
            self._records, self._stamps = _unpack_records(self.packed, self._n)
        return self._records

    @property
    def stamps(self) -> list[int]:
        """The records' timestamps, in record order: taken out once, to check them, and kept for
        the duplicate filter (:func:`operators.record.sorted_stamps`), which would take them out again."""
        if self._stamps is None:
            self._records, self._stamps = _unpack_records(self.packed, self._n)
        return self._stamps

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        return self.records[index]

    def __iter__(self):
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self.records) == tuple(other)

    __hash__ = None  # type: ignore[assignment]   (a list-like, like the records lists it stands for)

    def __repr__(self) -> str:
        return f"PackedRecords({list(self.records)!r})"


def _array_length(packed: bytes) -> int:
    """The element count in a msgpack array header."""
    head = packed[:1]
    if head and 0x90 <= head[0] <= 0x9F:
        return head[0] & 0x0F
    if head == b"\xdc" and len(packed) >= 3:
        return int.from_bytes(packed[1:3], "big")
    if head == b"\xdd" and len(packed) >= 5:
        return int.from_bytes(packed[1:5], "big")
    raise WireError("batch records must be a msgpack array")


def _unpack_records(packed: bytes, n: int) -> tuple[tuple[Record, ...], list[int]]:
    """The records in ``packed`` (``n`` of them) and their timestamps, in record order."""
    try:
        records = msgpack.unpackb(packed, use_list=False, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types for garbage
        raise WireError(f"batch records are not msgpack: {type(error).__name__}") from None
    # Every record an array starting with an integer timestamp (type checks in C, three passes).
    try:
        valid = type(records) is tuple and len(records) == n and set(map(type, records)) <= {tuple}
        if valid:
            stamps = list(map(_first, records))
            valid = set(map(type, stamps)) <= {int}
    except IndexError:                  # an empty record
        valid = False
    if not valid:
        raise WireError("batch records must be arrays starting with an integer timestamp")
    return records, stamps


# -- messages <-> frames --------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    """One frame (length prefix included) carrying ``message``."""
    code, fields = _ENCODERS[type(message)]
    body = _packb([code, *fields(message)])
    return _HEADER.pack(len(body)) + body


def batch_header_size(stream: StreamReplica) -> int:
    """Bytes of a :class:`Batch` frame on ``stream`` other than its epoch, offset, records and punctuation
    fields: msgpack writes a short array as a one-byte header followed by its elements, so a
    frame's size is this plus each field's own encoding (see :func:`batch_frame_size`)."""
    return (len(encode(Batch(stream, 0, 0, (), None))) - 2 * len(_packb(0)) - len(_packb(_packb(())))
            - len(_packb(None)))


def batch_frame_size(header: int, batch: Batch) -> int:
    """``len(encode(batch))`` given ``header = batch_header_size(batch.stream)``, without building
    the frame (the simulator sizes every message it moves)."""
    return (header + len(_packb(batch.epoch)) + len(_packb(batch.offset))
            + len(_packb(_records_bytes(batch.records))) + len(_packb(batch.punctuation)))


def decode(body: bytes) -> Message:
    """The message in one frame body (without its length prefix); raises :class:`WireError`."""
    try:
        value = msgpack.unpackb(body, use_list=False, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types for garbage
        raise WireError(f"not msgpack: {type(error).__name__}") from None
    if type(value) is not tuple or not value or type(value[0]) is not int:
        raise WireError("a frame must hold an array [code, fields…]")
    decoder = _DECODERS.get(value[0])
    if decoder is None:
        raise WireError(f"unknown message code {value[0]}")
    build, n = decoder
    if len(value) != n + 1:
        raise WireError(f"message code {value[0]} needs {n} fields, got {len(value) - 1}")
    try:
        return build(value[1:])
    except WireError:
        raise
    except (TypeError, ValueError, IndexError) as error:
        raise WireError(f"bad fields for message code {value[0]}: {error}") from None


class FrameDecoder:
    """Splits a byte stream into frame bodies.  Feed it bytes; it returns complete bodies.

    A link starts with a small ``max_frame`` and ``single = True`` (one frame per call, the rest kept)
    until the peer has authenticated (engine.handshake.MAX_HANDSHAKE_FRAME), so an unknown peer cannot
    make a node buffer a large frame; then both are relaxed and ``feed(b"")`` returns what is left."""

    def __init__(self, max_frame: int = MAX_FRAME, single: bool = False):
        self._buffer = bytearray()
        self.max_frame, self.single = max_frame, single

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if buffer:
            buffer += data
            source = buffer
        else:                                           # the common case: parse the read itself
            source = data
        spans, start, end = [], 0, len(source)
        while end - start >= 4:
            (size,) = _HEADER.unpack_from(source, start)
            if size > self.max_frame:
                raise WireError(f"frame of {size} bytes exceeds the {self.max_frame}-byte limit")
            if end - start - 4 < size:
                break
            spans.append((start + 4, start + 4 + size))
            start += 4 + size
            if self.single:
                break
        with memoryview(source) as view:                # one copy per frame
            bodies = [view[a:b].tobytes() for a, b in spans]
            if source is not buffer and start < end:
                buffer += view[start:]                  # the start of the next frame
        if source is buffer:
            del buffer[:start]
        return bodies
