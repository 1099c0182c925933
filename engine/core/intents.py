"""What a component of the node core asks a component above it to do, as values the core routes.

Rules of this module (docs/architecture.md, "The node core's modules"):

1. The components call one another in one direction only: the lifecycle calls the receiver, the
   sender, the stamper and the stamping, the receiver calls the sender, the links and the mode's
   failover plug-in, the pairs plug-in and the stamper call the sender.  What would be a call the
   other way — the receiver or the failover plug-in asking the lifecycle to check a port, the
   failover plug-in asking the receiver to request a stream, the pairs plug-in asking the
   lifecycle about a rebuilding replica's horizon, the stamper's view changes asking it to rejoin
   a replica, the stamping asking it to move a join on — is an intent here, returned to
   :class:`~engine.core.node.NodeCore`, which routes it (``NodeCore._route``).  No component holds the one an intent is for.
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

from replicast.operators.plan import StreamReplica

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound


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


Intent = Union[RequestStream, CheckPort, CheckHorizon, AdoptFrontier, Rejoin, StepJoin]

#: What a method with nothing to ask returns.
NONE: tuple[Intent, ...] = ()
