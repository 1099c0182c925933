"""What a component of the node core asks another component to do, as values the core routes.

Rules of this module (docs/architecture.md, "The node core's modules"):

1. The receiver calls the sender, the links and the mode's failover plug-in; the pairs plug-in
   and the stamper call the sender.  Every other ask of one component to another is an intent
   here, returned to :class:`~engine.core.node.NodeCore`, which routes it (``NodeCore._route``):
   the receiver or the failover plug-in asking the lifecycle to check a port, the failover
   plug-in asking the receiver to request a stream, the pairs plug-in asking the lifecycle about
   a rebuilding replica's horizon, the stamper's view changes asking it to rejoin a replica, the
   stamping asking it to move a join on, and the lifecycle asking the sender (retrim, serve the
   parked requests, emit), the receiver (request a replica's inputs, hold acknowledgements), the
   stamper (start an entry-stamped replica) and the stamping (release an entry point's held
   items), and the control asking the lifecycle to start, forget or check a replica, the stamper
   to track, forget or re-peer one, the sender to trim a log and answer an early request, the
   receiver to request a stream.  No component holds the one an intent is for.
2. A method that returns intents returns an iterable of them: a tuple when they are its last
   steps, a generator where its own work goes on after one (the core routes each intent before
   it takes the next, so the order of effects is the order of a direct call).  The caller must
   exhaust it: a generator not iterated has not run.  A generator's own result, if it has one, is
   its return value (:meth:`engine.core.stamping.Stamping.on_source`: whether a payload was taken).
3. An intent is plain data: the rows it concerns (:class:`~engine.core.hosted.Hosted`,
   :class:`~engine.core.hosted.Inbound`, compared by identity) and the values the target needs.
   The time is the input call's ``now``, which the core passes when it routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from replicast.operators.plan import ReplicaId, StreamReplica

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound, Route


@dataclass(frozen=True, slots=True)
class RequestStream:
    """Ask ``stream``'s sender for what ``hosted`` needs now (:meth:`engine.core.receiver.Receiver.request`):
    the failover plug-in's port now follows it (failover rules 3-5)."""

    stream: StreamReplica
    inbound: "Inbound"
    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class CheckPort:
    """Check whether port ``port`` of ``hosted`` can still advance, and rejoin if not
    (:meth:`engine.core.lifecycle.Lifecycle.check_port`, lifecycle rule 4)."""

    hosted: "Hosted"
    port: int


@dataclass(frozen=True, slots=True)
class CheckHorizon:
    """A rebuilding ``hosted``'s frontier moved: it may be past its horizon
    (:meth:`engine.core.lifecycle.Lifecycle.check_horizon`, lifecycle rule 3)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class AdoptFrontier:
    """Port ``port`` of a rebuilding ``hosted`` starts above ``frontier``
    (:meth:`engine.core.lifecycle.Lifecycle.adopt`, lifecycle rule 3; receiver rule 2)."""

    hosted: "Hosted"
    port: int
    frontier: int


@dataclass(frozen=True, slots=True)
class Rejoin:
    """Start a new incarnation of ``hosted`` (:meth:`engine.core.lifecycle.Lifecycle.rejoin`,
    lifecycle rule 4): an entry-stamped replica left its stream's view having emitted (stamper
    rule 5)."""

    hosted: "Hosted"
    reason: str


@dataclass(frozen=True, slots=True)
class StepJoin:
    """Move ``hosted``'s join forward (:meth:`engine.core.lifecycle.Lifecycle.step`): a joining
    entry point holds its first source item and may ask for a snapshot now (lifecycle rule 5)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class RequestInputs:
    """Ask every inbound stream replica of ``hosted`` for what it needs now
    (:meth:`engine.core.receiver.Receiver.request_all`; lifecycle rules 1-3)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class HoldAcks:
    """Acknowledge ``stream`` no further than ``offset`` until ``until``: a peer joins from this
    node's positions (:meth:`engine.core.receiver.Receiver.hold_acks`, lifecycle rule 1)."""

    stream: StreamReplica
    offset: int
    until: int


@dataclass(frozen=True, slots=True)
class Retrim:
    """Trim ``hosted``'s output log to what its routes still retain
    (:meth:`engine.core.sender.Sender.retrim`; lifecycle rules 1, 4)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class ServeParked:
    """``hosted``'s log frontier is known: answer the requests that waited for it
    (:meth:`engine.core.sender.Sender.serve_parked`; lifecycle rules 2, 3)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class Emit:
    """``hosted`` outputs ``records`` then ``punctuation`` (:meth:`engine.core.sender.Sender.emit`):
    what a rebuilding port's adopted frontier or a port moved up in place releases (lifecycle
    rules 3, 4)."""

    hosted: "Hosted"
    records: list
    punctuation: int | None


@dataclass(frozen=True, slots=True)
class StartStamping:
    """An entry-stamped ``hosted`` starts outside its stream's view
    (:meth:`engine.core.stamper.Stamper.start`, lifecycle rule 5)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class ReleaseHeld:
    """Emit what the entry point ``hosted`` held while it joined, less what its donor's copy carries
    (:meth:`engine.core.stamping.Stamping.release_held`, lifecycle rule 5)."""

    hosted: "Hosted"
    covered: int
    copied: list | None


@dataclass(frozen=True, slots=True)
class StartReplica:
    """``hosted`` was just deployed: it joins or rebuilds (:meth:`engine.core.lifecycle.Lifecycle.start`;
    control rule 2, lifecycle rule 1)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class ForgetReplica:
    """``replica`` was removed: its joins, checks and probes end (:meth:`engine.core.lifecycle.Lifecycle.forget`;
    control rule 3)."""

    replica: "ReplicaId"


@dataclass(frozen=True, slots=True)
class TrackStamped:
    """``hosted`` was deployed: the stamper tracks it if it is entry-stamped, and drops any replica of
    its id it tracked before (:meth:`engine.core.stamper.Stamper.track`; control rule 2)."""

    hosted: "Hosted"


@dataclass(frozen=True, slots=True)
class ForgetStamped:
    """``replica`` was removed: the stamper stops tracking it (:meth:`engine.core.stamper.Stamper.forget`;
    control rule 3)."""

    replica: "ReplicaId"


@dataclass(frozen=True, slots=True)
class ConnectPeer:
    """Peer replica ``index`` of the entry-stamped ``hosted`` is at ``node``
    (:meth:`engine.core.stamper.Stamper.connect_peer`; control rule 2)."""

    hosted: "Hosted"
    index: int
    node: str


@dataclass(frozen=True, slots=True)
class DisconnectPeer:
    """Peer replica ``index`` of the entry-stamped ``hosted`` was removed
    (:meth:`engine.core.stamper.Stamper.disconnect_peer`; control rule 3)."""

    hosted: "Hosted"
    index: int


@dataclass(frozen=True, slots=True)
class Connected:
    """``stream`` was just connected from here along ``route``: its receiver's early request, if any, is
    answered (:meth:`engine.core.sender.Sender.connected`; control rule 2)."""

    stream: StreamReplica
    route: "Route"


Intent = Union[RequestStream, CheckPort, CheckHorizon, AdoptFrontier, Rejoin, StepJoin, RequestInputs, HoldAcks,
               Retrim, ServeParked, Emit, StartStamping, ReleaseHeld, StartReplica, ForgetReplica, TrackStamped,
               ForgetStamped, ConnectPeer, DisconnectPeer, Connected]

#: What a method with nothing to ask returns.
NONE: tuple[Intent, ...] = ()
