"""What a node core keeps per hosted replica, per route and per inbound stream replica (plain data).

The behaviour lives in the modules that change these: :mod:`engine.core.sender` (routes, the output
log), :mod:`engine.core.receiver` (inbound positions), :mod:`engine.core.lifecycle` (replica states).
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import TYPE_CHECKING

from replicast.engine.core.output_log import OutputLog
from replicast.engine.core.copy_tail import CopyTail
from replicast.engine.core.states import Basis, InboundState, RebuildPhase, ReplicaState, RouteState
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica

if TYPE_CHECKING:
    from replicast.engine.core.lifecycle import Joining
    from replicast.engine.core.stamp_state import StampState
    from replicast.engine.entry import EntryPoint
    from replicast.operators.replica import OperatorReplica

class ReplicaKind(StrEnum):
    """What a hosted replica is, fixed when it is deployed (§III: sources' entry points, operators,
    applications).  String-valued so that logs, snapshots and metrics labels read as before."""

    #: A source's entry point: no input port, an :class:`engine.entry.EntryPoint` (``Hosted.entry``).
    ENTRY = "entry"
    #: An operator of the query: its input ports and logic (``Hosted.logic``).
    OPERATOR = "operator"
    #: An application: an operator whose output is delivered, its output ids counted (lifecycle rule 4).
    APPLICATION = "application"


class Start(Enum):
    """How this node's process began, set once when its core is built: the driver knows (a state
    file it wrote before, a simulated restart) and passes it to :class:`engine.core.node.NodeCore`."""

    #: The node's first start: the replicas its own configuration deploys are of :attr:`Origin.FIRST_START`.
    FRESH = "fresh"
    #: The process continues an earlier one of this node: what its replicas missed is unknown.
    RESTARTED = "restarted"


class Origin(Enum):
    """What deployed a replica here, set once (lifecycle rule 5, pairs rule 1, stamper)."""

    #: Its node's first start, from the node's own configuration: the cluster is starting, so an
    #: entry point with no live peer claims its whole stream and a pair's roles follow the indexes.
    FIRST_START = "first start"
    #: A restart, or a deployment mid-stream (a coordinator's, a revival): what it missed is unknown.
    LATER = "later"


class Route:
    """The sender's side of one stream replica: where it goes and what the receiver acknowledged."""

    __slots__ = ("node", "state", "acked", "standby")

    def __init__(self, node: str, acked: int):
        self.node = node
        self.state = RouteState.PENDING
        self.acked = acked            # the receiver holds every item of this incarnation below it
        self.standby: int | None = None   # failover standby: the receiver's port has every record up to it


class Inbound:
    """The receiver's side of one stream replica: which incarnation, from which item on."""

    __slots__ = ("node", "state", "epoch", "next", "index", "since", "punctuation")

    def __init__(self, node: str, since: int = 0):
        self.node = node
        self.state = InboundState.UNPOSITIONED
        self.epoch: int | None = None     # the sender's incarnation we follow
        self.next = 0                     # offset of the next item we do not hold
        self.index: int | None = None     # the stream replica's number in its port's duplicate filter
        self.since = since                # when it was connected here (µs)
        self.punctuation: int | None = None   # the newest punctuation received on it (§V-C delays)


class Hosted:
    """One replica hosted here: its logic, state, incarnation, output log and routes.

    Its phases are enums with tables (:mod:`engine.core.states`): ``state`` (:class:`ReplicaState`),
    ``basis`` (:class:`Basis`: what the incarnation was built from) and ``rebuild``
    (:class:`RebuildPhase`, while ``REBUILDING``); a join's, a stamper's and a pair's phases are in
    their own objects.  The attributes that may be None are values legitimately absent, each said
    where it is set below (docs/architecture.md, "Hosted's states and optional values")."""

    def __init__(self, replica: ReplicaId, kind: ReplicaKind, logic: "OperatorReplica | None", entry: "EntryPoint | None",
                 peers: tuple[str, ...], epoch: int):
        self.replica, self.kind, self.peers = replica, kind, peers
        #: Its input machinery: None for an entry point (it has no input port), fixed by ``kind``.
        self.logic = logic
        #: Its source's entry point: None for an operator or application, fixed by ``kind``.
        self.entry = entry
        self.epoch = epoch                             # this incarnation (messages rule 2)
        self.state = ReplicaState.JOINING
        self.hop: tuple[str, ...] = ()                 # (replica@node,) when the core traces paths
        self.log = OutputLog(frontier=None)            # the frontier is known once the replica is placed
        self.routes: dict[StreamReplica, Route] = {}   # downstream stream replica -> route
        # The log is trimmed to the lowest retained acknowledgement (the floor); ``lagging`` counts
        # the routes still at the floor, so an ack rescans the routes only when the floor can rise
        # (amortised O(1) per ack).  Both are a cache of the routes, not a phase: ``retained`` is
        # whether some route waits for the log, ``floor`` None that no floor is cached (nothing is
        # retained, or not computed yet: rescan on the next ack or emit).
        self.floor: int | None = None
        self.lagging = 0
        self.retained = True
        self.records_in = 0
        self.records_out = 0
        #: Entry-stamped mode only (its entry point's mode is ENTRY, set at deploy, never changed):
        #: its part in the stream's view; the phase is the ``StamperRole`` in it.  None: source-stamped.
        self.stamp: "StampState | None" = None
        #: The progress of a join (lifecycle rule 1), present only while ``state`` is JOINING (the
        #: phase is its ``JoinPhase``); None otherwise, and for an entry-stamped replica, whose view
        #: says when it joins.
        self.joining: "Joining | None" = None
        self.origin = Origin.LATER                     # what deployed it (set by control)
        self.basis = Basis.SCRATCH                     # what this incarnation was built from (lifecycle)
        self.basis_at: tuple[int, ...] = ()            # SNAPSHOT, DEAD_END: its ports' punctuations then
        self.rebuild = RebuildPhase.ADOPTING           # while REBUILDING: is the horizon known (lifecycle rule 3)
        self.adopted: dict[int, int] = {}              # rebuilding: port -> adopted frontier
        self.horizon = NO_PUNCTUATION                  # rebuilding, CATCHING_UP: outputs complete above it
        self.parked: dict[StreamReplica, tuple[int | None, int]] = {}   # Resume requests waiting for the log's frontier
        self.held: list = []                           # an entry point's segments taken while it joins
        #: A joined entry point: the records of its donor's copy it may still take from its own
        #: source (stamping rule 3); empty once past the copy (and for any other replica).
        self.copy_tail = CopyTail.none()
        #: A process-pair primary (engine.core.pairs): items from this offset on wait for its backup's
        #: ack.  Present only while its pair role is PRIMARY (the phase is ``PairRole``'s); None: nothing held.
        self.gate: int | None = None

    def __repr__(self) -> str:
        return f"<{self.kind} {self.replica} {self.state.value} epoch {self.epoch}>"
