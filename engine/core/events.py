"""What a node core tells its driver (drained with :meth:`~engine.core.node.NodeCore.events`), and its options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replicast.engine.core.modes import Mode
from replicast.engine.entry import EntryMode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import Record


@dataclass(frozen=True)
class NodeOptions:
    """Timing and limits of a node.  ``entry_modes`` maps a stream to its :class:`~engine.entry.EntryMode`
    (default ``SOURCE``); the text ``source`` or ``entry`` a configuration file or scenario gives is
    turned into the enum here, at the core's boundary, and anything else is refused naming the stream."""

    punctuation_us: int = 100_000
    heartbeat_us: int = 500_000
    peer_timeout_us: int = 3_000_000
    entry_modes: dict[str, EntryMode] = field(default_factory=dict)
    #: Fill batches' and deliveries' ``path`` (engine.messages rule 5): which replicas' emissions led
    #: to each delivery — the fastest path, since the first copy is the one that passes (§IV-B).
    trace_paths: bool = False
    #: How long a joining replica waits for links to its upstream and peer nodes, and for each answer.
    join_timeout_us: int = 3_000_000
    #: Items an output log keeps for a lagging downstream before cutting it off (it must then rejoin
    #: from what is retained; its port may have to rebuild): memory never grows with what a peer fails to do.
    retention_items: int = 1_000_000
    #: Replication (the paper) or a baseline it is compared with (:mod:`engine.core.modes`).
    mode: Mode = Mode.REPLICATION
    #: The nodes that decide, by majority, which entry replica stamps an entry-stamped stream
    #: (engine.core.views): the cluster's nodes.  Empty: each entry point's replica nodes and the
    #: nodes of the replicas it feeds, as configured when it first needs a view.
    voters: tuple[str, ...] = ()
    #: The weight each stream replica's duplicate filter reports to the placement coordinator:
    #: ``rank`` (§V-B: Σ 1/rank over its copies) or ``win-share`` (the copies it delivered first:
    #: a stream replica that never wins weighs 0, docs/tracing.md).
    utility: str = "rank"

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry_modes", entry_modes(self.entry_modes))


def entry_modes(modes: "dict[str, str | EntryMode] | None") -> dict[str, EntryMode]:
    """``modes`` (stream -> ``"source"``/``"entry"`` or :class:`EntryMode`) as enum members; a value
    that is neither raises ``ValueError`` naming the stream and the value."""
    out = {}
    for stream, mode in (modes or {}).items():
        try:
            out[stream] = EntryMode(mode)
        except ValueError:
            raise ValueError(f"entry_modes[{stream!r}]: {mode!r} is not one of "
                             f"{', '.join(m.value for m in EntryMode)}") from None
    return out


@dataclass(slots=True)
class Delivered:
    """Records (then maybe a punctuation) delivered to application ``app`` at ``now``.  Not frozen,
    as :class:`~engine.messages.Batch` (engine/messages.py says why); nothing assigns to its fields."""

    app: str
    records: list[Record]
    punctuation: int | None
    now: int
    path: tuple[str, ...] = ()       # replicas from entry point to application (NodeOptions.trace_paths)


@dataclass(frozen=True, slots=True)
class SinkRestarted:
    """Application ``app``'s sink here starts a new incarnation (docs/consume.md, "Output ids"): it
    restored a peer's snapshot in which it had already delivered ``delivered`` (record ->
    occurrences) above ``punctuation``, or it rebuilds (both empty: it delivers everything above the
    frontier it adopts).  A driver naming outputs continues its occurrence counts from these."""

    app: str
    punctuation: int | None
    delivered: dict[Record, int]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A rejected input item: published to ``replicast/dead-letter`` by the driver."""

    stream: str
    reason: str
    item: Any


@dataclass(frozen=True, slots=True)
class PeerTimedOut:
    """No heartbeat from ``node`` within the time-out: the driver should drop the connection."""

    node: str


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """``node`` sent something no correct peer sends (a malformed batch, a gap): the driver drops the
    connection (logged, counted); on reconnect the receiver resumes from what it holds."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReplicaChanged:
    """A hosted replica changed state (``docs/lifecycle.md``); ``reason`` says why, for the logs."""

    replica: ReplicaId
    old: str
    new: str
    reason: str


@dataclass(frozen=True, slots=True)
class StreamCutOff:
    """The output log stopped waiting for ``stream``'s receiver on ``node``: it lagged past the
    retention limit.  It keeps receiving while connected; after a disconnection it resumes from what
    the log still holds."""

    stream: StreamReplica
    node: str
    retained: int


@dataclass(frozen=True, slots=True)
class ControlRefused:
    """A control message from ``node`` was not applied (``reason``: who may send it, or what it
    names that this node cannot do); counted as ``refused_control``, logged by the driver."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decided:
    """This node, as the elected placement coordinator, sent ``decision`` (a
    :mod:`placement.decisions` value: deploy, remove, connect or disconnect) as control messages."""

    decision: Any


Event = (Delivered | DeadLetter | PeerTimedOut | ProtocolError | ReplicaChanged | StreamCutOff | ControlRefused
         | Decided | SinkRestarted)
