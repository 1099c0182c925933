"""Who may send a node core control messages (docs/node.md, "Who may change a node").

The shared secret authenticates *members* of the cluster; it does not say what a member may do.
Without this policy any member could connect a stream replica of its own into a replica hosted
here and feed it records, which would be delivered.  Rules:

1. :class:`~engine.messages.DeployReplica`, :class:`~engine.messages.RemoveReplica` and
   :class:`~engine.messages.ConnectStream` are accepted only from the node itself (its
   configuration, :meth:`~engine.core.node.NodeCore.apply`) or from the cluster's current
   coordinator (§V-A: the servers of a cluster elect one; whoever runs the election tells the core
   with :meth:`~engine.core.node.NodeCore.set_coordinator`).  No coordinator: the configuration only.
2. A :class:`~engine.messages.DisconnectStream` is also accepted from a peer, for a stream replica
   whose other end is that peer: that is how a removal tells the other ends (control rule 3).  One
   naming a stream replica that this node does not have is a no-op (removals may cross).
3. A refused message changes nothing; it is counted (``refused_control``) and reported as a
   :class:`~engine.core.events.ControlRefused` event, which the driver logs.  Never fatal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from replicast.engine.messages import DisconnectStream, Message

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound
    from replicast.operators.plan import ReplicaId, StreamReplica


class ControlPolicy:
    """Rules 1–2 for node ``name``; ``coordinator`` is the node the cluster elected (None: none).
    It reads the hosted replicas and the inbound table (who is at the other end of a stream
    replica) and asks the stamper whether a stream replica only says where a peer is."""

    def __init__(self, name: str, hosted: "dict[ReplicaId, Hosted]", inbound: "dict[StreamReplica, Inbound]",
                 peer_stream: "Callable[[StreamReplica], bool]", coordinator: str | None = None):
        self.name, self.hosted, self.inbound, self.peer_stream = name, hosted, inbound, peer_stream
        self.coordinator = coordinator

    def refusal(self, src: str, message: Message) -> str | None:
        """Why ``message`` from node ``src`` must not be applied, or None if it may."""
        if src == self.name or (self.coordinator is not None and src == self.coordinator):
            return None
        kind = type(message).__name__
        if isinstance(message, DisconnectStream):
            ends = self.other_ends(message)
            if not ends or src in ends:
                return None
            return f"{kind} of {message.stream.source} -> {message.stream.target} from {src}, " \
                   f"whose other end is {', '.join(sorted(ends))}"
        who = f"the coordinator {self.coordinator}" if self.coordinator else "no coordinator"
        return f"{kind} from {src}: control comes from this node's configuration or the coordinator ({who})"

    def other_ends(self, message: DisconnectStream) -> set[str]:
        """The nodes at the other end of the stream replica, as this node knows them (rule 2)."""
        stream = message.stream
        if self.peer_stream(stream):          # entry → entry: the peer replica's node
            return {node for mine, other in ((stream.source, stream.target), (stream.target, stream.source))
                    if (hosted := self.hosted.get(mine)) is not None and hosted.stamp is not None
                    and (node := hosted.stamp.peers.get(other.index))}
        ends = set()
        inbound = self.inbound.get(stream)
        if inbound is not None:
            ends.add(inbound.node)
        source = self.hosted.get(stream.source)
        route = source.routes.get(stream) if source is not None else None
        if route is not None:
            ends.add(route.node)
        return ends
