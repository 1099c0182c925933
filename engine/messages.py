"""The messages nodes exchange (DESIGN.md §4, §6): frozen dataclass nouns, no behaviour.

Rules of this module:

1. A message names replicas and stream replicas by value (:class:`~operators.plan.ReplicaId`,
   :class:`~operators.plan.StreamReplica`), never by socket or connection: the node core addresses
   a message to a *node name* and the driver (TCP or simulated) carries it.
2. Data messages are :class:`Batch` and :class:`Ack`.  Every stream replica is a sequence of
   *items* (records and punctuations) numbered from 0; a batch carries consecutive items starting
   at ``offset`` — its records, then maybe one punctuation.  Offsets let a receiver drop a replayed
   prefix it already has, so replay after a reconnect never creates duplicates on a stream replica
   (the duplicate filter counts multiplicities per stream replica, §IV-B, so a re-sent record would
   otherwise count as a second occurrence).
3. An :class:`Ack` is cumulative: "I hold every item below ``offset``".  Receivers send one after
   each batch that carries a punctuation (§II-B: entry points buffer until downstream replicas have
   the tuples; acks by punctuation keep that buffer to about one punctuation interval).
4. Control messages (deploy/remove, connect/disconnect, statistics, heartbeat) come from a
   coordinator or from the node's own configuration; the core applies them the same way.
5. A batch's ``path`` is in-process provenance (Pivot Tracing's baggage, kept to one tuple per
   batch): the replicas whose emissions led to it, oldest first, as ``replica@node``.  Only cores
   that trace paths (``NodeOptions.trace_paths``, the simulator) fill it; it is not part of the
   wire format nor of a batch's equality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from operators.plan import ReplicaId, StreamReplica
from operators.record import Record


# -- data -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Batch:
    """Items ``offset …`` of ``stream``: ``records`` in order, then ``punctuation`` if not None."""

    stream: StreamReplica
    offset: int
    records: Sequence[Record]
    punctuation: int | None = None
    path: tuple[str, ...] = field(default=(), compare=False)     # rule 5

    @property
    def items(self) -> int:
        return len(self.records) + (self.punctuation is not None)


@dataclass(frozen=True, slots=True)
class Ack:
    """The receiver of ``stream`` holds every item below ``offset``."""

    stream: StreamReplica
    offset: int


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


Message = (Batch | Ack | DeployReplica | RemoveReplica | ConnectStream | DisconnectStream | Heartbeat
           | StatisticsRequest | Statistics | Hello | Proof)
CONTROL = (DeployReplica, RemoveReplica, ConnectStream, DisconnectStream)
