"""The messages nodes exchange (DESIGN.md §4, §6): dataclass nouns, no behaviour, never changed once made.

All are frozen but the two made per message, :class:`Batch` and :class:`Ack` (and the core's
``Delivered`` event): a frozen dataclass's ``__init__`` sets each field through
``object.__setattr__`` in interpreted code even where the class is compiled (replicast/native_build.py),
4.5× the cost of the compiled ``__init__`` of a plain one, and Batch construction alone was ~9 % of
a native simulation's CPU (docs/simulator.md, "CPU against cd9ce3d").  Nothing assigns to their
fields (``tests/engine/test_message_fields.py`` reads every module for an assignment).

Rules of this module:

1. A message names replicas and stream replicas by value (:class:`~operators.plan.ReplicaId`,
   :class:`~operators.plan.StreamReplica`), never by socket or connection: the node core addresses
   a message to a *node name* and the driver (TCP or simulated) carries it.
2. Data messages are :class:`Batch` and :class:`Ack`.  Every *incarnation* of a replica (its
   ``epoch``: the time it was deployed, µs) emits one sequence of *items* (records and
   punctuations) numbered from 0, carried alike by all its stream replicas; a batch carries
   consecutive items starting at ``offset`` — its records, then maybe one punctuation.  Offsets let
   a receiver drop a replayed prefix it already has, so replay after a reconnect never creates
   duplicates on a stream replica (the duplicate filter counts multiplicities per stream replica,
   §IV-B, so a re-sent record would otherwise count as a second occurrence).  A restarted or
   rejoined replica is a new epoch: receivers treat it as a new stream replica, explicitly.
3. An :class:`Ack` is cumulative: "I hold every item below ``offset``".  Receivers send one after
   each batch that carries a punctuation (§II-B: entry points buffer until downstream replicas have
   the tuples; acks by punctuation keep that buffer to about one punctuation interval).
4. Control messages (deploy/remove, connect/disconnect, statistics, heartbeat) come from a
   coordinator or from the node's own configuration; the core applies them the same way.
5. A batch's ``path`` is in-process provenance (Pivot Tracing's baggage, kept to one tuple per
   batch): the replicas whose emissions led to it, oldest first, as ``replica@node``.  Only cores
   that trace paths (``NodeOptions.trace_paths``, the simulator) fill it; it is not part of the
   wire format nor of a batch's equality — except as trace baggage: hops that carry their times
   (``replica@node@µs``, engine/core/tracepoints.py rule 4) travel in the frame (wire rule 5).
6. Stream positioning is receiver-driven: a sender sends nothing on a stream replica until its
   receiver said where to start (:class:`Resume`) or asked it to keep its log (:class:`Hold`, while
   the receiving replica joins).  The sender answers a Resume with a :class:`StreamHead` and then
   the items from there on.  A node that does not host the sending replica answers
   :class:`NotHosted`.
7. In the failover modes (:mod:`engine.core.modes`) a receiver follows one upstream replica per
   port and keeps the others on standby (:class:`Standby`).  In mode ``synchronization`` a
   process-pair primary sends its backup a :class:`Determinant` per step of its operator's input
   and holds its outputs until a :class:`DeterminantAck`.
8. A replica that starts mid-stream takes a :class:`Snapshot` from a live peer replica
   (:class:`SnapshotRequest`; :class:`NoSnapshot` if the peer cannot give one).  See
   ``docs/lifecycle.md``.
8. Entry-stamped mode: the replicas of an entry point agree on one stamper through a :class:`View`
   decided by a majority of voters (:class:`ViewBallot`, :class:`ViewReply`, :class:`ViewDecided`);
   the stamper emits a segment only once every member holds it (:class:`Stamped`,
   :class:`StampAck`, :class:`Committed`); a replica outside the view asks to join
   (:class:`JoinStamping`).  See :mod:`engine.core.stamper`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import Record
from replicast.placement.reports import ServerReport


# -- data -----------------------------------------------------------------------------------------
@dataclass(slots=True)
class Batch:
    """Items ``offset …`` of ``stream``: ``records`` in order, then ``punctuation`` if not None."""

    stream: StreamReplica
    epoch: int
    offset: int
    records: Sequence[Record]
    punctuation: int | None = None
    path: tuple[str, ...] = field(default=(), compare=False)     # rule 5

    @property
    def items(self) -> int:
        return len(self.records) + (self.punctuation is not None)


@dataclass(slots=True)
class Ack:
    """The receiver of ``stream`` holds every item below ``offset`` of the sender's incarnation ``epoch``."""

    stream: StreamReplica
    epoch: int
    offset: int


# -- stream positioning (rule 6) --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Resume:
    """Receiver → sender: send ``stream`` from item ``offset`` of incarnation ``epoch``; ``epoch``
    None: the receiver holds nothing of the sender's stream (start wherever the log starts)."""

    stream: StreamReplica
    epoch: int | None
    offset: int


