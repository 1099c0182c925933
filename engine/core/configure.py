"""The control messages of a manual placement (what a node applies from its cluster file, DESIGN.md §6)."""

from __future__ import annotations

from engine.messages import ConnectStream, DeployReplica, Message
from operators.errors import QueryError
from operators.plan import PhysicalPlan, StreamReplica, plan
from operators.query import Query


def configure(query: Query, placement: dict[str, list[str]], node: str,
              entry_modes: dict[str, str] | None = None, physical: PhysicalPlan | None = None) -> list[Message]:
    """The control messages that set up ``node``'s part of a manual placement.

    ``placement`` maps every stream, operator and application to the nodes of its replicas (index
    order); its length is the replica count (applications: exactly one node).  In entry-stamped
    mode every entry-point replica also feeds its peers; those routes come first, so a stamper
    sends to its peers before it sends downstream (§II-B).  A caller configuring several nodes in
    one process may pass ``physical = placement_plan(query, placement)`` once: the nodes then share
    the replica and stream-replica ids, so their dict lookups match by identity.
    """
    missing = [n for n in (*query.streams, *query.operators, *query.applications) if not placement.get(n)]
    if missing:
        raise QueryError(f"placement: no nodes given for {', '.join(missing)}")
    if physical is None:
        physical = placement_plan(query, placement)
    where = {r: placement[r.name][r.index] for ids in physical.replicas.values() for r in ids}
    messages: list[Message] = [DeployReplica(r, tuple(placement[r.name])) for r, n in where.items() if n == node]
    for stream in (entry_modes or {}):
        if entry_modes[stream] != "entry":
            continue
        ids = physical.replicas[stream]
        for a in ids:
            for b in ids:
                if a != b and node in (where[a], where[b]):
                    messages.append(ConnectStream(StreamReplica(a, b, 0), where[a], where[b]))
    for s in physical.stream_replicas:
        if node in (where[s.source], where[s.target]):
            messages.append(ConnectStream(s, where[s.source], where[s.target]))
    return messages


def placement_plan(query: Query, placement: dict[str, list[str]]) -> PhysicalPlan:
    """The physical plan of a manual placement (its lengths are the replica counts)."""
    return plan(query, {name: len(nodes) for name, nodes in placement.items()})
