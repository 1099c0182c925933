"""The node core's public face (DESIGN.md §6): what drivers and tests import.

The core itself lives in :mod:`engine.core`, one module per job (see :mod:`engine.core.node`);
this module names the pieces a driver needs, so ``from engine.node import NodeCore`` stays the way in.
"""

from replicast.engine.core.configure import configure, configure_pinned, placement_plan
from replicast.engine.core.events import (ControlRefused, DeadLetter, Decided, Delivered, Event, NodeOptions, PeerTimedOut,
                                ProtocolError, ReplicaChanged, StreamCutOff)
from replicast.engine.core.node import NodeCore
from replicast.engine.core.states import InboundState, ReplicaState, RouteState

__all__ = ["NodeCore", "NodeOptions", "configure", "configure_pinned", "placement_plan", "Event", "Delivered",
           "DeadLetter", "Decided", "PeerTimedOut", "ProtocolError", "ReplicaChanged", "StreamCutOff", "ControlRefused",
           "ReplicaState", "RouteState", "InboundState"]