@dataclass(frozen=True, slots=True)
class Hold:
    """Receiver → sender: keep your log from where it now starts, and send nothing on ``stream``
    until I send :class:`Resume` (the receiving replica is joining and does not know its position)."""

    stream: StreamReplica


@dataclass(frozen=True, slots=True)
class Standby:
    """Receiver → sender (failover modes, rule 7): send nothing on ``stream``, and keep only what a
    switch to it would need — every item after the longest prefix whose records and punctuations
    are all at or below ``punctuation`` (the receiving port has every record up to it)."""

    stream: StreamReplica
    punctuation: int


@dataclass(frozen=True, slots=True)
class NotHosted:
    """Sender → receiver (rule 6): this node does not host ``stream.source`` — it was never deployed
    here, or the node restarted without it (a coordinator had placed it).  The receiver stops
    waiting for the stream replica (``docs/lifecycle.md``: inputs that vanish); a stream head that
    comes later (the replica is deployed after all) positions it again."""

    stream: StreamReplica


@dataclass(frozen=True, slots=True)
class Determinant:
    """Process-pair primary → backup (rule 7): step ``seq`` of the primary's operator input —
    ``records`` on ``port`` in the order it processed them, then ``punctuation`` if not None."""

    backup: ReplicaId
    seq: int
    port: int
    records: Sequence[Record]
    punctuation: int | None = None


@dataclass(frozen=True, slots=True)
class DeterminantAck:
    """Backup → primary: it took every step of ``primary`` up to ``seq``."""

    primary: ReplicaId
    seq: int


@dataclass(frozen=True, slots=True)
class StreamHead:
    """Sender → receiver, before the items it replays: ``stream`` continues with item ``offset`` of
    incarnation ``epoch``; what came before is no longer kept.  From ``offset`` on, the stream
    carries every record with ``ts > frontier`` — a receiver that lacks items before ``offset``
    may trust this stream's punctuations only once its input has reached ``frontier`` (§IV-B) —
    unless ``lineage`` ``(replica, epoch, start, end)`` says that this stream from ``offset`` is
    another replica's stream from ``start`` to ``end`` (a joined replica's copied log) and then
    continues it, and the receiver holds that stream up to ``start``."""

    stream: StreamReplica
    epoch: int
    offset: int
    frontier: int
    lineage: tuple[ReplicaId, int, int, int] | None = None   # (replica, epoch, its offset here, end of the copy)


@dataclass(frozen=True, slots=True)
class Mark:
    """In ``stream`` at ``offset`` of incarnation ``epoch``: a peer took a snapshot here, so a joined
    replica's stream will continue this one from this offset.  The receiver notes its counts for
    this stream replica at this point (see :class:`StreamHead` and ``docs/lifecycle.md``)."""

    stream: StreamReplica
    epoch: int
    offset: int


# -- replica lifecycle (rule 7) ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """Joining replica ``joiner`` asks its peer ``donor`` (a replica of the same operator) for a snapshot."""

    joiner: ReplicaId
    donor: ReplicaId


@dataclass(frozen=True, slots=True)
class Snapshot:
    """``donor``'s state for ``joiner``, consistent at one point: see :mod:`engine.core.snapshot`."""

    joiner: ReplicaId
    donor: ReplicaId
    state: dict[str, Any]


class SnapshotRefusal(Enum):
    """Why a donor gave no snapshot: not hosted, one member per replica state that is not live (a
    joiner notes the peers that rebuild themselves: :mod:`engine.core.lifecycle`, rule 3), or a port
    of it that cannot advance.  The values are the texts the frame carried before it was typed, so the
    bytes on the wire are the same (:mod:`engine.frames`, rule 1)."""

    NOT_HOSTED = "not hosted here"
    JOINING = "it is joining"
    REBUILDING = "it is rebuilding"
    REMOVED = "it is removed"
    STUCK = "a port of it cannot advance either"


@dataclass(frozen=True, slots=True)
class NoSnapshot:
    """``donor`` cannot give a snapshot, for ``reason``."""

    joiner: ReplicaId
    donor: ReplicaId
    reason: SnapshotRefusal


# -- entry-stamped mode (rule 8) -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class View:
    """Who stamps an entry-stamped stream: decided by a majority of voters (:mod:`engine.core.views`).
    ``members`` are ``(replica index, epoch)`` pairs, the stamper's among them; every segment the
    stamper emits is held by every member first."""

    term: int
    stamper: int
    members: tuple[tuple[int, int], ...]
    #: The term of the view it was derived from (-1: none, the stream's first view).  A member of
    #: that view that never heard of this one holds everything emitted before it (view_changes rule 4).
    base: int = -1


