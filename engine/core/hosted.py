"""What a node core keeps per hosted replica, per route and per inbound stream replica (plain data).

The behaviour lives in the modules that change these: :mod:`engine.core.sender` (routes, the output
log), :mod:`engine.core.receiver` (inbound positions), :mod:`engine.core.lifecycle` (replica states).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from replicast.engine.core.output_log import OutputLog
from replicast.engine.core.states import InboundState, ReplicaState, RouteState
from replicast.operators.plan import ReplicaId, StreamReplica

if TYPE_CHECKING:
    from replicast.engine.core.lifecycle import Joining
    from replicast.engine.core.stamper import StampState
    from replicast.engine.core.stamping import CopyTail
    from replicast.engine.entry import EntryPoint
    from replicast.operators.replica import OperatorReplica

KINDS = ("entry", "operator", "application")


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
    """One replica hosted here: its logic, state, incarnation, output log and routes."""

    def __init__(self, replica: ReplicaId, kind: str, logic: "OperatorReplica | None", entry: "EntryPoint | None",
                 peers: tuple[str, ...], epoch: int):
        self.replica, self.kind, self.logic, self.entry, self.peers = replica, kind, logic, entry, peers
        self.epoch = epoch                             # this incarnation (messages rule 2)
        self.state = ReplicaState.JOINING
        self.hop: tuple[str, ...] = ()                 # (replica@node,) when the core traces paths
        self.log = OutputLog(frontier=None)            # the frontier is known once the replica is placed
        self.routes: dict[StreamReplica, Route] = {}   # downstream stream replica -> route
        # The log is trimmed to the lowest retained acknowledgement (the floor); ``lagging`` counts
        # the routes still at the floor, so an ack rescans the routes only when the floor can rise
        # (amortised O(1) per ack).  ``floor`` None: rescan on the next ack or emit.
        self.floor: int | None = None
        self.lagging = 0
        self.retained = True                           # some route waits for the log
        self.records_in = 0
        self.records_out = 0
        self.stamp: "StampState | None" = None         # entry-stamped mode: its part in the view (stamper)
        self.joining: "Joining | None" = None          # progress of a join (lifecycle)
        self.origin = Origin.LATER                     # what deployed it (set by control)
        self.adopted: dict[int, int] = {}              # rebuilding: port -> adopted frontier
        self.horizon: int | None = None                # rebuilding: outputs complete above it
        self.restored: tuple[int, ...] | None = None   # its ports' punctuations when a snapshot was restored
        self.dead_end: tuple[int, ...] | None = None   # rebuilding: the restored punctuations that could not advance
        self.parked: dict[StreamReplica, tuple[int | None, int]] = {}   # Resume requests waiting for the log's frontier
        self.held: list = []                           # an entry point's segments taken while it joins
        self.copy_tail: "CopyTail | None" = None       # a joined entry point: its donor's copy still to meet
        #: A process-pair primary (engine.core.pairs): items from this offset on wait for its backup's ack.
        self.gate: int | None = None

    def __repr__(self) -> str:
        return f"<{self.kind} {self.replica} {self.state.value} epoch {self.epoch}>"
