"""Expands a logical query into the physical replica graph (§II-B, §III, Fig. 1).

* every source stream gets ``k`` entry-point replicas, every operator ``k`` replicas, and every
  application one sink (the application itself is not replicated; it is fed by all replicas of its
  input);
* every replica of an upstream node feeds every replica of each downstream node: one *stream
  replica* per pair, so each input port of a replica receives ``k`` copies of its stream;
* every input port has a :class:`~operators.dedup.DuplicateFilter` over its stream replicas, and a
  :class:`~operators.sorter.Sorter` only where the coordination analysis chose "sort at
  punctuation" (:mod:`operators.coordination`): an order-sensitive operator no time seal protects
  (count windows, order-sensitive user operators) or an application that asked for order (§III
  item 2: sort only when necessary).

The degree may differ per logical node (a mapping name → k), which is how placement later
expresses deployments where some operators have fewer live replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from replicast.operators.errors import QueryError
from replicast.operators.query import Query


# Replica and stream-replica ids key every dict on the data path (routes, inbound state, acks), so
# they are slotted and carry their hash, computed once: a frozen dataclass would rehash its fields
# on every lookup.  Equality, ordering, frozenness and pickling (by value) are those of the plain
# frozen dataclasses.
@dataclass(frozen=True, order=True, slots=True)
class ReplicaId:
    """Replica ``index`` of the logical node ``name`` (a stream's entry point, an operator or an app)."""

    name: str
    index: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, self.index)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return ReplicaId, (self.name, self.index)       # str hashes differ between processes

    def __str__(self) -> str:
        return f"{self.name}#{self.index}"


@dataclass(frozen=True, slots=True)
class StreamReplica:
    """The copy of ``source``'s output stream that feeds input ``port`` of ``target``."""

    source: ReplicaId
    target: ReplicaId
    port: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.source, self.target, self.port)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return StreamReplica, (self.source, self.target, self.port)


@dataclass
class PhysicalPlan:
    query: Query
    replicas: dict[str, list[ReplicaId]]
    stream_replicas: list[StreamReplica]

    def kind(self, name: str) -> str:
        q = self.query
        return "entry" if name in q.streams else "application" if name in q.applications else "operator"

    def upstreams(self, replica: ReplicaId, port: int) -> list[ReplicaId]:
        """The replicas feeding ``port`` of ``replica``, in the index order its duplicate filter uses."""
        return [s.source for s in self.stream_replicas if s.target == replica and s.port == port]

    def downstreams(self, replica: ReplicaId) -> list[StreamReplica]:
        return [s for s in self.stream_replicas if s.source == replica]

    def sorts_input(self, name: str) -> bool:
        """Whether the replicas of ``name`` sort their inputs (§IV-C): the coordination analysis's
        verdict (:func:`operators.coordination.decide`), which ``replicast explain`` prints."""
        return self.query.order_sensitive(name)

    def n_ports(self, name: str) -> int:
        return max(1, len(self.query.inputs_of(name)))


def plan(query: Query, replicas: int | Mapping[str, int]) -> PhysicalPlan:
    """The physical graph with ``replicas`` replicas of every stream entry point and operator."""
    def degree(name: str) -> int:
        k = replicas if isinstance(replicas, int) else replicas.get(name, 1)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise QueryError(f"{query.source}: '{name}' needs at least one replica, got {k!r}")
        return k

    nodes = {name: degree(name) for name in (*query.streams, *query.operators)}
    nodes.update({name: 1 for name in query.applications})
    ids = {name: [ReplicaId(name, i) for i in range(k)] for name, k in nodes.items()}
    stream_replicas = [
        StreamReplica(source, target, port)
        for name in (*query.operators, *query.applications)
        for port, upstream in enumerate(query.inputs_of(name))
        for target in ids[name]
        for source in ids[upstream]
    ]
    return PhysicalPlan(query, ids, stream_replicas)
