"""What placement reasons about: the network, the workload, and a deployment (§V-A).

Rules of this module:

1. Servers are indices ``0 … n-1`` into :attr:`Network.servers`; names appear only at the edges
   (decisions, JSON, pictures).
2. Latencies are one-way delays in ms, ``latency_ms[s, t]`` from ``s`` to ``t`` (a trace's RTT / 2,
   DESIGN.md §8), so the cost of a stream replica is the bandwidth-delay product it pays.
3. A :class:`Deployment` is the physical graph placement owns: which server hosts each replica
   (:class:`~operators.plan.ReplicaId`) and which stream replicas
   (:class:`~operators.plan.StreamReplica`) are live.  Alg. 5 creates the complete graph between
   neighbouring replica sets; Alg. 6 removes parts of it; §V-C brings parts back.  It keeps
   per-replica indexes of its streams, so ``in(o)``/``out(o)`` cost no scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

import numpy as np

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.errors import PlacementError


@dataclass(frozen=True)
class Network:
    """The servers of one logical cluster and what the coordinator knows about them."""

    servers: tuple[str, ...]
    latency_ms: np.ndarray              # (n, n) one-way delays, 0 on the diagonal
    capacity: np.ndarray                # (n,) processing capacity (CPU cores)
    load: np.ndarray                    # (n,) load not caused by this query
    coordinates: object | None = None   # placement.coordinates.Coordinates, for relaxation

    def __post_init__(self) -> None:
        n = len(self.servers)
        if self.latency_ms.shape != (n, n) or not np.isfinite(self.latency_ms).all():
            raise PlacementError(f"network: the latency matrix must be a finite {n}x{n} array, "
                                 f"got shape {self.latency_ms.shape}")
        if len(self.capacity) != n or len(self.load) != n:
            raise PlacementError(f"network: capacity and load need one value per server ({n})")

    @property
    def n(self) -> int:
        return len(self.servers)

    def index(self, server: str) -> int:
        try:
            return self.servers.index(server)
        except ValueError:
            raise PlacementError(f"network: {server!r} is not one of the {self.n} servers") from None

    @cached_property
    def apart_ms(self) -> np.ndarray:
        """Symmetric distance between servers for ``dmin``: the smaller of the two directions."""
        return np.minimum(self.latency_ms, self.latency_ms.T)


def uniform_network(servers: Iterable[str], latency_ms: np.ndarray, *, capacity: float = 1.0,
                    coordinates: object | None = None) -> Network:
    """A network whose servers all have ``capacity`` and no other load."""
    servers = tuple(servers)
    n = len(servers)
    return Network(servers, np.asarray(latency_ms, dtype=float), np.full(n, float(capacity)), np.zeros(n), coordinates)


@dataclass(frozen=True)
class Workload:
    """The logical query as placement sees it (§V-A): wiring, data rates, loads and pinned hosts.

    ``rate[x]`` is the output rate (records/s) of stream or operator ``x``; every stream replica of
    ``x`` carries it.  ``load[x]`` is the expected load of one replica of ``x`` in the units of
    :attr:`Network.capacity`.  Entry points (streams) and applications are ``pinned`` to a server.
    """

    streams: tuple[str, ...]
    operators: tuple[str, ...]                  # topological order
    applications: tuple[str, ...]
    inputs: Mapping[str, tuple[str, ...]]       # of every operator and application
    rate: Mapping[str, float]
    load: Mapping[str, float]
    pinned: Mapping[str, int]
    consumers: Mapping[str, tuple[tuple[str, int], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        consumers: dict[str, list[tuple[str, int]]] = {x: [] for x in (*self.streams, *self.operators)}
        for name in (*self.operators, *self.applications):
            for port, upstream in enumerate(self.inputs[name]):
                consumers[upstream].append((name, port))
        object.__setattr__(self, "consumers", {x: tuple(c) for x, c in consumers.items()})
        unpinned = [x for x in (*self.streams, *self.applications) if x not in self.pinned]
        if unpinned:
            raise PlacementError(f"workload: no server given for {', '.join(unpinned)} (streams and applications are pinned)")

    def kind(self, name: str) -> str:
        return "entry" if name in self.streams else "application" if name in self.applications else "operator"

    def nodes(self) -> tuple[str, ...]:
        """Every logical node, upstream before downstream."""
        return (*self.streams, *self.operators, *self.applications)


class Deployment:
    """Hosts of replicas and the live stream replicas between them."""

    def __init__(self, hosts: Mapping[ReplicaId, int] | None = None, streams: Iterable[StreamReplica] = ()):
        self.hosts: dict[ReplicaId, int] = {}
        self.streams: set[StreamReplica] = set()
        self._in: dict[ReplicaId, set[StreamReplica]] = {}
        self._out: dict[ReplicaId, set[StreamReplica]] = {}
        self._by_name: dict[str, set[ReplicaId]] = {}
        for replica, server in (hosts or {}).items():
            self.add_replica(replica, server)
        for stream in streams:
            self.add_stream(stream)

    def copy(self) -> "Deployment":
        return Deployment(self.hosts, self.streams)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deployment) and self.hosts == other.hosts and self.streams == other.streams

    # -- changes -------------------------------------------------------------------------------
    def add_replica(self, replica: ReplicaId, server: int) -> None:
        if replica in self.hosts:
            raise ValueError(f"{replica} is already deployed")
        self.hosts[replica] = int(server)
        self._in[replica], self._out[replica] = set(), set()
        self._by_name.setdefault(replica.name, set()).add(replica)

    def remove_replica(self, replica: ReplicaId) -> None:
        """Remove ``replica`` and every stream replica into or out of it."""
        for stream in [*self._in[replica], *self._out[replica]]:
            self.remove_stream(stream)
        del self.hosts[replica], self._in[replica], self._out[replica]
        self._by_name[replica.name].discard(replica)

    def add_stream(self, stream: StreamReplica) -> None:
        if stream.source not in self.hosts or stream.target not in self.hosts:
            raise ValueError(f"{stream}: both ends must be deployed first")
        self.streams.add(stream)
        self._out[stream.source].add(stream)
        self._in[stream.target].add(stream)

    def remove_stream(self, stream: StreamReplica) -> None:
        self.streams.remove(stream)
        self._out[stream.source].discard(stream)
        self._in[stream.target].discard(stream)

    # -- queries -------------------------------------------------------------------------------
    def replicas_of(self, name: str) -> list[ReplicaId]:
        return sorted(self._by_name.get(name, ()))

    def count(self, name: str) -> int:
        return len(self._by_name.get(name, ()))

    def servers_of(self, name: str) -> list[int]:
        return [self.hosts[r] for r in self.replicas_of(name)]

    def in_streams(self, replica: ReplicaId) -> set[StreamReplica]:
        """``in(o)``: the live stream replicas into ``replica`` (read-only view)."""
        return self._in[replica]

    def out_streams(self, replica: ReplicaId) -> set[StreamReplica]:
        """``out(o)``: the live stream replicas out of ``replica`` (read-only view)."""
        return self._out[replica]

    def next_index(self, name: str) -> int:
        return max((r.index for r in self._by_name.get(name, ())), default=-1) + 1

    def placement(self, servers: tuple[str, ...]) -> dict[str, list[str]]:
        """Name → servers of its replicas in index order (``engine.node.configure``'s manual placement)."""
        return {name: [servers[self.hosts[r]] for r in sorted(rs)] for name, rs in self._by_name.items() if rs}


def connect(deployment: Deployment, workload: Workload, replica: ReplicaId) -> list[StreamReplica]:
    """Add every stream replica between ``replica`` and the deployed replicas of its neighbours.

    This is how Alg. 5 wires a new replica: from every replica of each input, to every replica of
    each consumer (§III).  Returns the stream replicas added.
    """
    added = []
    for port, upstream in enumerate(workload.inputs.get(replica.name, ())):
        added += [StreamReplica(u, replica, port) for u in deployment.replicas_of(upstream)]
    for consumer, port in workload.consumers.get(replica.name, ()):
        added += [StreamReplica(replica, d, port) for d in deployment.replicas_of(consumer)]
    for stream in added:
        deployment.add_stream(stream)
    return added


def complete(deployment: Deployment, workload: Workload) -> None:
    """Add every stream replica between deployed replicas of neighbouring nodes (the full graph of §III)."""
    for name in (*workload.operators, *workload.applications):
        for port, upstream in enumerate(workload.inputs[name]):
            for target in deployment.replicas_of(name):
                for source in deployment.replicas_of(upstream):
                    deployment.add_stream(StreamReplica(source, target, port))


def pinned_deployment(workload: Workload) -> Deployment:
    """Entry points and applications on their pinned servers (replica 0 each), nothing else."""
    deployment = Deployment()
    for name in (*workload.streams, *workload.applications):
        deployment.add_replica(ReplicaId(name, 0), workload.pinned[name])
    return deployment


def server_loads(deployment: Deployment, network: Network, workload: Workload) -> np.ndarray:
    """``load(s)``: each server's own load plus the expected load of every replica it hosts."""
    loads = network.load.astype(float)
    for replica, server in deployment.hosts.items():
        loads[server] += workload.load.get(replica.name, 0.0)
    return loads
