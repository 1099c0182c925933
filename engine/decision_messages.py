"""A placement coordinator's decisions as the node control messages they map to (§V, DESIGN.md §7).

:mod:`placement.decisions` says what the coordinator decided in its own values and knows nothing of
the node's messages (placement sits below the engine: ``tests/test_layering.py``); the node core
turns each decision into its message here, one to one:

====================  =====================================================
decision              message
====================  =====================================================
``Deploy``            ``DeployReplica(replica, peers)``
``Remove``            ``RemoveReplica(replica)``
``Connect``           ``ConnectStream(stream, source_server, target_server)``
``Disconnect``        ``DisconnectStream(stream)``
====================  =====================================================

Pure: the node core (:mod:`engine.core.coordination`) imports it.
"""

from __future__ import annotations

from replicast.engine.messages import ConnectStream, DeployReplica, DisconnectStream, RemoveReplica
from replicast.placement.decisions import Connect, Decision, Deploy, Disconnect, Remove

ControlMessage = DeployReplica | RemoveReplica | ConnectStream | DisconnectStream


def control_message(decision: Decision) -> ControlMessage:
    """The control message that carries ``decision`` to the nodes in ``decision.nodes``."""
    match decision:
        case Deploy():
            return DeployReplica(decision.replica, decision.peers)
        case Remove():
            return RemoveReplica(decision.replica)
        case Connect():
            return ConnectStream(decision.stream, decision.source_server, decision.target_server)
        case Disconnect():
            return DisconnectStream(decision.stream)
    raise TypeError(f"not a placement decision: {decision!r}")