@dataclass(frozen=True, slots=True)
class ViewBallot:
    """Candidate replica ``candidate`` of ``stream`` → a voter: promise ``term`` (``view`` None,
    Paxos phase 1) or accept ``view`` (phase 2, ``view.term == term``)."""

    stream: str
    candidate: int
    term: int
    view: View | None = None


@dataclass(frozen=True, slots=True)
class ViewReply:
    """A voter → the candidate: whether it promised (phase 1) or accepted (phase 2) ``term``; the
    largest term it has promised and the view it last accepted."""

    stream: str
    candidate: int
    term: int
    phase: int
    ok: bool
    promised: int
    accepted: View | None


@dataclass(frozen=True, slots=True)
class ViewDecided:
    """The stamper of ``view`` → a peer replica (``target``; -1: to the voters only): this view is
    decided.  A member that was in view ``base`` (-1: none) continues its stream with segment
    ``start``; any other member starts a new stream there, complete above ``frontier``, and first
    settles its pending records with the segments from ``since`` (committed lately) to ``start``."""

    stream: str
    target: int
    view: View
    start: int
    frontier: int | None                 # None: the stream is known from its first punctuation
    base: int = -1
    since: int = 0


@dataclass(frozen=True, slots=True)
class Stamped:
    """The stamper → member ``target``: segment ``seq`` of the stamped stream, stamped in ``term``."""

    stream: str
    target: int
    term: int
    seq: int
    records: Sequence[Record]
    punctuation: int | None = None


@dataclass(frozen=True, slots=True)
class StampAck:
    """Member ``member`` → the stamper ``target``: I hold every segment below ``seq`` of ``term``."""

    stream: str
    target: int
    member: int
    term: int
    seq: int


@dataclass(frozen=True, slots=True)
class Committed:
    """The stamper → member ``target``: every member holds the segments below ``seq``: emit them."""

    stream: str
    target: int
    term: int
    seq: int


@dataclass(frozen=True, slots=True)
class JoinStamping:
    """Replica ``index`` (incarnation ``epoch``) of ``stream``, not a member of the view, asks the
    stamper to admit it (and tells its peers it lives)."""

    stream: str
    index: int
    epoch: int


# -- control --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeployReplica:
    """Host ``replica``.  ``peers`` names the node of every replica of the same logical node, by
    index — entry points use it to find the stamping replica in entry-stamped mode (§II-B)."""

    replica: ReplicaId
    peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoveReplica:
    replica: ReplicaId


@dataclass(frozen=True, slots=True)
class ConnectStream:
    """Stream replica ``stream`` runs from ``source_node`` to ``target_node``."""

    stream: StreamReplica
    source_node: str
    target_node: str


@dataclass(frozen=True, slots=True)
class DisconnectStream:
    stream: StreamReplica


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Liveness and RTT probe; ``echo_us`` returns the ``sent_us`` of the heartbeat it answers."""

    sent_us: int
    echo_us: int | None = None


@dataclass(frozen=True, slots=True)
class StatisticsRequest:
    pass


@dataclass(frozen=True, slots=True)
class Statistics:
    """A node's counters (plain data, see :meth:`engine.node.NodeCore.statistics`)."""

    node: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Report:
    """A server's report to the placement coordinator it elected (§V; :mod:`placement.reports`)."""

    report: ServerReport


# -- handshake (driver level: never reaches the core) --------------------------------------------
@dataclass(frozen=True, slots=True)
class Hello:
    """First frame on a connection: who I am and the challenge you must answer."""

    node: str
    nonce: bytes


@dataclass(frozen=True, slots=True)
class Proof:
    """HMAC of the peer's challenge with the shared secret (see :mod:`engine.wire`)."""

    mac: bytes


# -- seals per key (operators/key_seals.py) ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeySeals:
    """Sender → receiver: per-key seals ``(key values, p)`` of ``stream``'s incarnation ``epoch``, valid
    once the receiver holds every item below ``offset`` (they cover the records sent before them).
    Not items: never logged, acknowledged or replayed — a receiver that cannot use one (a gap, a
    replay under way) drops it and closes the same windows at the next punctuation."""

    stream: StreamReplica
    epoch: int
    offset: int
    seals: tuple[tuple[tuple, int], ...]


Message = (Batch | KeySeals | Ack | Resume | Hold | Standby | NotHosted | Determinant | DeterminantAck | StreamHead | Mark
           | SnapshotRequest | Snapshot | NoSnapshot
           | ViewBallot | ViewReply | ViewDecided | Stamped | StampAck | Committed | JoinStamping
           | DeployReplica | RemoveReplica | ConnectStream | DisconnectStream | Heartbeat
           | StatisticsRequest | Statistics | Report | Hello | Proof)
CONTROL = (DeployReplica, RemoveReplica, ConnectStream, DisconnectStream)
