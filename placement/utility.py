"""Utility of stream and operator replicas (§V-B), from the duplicate filters' arrival-rank weights.

Each duplicate filter credits its input stream replicas with weights 1, 1/2, 1/3 … by how early
they delivered each tuple (``operators.dedup.DuplicateFilter.weights()``; a node reports them per
replica and input port).  Those weights say how much a stream replica helps the *next* operator;
utility carries that impact on towards the applications:

* ``utility(o) = 1`` for an application;
* ``utility(o) = Σ_{S ∈ out(o)} utility(S)`` for any other replica;
* for the group ``{S_1 … S_k}`` of stream replicas feeding input port ``p`` of replica ``o``,
  ``utility(S_i) = w(S_i) / Σ_j w(S_j) · utility(o)``.

So the streams into each port of ``o`` share ``utility(o)`` out exactly (a multi-input replica
needs every port, so each port's group carries all of it).  Computed from applications upstream,
every U seconds (30 in the paper's prototype).  A group whose weights are all zero (no tuple
arrived in the window) shares equally; a stream replica absent from ``weights`` has weight 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.model import Deployment, Workload


@dataclass(frozen=True)
class Utilities:
    streams: dict[StreamReplica, float]
    replicas: dict[ReplicaId, float]

    def of(self, streams) -> float:
        """``utility(D)`` of a group of stream replicas: the sum of theirs."""
        return sum(self.streams.get(s, 0.0) for s in streams)


def utilities(deployment: Deployment, workload: Workload, weights: Mapping[StreamReplica, float]) -> Utilities:
    """Utilities of every replica and live stream replica of ``deployment`` (§V-B)."""
    stream_utility: dict[StreamReplica, float] = {}
    replica_utility: dict[ReplicaId, float] = {}
    for name in reversed(workload.nodes()):                     # applications first, then upstream
        for replica in deployment.replicas_of(name):
            if workload.kind(name) == "application":
                mine = 1.0
            else:
                mine = sum(stream_utility[s] for s in deployment.out_streams(replica))
            replica_utility[replica] = mine
            for group in _port_groups(deployment, replica):
                total = sum(max(weights.get(s, 0.0), 0.0) for s in group)
                for s in group:
                    share = max(weights.get(s, 0.0), 0.0) / total if total > 0 else 1.0 / len(group)
                    stream_utility[s] = share * mine
    return Utilities(stream_utility, replica_utility)


def _port_groups(deployment: Deployment, replica: ReplicaId) -> list[list[StreamReplica]]:
    by_port: dict[int, list[StreamReplica]] = {}
    for s in sorted(deployment.in_streams(replica), key=lambda s: (s.port, s.source)):
        by_port.setdefault(s.port, []).append(s)
    return list(by_port.values())


def weights_of_report(upstreams: Mapping[int, list[ReplicaId]], replica: ReplicaId,
                      weights: list[list[float]]) -> dict[StreamReplica, float]:
    """A replica's reported ``weights[port][i]`` (``NodeCore.statistics()``) keyed by stream replica.

    ``upstreams[port]`` lists the replicas feeding ``port`` in the index order of that port's
    duplicate filter (:meth:`operators.plan.PhysicalPlan.upstreams`).
    """
    out = {}
    for port, per_index in enumerate(weights):
        for source, weight in zip(upstreams.get(port, ()), per_index):
            out[StreamReplica(source, replica, port)] = float(weight)
    return out
