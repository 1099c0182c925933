"""A node core started alone, as at a cluster start (tests and benchmarks of one core)."""

from __future__ import annotations

from replicast.engine.messages import StreamHead
from replicast.engine.node import NodeCore, ReplicaState, configure
from replicast.operators.base import NO_PUNCTUATION

#: One stream, a filter every record passes, one application: the smallest query with a port
#: (the node benchmarks' and the tracing tests' query).
FILTER_QUERY = """
[[streams]]
name = "s"
fields = { server = "str", load = "float" }
[[operators]]
name = "f"
kind = "filter"
input = "s"
where = "load >= 0.0"
[[applications]]
name = "app"
input = "f"
"""


def started_core(query, place: dict, node: str) -> tuple[NodeCore, int]:
    """The core of ``node`` with every peer of ``place`` connected and every replica past its
    start: no peer answers, so joins time out and replicas rebuild; every inbound stream replica is
    then positioned at offset 0 of incarnation 0 with a whole log (frontier −∞).  Returns the core
    and its clock."""
    core = NodeCore(node, query, now=0)
    core.apply(configure(query, place, node), now=0)
    for peer in {n for nodes in place.values() for n in nodes} - {node}:
        core.on_peer_up(peer, now=0)
    now = 0
    while any(h.state is ReplicaState.JOINING for h in core.hosted.values()):
        now = core.next_timer()
        core.handle_timer(now=now)
    for stream, inbound in list(core.inbound.items()):
        core.receive(inbound.node, StreamHead(stream, 0, 0, NO_PUNCTUATION), now=now)
    core.messages_to_send(), core.events()
    return core, now
