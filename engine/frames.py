"""The wire schema: one msgspec Struct per message, laid out exactly as its frame (docs/node.md, "Between nodes").

Rules of this module:

1. A frame body is the msgpack array ``[code, fields…]`` (DESIGN.md §4).  Each :class:`Frame`
   subclass is that array: ``array_like`` with the message code as its tag, so msgspec checks the
   code, the field count and every field's type and range in one pass while it decodes — the schema
   *is* the validator.  Fields are flat (a stream replica is five fields, not a nested array), as
   they were when these frames were read by hand: the bytes are the same.
2. The annotated types below (:data:`Int64`, :data:`Index`, …) are the value rules the core relies
   on: ints the core can send back (offset + 1 must still encode), replica indexes and ports small
   (a replica count is a handful, §III), names bounded.  Their ``description`` is what an error says
   was expected (:mod:`engine.wire` turns msgspec's error into one line naming the message, the field
   and the value).
3. ``Frame.of(message)`` and ``frame.message()`` translate to and from :mod:`engine.messages`; the core
   never sees a Frame.  A new message is one subclass; a new optional field goes last with a default,
   so frames without it still decode (older senders) and frames with it are refused by nodes that do
   not know it (``forbid_unknown_fields``: an array longer than the schema is a malformed frame).
4. Fields whose content is free-form (statistics, snapshot state) stay :class:`msgspec.Raw` and are
   read by msgpack with ``use_list=False``, so their arrays come back as tuples, hashable, as before.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

import msgpack
import msgspec
from msgspec import Meta, Raw, Struct

from replicast.engine.core.baggage import MAX_HOPS, is_baggage
from replicast.engine.packed_records import PackedRecords, WireError, records_bytes
from replicast.engine.messages import (Ack, Batch, Committed, ConnectStream, DeployReplica, Determinant, DeterminantAck,
                                       DisconnectStream, Heartbeat, Hello, Hold, JoinStamping, KeySeals, Mark, Message,
                                       NoSnapshot, SnapshotRefusal,
                                       NotHosted, Proof, RemoveReplica, Report, Resume, Snapshot, SnapshotRequest,
                                       StampAck, Stamped, Standby, Statistics, StatisticsRequest, StreamHead, View,
                                       ViewBallot, ViewDecided, ViewReply)
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.reports import InputReport, ServerReport

#: Replica indexes and ports are small: a replica count is a handful (§III).
SMALL = 1 << 16

Int64 = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1, description="signed 64-bit integer")]
Index = Annotated[int, Meta(ge=0, lt=SMALL, description="replica index")]
IndexOrNone = Annotated[int, Meta(ge=-1, lt=SMALL, description="replica index or -1")]
PortNumber = Annotated[int, Meta(ge=0, lt=SMALL, description="port")]
Name = Annotated[str, Meta(max_length=256, description="replica name")]
Member = tuple[Index, Int64]
Refusal = Annotated[SnapshotRefusal, Meta(description="snapshot refusal")]


def _free_map(raw: Raw, field: str) -> dict:
    """A free-form field (rule 4): a msgpack map, its arrays as tuples."""
    try:
        value = msgpack.unpackb(raw, use_list=False, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types for garbage
        raise WireError(f"field {field}: not msgpack ({type(error).__name__})") from None
    if type(value) is not dict:
        raise WireError(f"field {field} must be a map, got {type(value).__name__}")
    return value


def _pack_raw(value: Any) -> Raw:
    return Raw(msgpack.packb(value, use_bin_type=True))


class Frame(Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """A frame body (rule 1).  Subclasses set ``tag=<code>`` and ``MESSAGE``."""

    MESSAGE: ClassVar[type]

    @classmethod
    def of(cls, m) -> "Frame":
        """The frame of message ``m``; by default its fields of the same names (subclasses that flatten
        or pack a field say how)."""
        return cls(*map(m.__getattribute__, cls.__struct_fields__))

    def message(self) -> Message:
        """The message this frame carries (by default its fields, in the message's order)."""
        return self.MESSAGE(*msgspec.structs.astuple(self))


class Part(Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    """A nested array inside a frame (a view, a lineage, a report row)."""


# -- stream replicas and replicas, flattened (rule 1) ------------------------------------------------
#: Stream replicas read off the wire so far, by their five (already validated) fields.  A node's links
#: carry a handful of streams and every batch and ack names one, so reading it is one lookup.
#: Bounded: emptied when it reaches ``_STREAMS_KEPT`` entries.
_streams: dict[tuple, StreamReplica] = {}
_STREAMS_KEPT = 4096


def stream_of(source: str, source_index: int, target: str, target_index: int, port: int) -> StreamReplica:
    key = (source, source_index, target, target_index, port)
    stream = _streams.get(key)
    if stream is None:
        if len(_streams) >= _STREAMS_KEPT:
            _streams.clear()
        stream = _streams[key] = StreamReplica(ReplicaId(source, source_index), ReplicaId(target, target_index), port)
    return stream


def stream_fields(s: StreamReplica) -> tuple:
    return s.source.name, s.source.index, s.target.name, s.target.index, s.port


class OnStream(Frame):
    """A frame about one stream replica: its five fields first (untagged, a report's row of a route)."""

    source: Name
    source_index: Index
    target: Name
    target_index: Index
    port: PortNumber

    @property
    def stream(self) -> StreamReplica:
        return stream_of(self.source, self.source_index, self.target, self.target_index, self.port)


class ReplicaRow(Part):
    name: Name
    index: Index


class Lineage(Part):
    name: Name
    index: Index
    epoch: Int64
    start: Int64
    end: Int64


class ViewPart(Part):
    term: Int64
    stamper: Index
    members: Annotated[tuple[Member, ...], Meta(max_length=SMALL)]
    base: Int64

    @classmethod
    def of(cls, view: View | None) -> "ViewPart | None":
        return None if view is None else cls(view.term, view.stamper, view.members, view.base)

    def view(self) -> View:
        return View(self.term, self.stamper, self.members, self.base)


def _view(part: ViewPart | None) -> View | None:
    return None if part is None else part.view()


# -- data ---------------------------------------------------------------------------------------
class BatchFrame(OnStream, tag=1):
    MESSAGE = Batch
    epoch: Int64
    offset: Int64
    records: bytes                  # the msgpack array of records, read when first needed (wire rule 4)
    punctuation: Int64 | None

    def message(self) -> Batch:
        return Batch(self.stream, self.epoch, self.offset, PackedRecords(self.records), self.punctuation)

    @classmethod
    def of(cls, m: Batch) -> "BatchFrame":
        fields = (*stream_fields(m.stream), m.epoch, m.offset, records_bytes(m.records), m.punctuation)
        if m.path and is_baggage(m.path):               # a trace's baggage: only then (docs/tracing.md)
            return TracedBatchFrame(*fields, m.path)
        return cls(*fields)


class TracedBatchFrame(BatchFrame, tag=50):
    """A batch with trace baggage (engine/core/baggage.py): the batch frame and one field more, so
    the frames of batches without it stay byte for byte what they are."""

    baggage: Annotated[tuple[Annotated[str, Meta(max_length=200)], ...],
                       Meta(max_length=MAX_HOPS, description=f"at most {MAX_HOPS} trace hops")]

    def message(self) -> Batch:
        return Batch(self.stream, self.epoch, self.offset, PackedRecords(self.records), self.punctuation,
                     self.baggage)


#: A value of a seal's key: what a record's field may hold (operators/record.py).
SealValue = Union[str, Int64, float, bool]


class KeySealPart(Part):
    """One seal per key: the key's values (sorted-name order, operators/key_seals.py) and ``p``."""

    key: Annotated[tuple[SealValue, ...], Meta(min_length=1, max_length=SMALL, description="seal key values")]
    p: Int64


class KeySealsFrame(OnStream, tag=26):
    MESSAGE = KeySeals
    epoch: Int64
    offset: Int64
    seals: tuple[KeySealPart, ...]

    @classmethod
    def of(cls, m: KeySeals) -> "KeySealsFrame":
        return cls(*stream_fields(m.stream), m.epoch, m.offset, tuple(KeySealPart(k, p) for k, p in m.seals))

    def message(self) -> KeySeals:
        return KeySeals(self.stream, self.epoch, self.offset, tuple((s.key, s.p) for s in self.seals))


class _Position(OnStream):
    """A position in a stream replica: ``epoch`` and ``offset`` (an ack, a mark)."""

    epoch: Int64
    offset: Int64

    @classmethod
    def of(cls, m: Ack | Mark) -> "_Position":
        return cls(*stream_fields(m.stream), m.epoch, m.offset)

    def message(self) -> Ack | Mark:
        return self.MESSAGE(self.stream, self.epoch, self.offset)


class AckFrame(_Position, tag=2):
    MESSAGE = Ack


class HeartbeatFrame(Frame, tag=3):
    MESSAGE = Heartbeat
    sent_us: Int64
    echo_us: Int64 | None

    @classmethod
    def of(cls, m: Heartbeat) -> "HeartbeatFrame":     # every link, every heartbeat interval: spelt out
        return cls(m.sent_us, m.echo_us)


class DeployReplicaFrame(Frame, tag=4):
    MESSAGE = DeployReplica
    name: Name
    index: Index
    peers: tuple[str, ...]

    @classmethod
    def of(cls, m: DeployReplica) -> "DeployReplicaFrame":
        return cls(m.replica.name, m.replica.index, m.peers)

    def message(self) -> DeployReplica:
        return DeployReplica(ReplicaId(self.name, self.index), self.peers)


class RemoveReplicaFrame(Frame, tag=5):
    MESSAGE = RemoveReplica
    name: Name
    index: Index

    @classmethod
    def of(cls, m: RemoveReplica) -> "RemoveReplicaFrame":
        return cls(m.replica.name, m.replica.index)

    def message(self) -> RemoveReplica:
        return RemoveReplica(ReplicaId(self.name, self.index))


class ConnectStreamFrame(OnStream, tag=6):
    MESSAGE = ConnectStream
    source_node: str
    target_node: str

    @classmethod
    def of(cls, m: ConnectStream) -> "ConnectStreamFrame":
        return cls(*stream_fields(m.stream), m.source_node, m.target_node)

    def message(self) -> ConnectStream:
        return ConnectStream(self.stream, self.source_node, self.target_node)


class _StreamOnly(OnStream):
    """Frames whose message holds only ``stream``."""

    @classmethod
    def of(cls, m) -> "_StreamOnly":
        return cls(*stream_fields(m.stream))

    def message(self) -> Message:
        return self.MESSAGE(self.stream)


class DisconnectStreamFrame(_StreamOnly, tag=7):
    MESSAGE = DisconnectStream


class HoldFrame(_StreamOnly, tag=13):
    MESSAGE = Hold


class NotHostedFrame(_StreamOnly, tag=25):
    MESSAGE = NotHosted


class StatisticsRequestFrame(Frame, tag=8):
    MESSAGE = StatisticsRequest


class StatisticsFrame(Frame, tag=9):
    MESSAGE = Statistics
    node: str
    data: Raw                       # a map (rule 4)

    @classmethod
    def of(cls, m: Statistics) -> "StatisticsFrame":
        return cls(m.node, _pack_raw(m.data))

    def message(self) -> Statistics:
        return Statistics(self.node, _free_map(self.data, "data"))


class HelloFrame(Frame, tag=10):
    MESSAGE = Hello
    node: str
    nonce: bytes


class ProofFrame(Frame, tag=11):
    MESSAGE = Proof
    mac: bytes


class ResumeFrame(OnStream, tag=12):
    MESSAGE = Resume
    epoch: Int64 | None
    offset: Int64

    @classmethod
    def of(cls, m: Resume) -> "ResumeFrame":
        return cls(*stream_fields(m.stream), m.epoch, m.offset)

    def message(self) -> Resume:
        return Resume(self.stream, self.epoch, self.offset)


class StreamHeadFrame(OnStream, tag=15):
    MESSAGE = StreamHead
    epoch: Int64
    offset: Int64
    frontier: Int64
    lineage: Lineage | None

    @classmethod
    def of(cls, m: StreamHead) -> "StreamHeadFrame":
        lineage = None if m.lineage is None else Lineage(m.lineage[0].name, m.lineage[0].index, *m.lineage[1:])
        return cls(*stream_fields(m.stream), m.epoch, m.offset, m.frontier, lineage)

    def message(self) -> StreamHead:
        line = self.lineage
        lineage = None if line is None else (ReplicaId(line.name, line.index), line.epoch, line.start, line.end)
        return StreamHead(self.stream, self.epoch, self.offset, self.frontier, lineage)


class MarkFrame(_Position, tag=19):
    MESSAGE = Mark


class StandbyFrame(OnStream, tag=20):
    MESSAGE = Standby
    punctuation: Int64

    @classmethod
    def of(cls, m: Standby) -> "StandbyFrame":
        return cls(*stream_fields(m.stream), m.punctuation)

    def message(self) -> Standby:
        return Standby(self.stream, self.punctuation)


# -- replica lifecycle ------------------------------------------------------------------------------
class _JoinerDonor(Frame):
    joiner: Name
    joiner_index: Index
    donor: Name
    donor_index: Index

    @property
    def replicas(self) -> tuple[ReplicaId, ReplicaId]:
        return ReplicaId(self.joiner, self.joiner_index), ReplicaId(self.donor, self.donor_index)


def _joiner_donor(m) -> tuple:
    return m.joiner.name, m.joiner.index, m.donor.name, m.donor.index


class SnapshotRequestFrame(_JoinerDonor, tag=16):
    MESSAGE = SnapshotRequest

    @classmethod
    def of(cls, m: SnapshotRequest) -> "SnapshotRequestFrame":
        return cls(*_joiner_donor(m))

    def message(self) -> SnapshotRequest:
        return SnapshotRequest(*self.replicas)


class SnapshotFrame(_JoinerDonor, tag=17):
    MESSAGE = Snapshot
    state: Raw                      # a map (rule 4)

    @classmethod
    def of(cls, m: Snapshot) -> "SnapshotFrame":
        return cls(*_joiner_donor(m), _pack_raw(m.state))

    def message(self) -> Snapshot:
        return Snapshot(*self.replicas, _free_map(self.state, "state"))


class NoSnapshotFrame(_JoinerDonor, tag=18):
    MESSAGE = NoSnapshot
    reason: Refusal                 # by value: an unknown reason is a malformed frame

    @classmethod
    def of(cls, m: NoSnapshot) -> "NoSnapshotFrame":
        return cls(*_joiner_donor(m), m.reason)

    def message(self) -> NoSnapshot:
        return NoSnapshot(*self.replicas, self.reason)


class DeterminantFrame(Frame, tag=23):
    MESSAGE = Determinant
    backup: Name
    backup_index: Index
    seq: Int64
    port: PortNumber
    records: bytes
    punctuation: Int64 | None

    @classmethod
    def of(cls, m: Determinant) -> "DeterminantFrame":
        return cls(m.backup.name, m.backup.index, m.seq, m.port, records_bytes(m.records), m.punctuation)

    def message(self) -> Determinant:
        return Determinant(ReplicaId(self.backup, self.backup_index), self.seq, self.port,
                           PackedRecords(self.records), self.punctuation)


class DeterminantAckFrame(Frame, tag=24):
    MESSAGE = DeterminantAck
    primary: Name
    primary_index: Index
    seq: Int64

    @classmethod
    def of(cls, m: DeterminantAck) -> "DeterminantAckFrame":
        return cls(m.primary.name, m.primary.index, m.seq)

    def message(self) -> DeterminantAck:
        return DeterminantAck(ReplicaId(self.primary, self.primary_index), self.seq)


# -- placement reports (§V) ------------------------------------------------------------------------
class RecordsOutRow(Part):
    name: Name
    index: Index
    records: Int64


class InputRow(OnStream):
    """A report's row of an input: the stream replica, its weight and delay (§V-B, §V-C)."""

    weight: float
    delay_us: Int64


class ReportFrame(Frame, tag=21):
    MESSAGE = Report
    server: str
    rtt_ms: dict[str, float]
    load: float
    capacity: float
    hosted: tuple[ReplicaRow, ...]
    records_out: tuple[RecordsOutRow, ...]
    inputs: tuple[InputRow, ...]
    routes: tuple[OnStream, ...]

    @classmethod
    def of(cls, m: Report) -> "ReportFrame":
        r = m.report
        return cls(r.server, dict(r.rtt_ms), r.load, r.capacity, tuple(ReplicaRow(h.name, h.index) for h in r.hosted),
                   tuple(RecordsOutRow(x.name, x.index, n) for x, n in r.records_out.items()),
                   tuple(InputRow(*stream_fields(s), i.weight, i.delay_us) for s, i in r.inputs.items()),
                   tuple(OnStream(*stream_fields(s)) for s in r.routes))

    def message(self) -> Report:
        inputs = {i.stream: InputReport(i.weight, i.delay_us) for i in self.inputs}
        return Report(ServerReport(self.server, self.rtt_ms, self.load, self.capacity,
                                   tuple(ReplicaId(h.name, h.index) for h in self.hosted),
                                   {ReplicaId(x.name, x.index): x.records for x in self.records_out}, inputs,
                                   tuple(row.stream for row in self.routes)))


# -- entry-stamped mode (messages rule 8) -------------------------------------------------------------
class ViewBallotFrame(Frame, tag=40):
    MESSAGE = ViewBallot
    stream: str
    candidate: Index
    term: Int64
    view: ViewPart | None

    @classmethod
    def of(cls, m: ViewBallot) -> "ViewBallotFrame":
        return cls(m.stream, m.candidate, m.term, ViewPart.of(m.view))

    def message(self) -> ViewBallot:
        return ViewBallot(self.stream, self.candidate, self.term, _view(self.view))


class ViewReplyFrame(Frame, tag=41):
    MESSAGE = ViewReply
    stream: str
    candidate: Index
    term: Int64
    phase: Annotated[int, Meta(ge=0, lt=SMALL, description="phase")]
    ok: bool
    promised: Int64
    accepted: ViewPart | None

    @classmethod
    def of(cls, m: ViewReply) -> "ViewReplyFrame":
        return cls(m.stream, m.candidate, m.term, m.phase, m.ok, m.promised, ViewPart.of(m.accepted))

    def message(self) -> ViewReply:
        return ViewReply(self.stream, self.candidate, self.term, self.phase, self.ok, self.promised,
                         _view(self.accepted))


class ViewDecidedFrame(Frame, tag=42):
    MESSAGE = ViewDecided
    stream: str
    target: IndexOrNone
    view: ViewPart                  # required: a decided view
    start: Int64
    frontier: Int64 | None
    base: Int64
    since: Int64

    @classmethod
    def of(cls, m: ViewDecided) -> "ViewDecidedFrame":
        return cls(m.stream, m.target, ViewPart.of(m.view), m.start, m.frontier, m.base, m.since)

    def message(self) -> ViewDecided:
        return ViewDecided(self.stream, self.target, self.view.view(), self.start, self.frontier, self.base, self.since)


class StampedFrame(Frame, tag=43):
    MESSAGE = Stamped
    stream: str
    target: Index
    term: Int64
    seq: Int64
    records: bytes
    punctuation: Int64 | None

    @classmethod
    def of(cls, m: Stamped) -> "StampedFrame":
        return cls(m.stream, m.target, m.term, m.seq, records_bytes(m.records), m.punctuation)

    def message(self) -> Stamped:
        return Stamped(self.stream, self.target, self.term, self.seq, PackedRecords(self.records), self.punctuation)


class StampAckFrame(Frame, tag=44):
    MESSAGE = StampAck
    stream: str
    target: Index
    member: Index
    term: Int64
    seq: Int64


class CommittedFrame(Frame, tag=45):
    MESSAGE = Committed
    stream: str
    target: Index
    term: Int64
    seq: Int64


class JoinStampingFrame(Frame, tag=46):
    MESSAGE = JoinStamping
    stream: str
    index: Index
    epoch: Int64


#: Every frame type, one per message type.
FRAMES: tuple[type[Frame], ...] = (
    BatchFrame, AckFrame, HeartbeatFrame, DeployReplicaFrame, RemoveReplicaFrame, ConnectStreamFrame,
    DisconnectStreamFrame, StatisticsRequestFrame, StatisticsFrame, HelloFrame, ProofFrame, ResumeFrame, HoldFrame,
    StreamHeadFrame, SnapshotRequestFrame, SnapshotFrame, MarkFrame, StandbyFrame, DeterminantFrame, NotHostedFrame,
    DeterminantAckFrame, NoSnapshotFrame, ReportFrame, ViewBallotFrame, ViewReplyFrame, ViewDecidedFrame, StampedFrame,
    StampAckFrame, CommittedFrame, JoinStampingFrame, KeySealsFrame)
#: message class -> its frame type; code -> frame type.
BY_MESSAGE: dict[type, type[Frame]] = {frame.MESSAGE: frame for frame in FRAMES}
#: Frames decoded besides: a batch with trace baggage (BatchFrame.of picks it).
VARIANTS: tuple[type[Frame], ...] = (TracedBatchFrame,)
BY_CODE: dict[int, type[Frame]] = {frame.__struct_config__.tag: frame for frame in (*FRAMES, *VARIANTS)}
AnyFrame = Union[(*FRAMES, *VARIANTS)]  # type: ignore[valid-type]


def code(frame: type[Frame]) -> int:
    return frame.__struct_config__.tag


def required_fields(frame: type[Frame]) -> int:
    """Fields a frame of this type must carry after its code (trailing defaulted fields are optional)."""
    return sum(f.required for f in msgspec.structs.fields(frame))

