"""The control messages of a placement: a node's own part at start (DESIGN.md §6), and the changes
a coordinator sends to add or remove a replica mid-stream (§V, DESIGN.md §6a).

A placement maps every stream, operator and application to the nodes of its replicas by index;
an index whose replica was removed holds None (indices are never reused, so a replica id always
names one replica).
"""

from __future__ import annotations

from collections import defaultdict

from replicast.engine.core.events import entry_modes as _entry_modes
from replicast.engine.core.modes import Mode, shape
from replicast.engine.entry import EntryMode
from replicast.engine.messages import ConnectStream, DeployReplica, Message, RemoveReplica
from replicast.operators.errors import QueryError
from replicast.operators.plan import PhysicalPlan, ReplicaId, StreamReplica
from replicast.operators.query import Query

Placement = dict[str, list[str | None]]


def configure(query: Query, placement: Placement, node: str,
              entry_modes: dict[str, str | EntryMode] | None = None, physical: PhysicalPlan | None = None,
              mode: Mode = Mode.REPLICATION) -> list[Message]:
    """The control messages that set up ``node``'s part of a manual placement.

    ``placement`` maps every stream, operator and application to the nodes of its replicas (index
    order); its length is the replica count (an application's: its sink replicas, docs/consume.md).  ``mode`` may run
    fewer replicas than it lists (:func:`engine.core.modes.shape`).  In entry-stamped
    mode every entry-point replica is also connected to its peers: that stream replica carries no
    data, it tells each replica where its peers are (:mod:`engine.core.stamper`).  A caller configuring several nodes in
    one process may pass ``physical = placement_plan(query, shape(mode, placement, query.applications))``
    once: the nodes then share the replica and stream-replica ids, so their dict lookups match by identity.
    """
    placement = shape(mode, placement, query.applications)
    if physical is None:
        physical = placement_plan(query, placement)
    where = _where(physical, placement)
    messages: list[Message] = [DeployReplica(r, _peers(placement, r.name)) for r, n in where.items() if n == node]
    messages += [ConnectStream(s, where[s.source], where[s.target]) for s in _streams(physical, entry_modes)
                 if node in (where[s.source], where[s.target])]
    return messages


def configure_pinned(query: Query, placement: Placement, node: str,
                     entry_modes: dict[str, str | EntryMode] | None = None) -> list[Message]:
    """A node's own part of a *coordinated* placement (§V): the entry points and applications
    ``placement`` puts on ``node`` (streams and applications only; operators may be absent), and in
    entry-stamped mode the stream replicas among entry-point peers.  The placement coordinator
    deploys the operators and connects every other stream replica (:mod:`engine.core.coordination`)."""
    pinned = {name: nodes for name, nodes in placement.items() if name in query.streams or name in query.applications}
    messages: list[Message] = [DeployReplica(ReplicaId(name, i), _peers(pinned, name))
                               for name, nodes in pinned.items() for i, n in enumerate(nodes) if n == node]
    for stream, mode in _entry_modes(entry_modes).items():
        nodes = pinned.get(stream) or []
        if mode is not EntryMode.ENTRY:
            continue
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                if i != j and a and b and node in (a, b):
                    messages.append(ConnectStream(StreamReplica(ReplicaId(stream, i), ReplicaId(stream, j), 0), a, b))
    return messages


def placement_plan(query: Query, placement: Placement) -> PhysicalPlan:
    """The physical plan of a placement: every replica of an upstream node feeds every replica of
    each downstream node (§III), one stream replica per pair, in index order."""
    names = (*query.streams, *query.operators, *query.applications)
    missing = [n for n in names if not any(placement.get(n) or ())]
    if missing:
        raise QueryError(f"placement: no nodes given for {', '.join(missing)}")
    unknown = sorted(set(placement) - set(names))
    if unknown:
        raise QueryError(f"placement: {', '.join(unknown)} not in the query")
    ids = {name: [ReplicaId(name, i) for i, node in enumerate(placement[name]) if node] for name in names}
    stream_replicas = [StreamReplica(source, target, port)
                       for name in (*query.operators, *query.applications)
                       for port, upstream in enumerate(query.inputs_of(name))
                       for target in ids[name] for source in ids[upstream]]
    return PhysicalPlan(query, ids, stream_replicas)


# -- changes mid-stream (a coordinator's decisions, §V) ---------------------------------------------
def add_replica(query: Query, placement: Placement, name: str, node: str,
                entry_modes: dict[str, str | EntryMode] | None = None) -> tuple[Placement, dict[str, list[Message]]]:
    """A new replica of ``name`` on ``node``: the new placement and the control messages per node
    (the replica is deployed, then every stream replica into and out of it is connected at both ends).
    It joins mid-stream from a live peer's snapshot (``docs/lifecycle.md``); an application's new
    sink replica too, and its output ids continue the donor's (docs/consume.md)."""
    if name not in placement:
        raise QueryError(f"placement: {name!r} is not in the placement")
    new = {k: list(v) for k, v in placement.items()}
    new[name].append(node)
    replica = ReplicaId(name, len(new[name]) - 1)
    physical = placement_plan(query, new)
    where = _where(physical, new)
    messages: dict[str, list[Message]] = defaultdict(list)
    messages[node].append(DeployReplica(replica, _peers(new, name)))
    for s in _streams(physical, entry_modes):
        if replica in (s.source, s.target):
            for at in dict.fromkeys((where[s.source], where[s.target])):
                messages[at].append(ConnectStream(s, where[s.source], where[s.target]))
    return new, dict(messages)


def remove_replica(placement: Placement, replica: ReplicaId) -> tuple[Placement, dict[str, list[Message]]]:
    """Remove ``replica``: its node removes it and tells the other end of each of its stream replicas."""
    nodes = placement.get(replica.name) or []
    if replica.index >= len(nodes) or not nodes[replica.index]:
        raise QueryError(f"placement: no replica {replica} to remove")
    if sum(1 for n in nodes if n) == 1:
        raise QueryError(f"placement: {replica} is the last replica of {replica.name!r}")
    new = {k: list(v) for k, v in placement.items()}
    new[replica.name][replica.index] = None
    return new, {nodes[replica.index]: [RemoveReplica(replica)]}


def _where(physical: PhysicalPlan, placement: Placement) -> dict[ReplicaId, str]:
    return {r: placement[r.name][r.index] for ids in physical.replicas.values() for r in ids}


def peer_stream(query: Query, entry_modes: "dict[str, EntryMode]", stream: StreamReplica) -> bool:
    """Whether ``stream`` runs between two replicas of an entry-stamped entry point (this module's
    way of telling each replica where its peers are, :func:`_streams`; it carries no data)."""
    name = stream.source.name
    return name == stream.target.name and name in query.streams and entry_modes.get(name) is EntryMode.ENTRY


def _peers(placement: Placement, name: str) -> tuple[str, ...]:
    """``DeployReplica.peers``: the node of every replica of ``name`` by index ("" where removed)."""
    return tuple(n or "" for n in placement[name])


def _streams(physical: PhysicalPlan, entry_modes: dict[str, str | EntryMode] | None) -> list[StreamReplica]:
    """The physical plan's stream replicas; in entry-stamped mode first those between the replicas of
    each entry point (where its peers are, :mod:`engine.core.stamper`)."""
    peers = [StreamReplica(a, b, 0) for stream, mode in _entry_modes(entry_modes).items() if mode is EntryMode.ENTRY
             for a in physical.replicas[stream] for b in physical.replicas[stream] if a != b]
    return peers + physical.stream_replicas
