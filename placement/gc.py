"""Garbage collection of stream and operator replicas, Alg. 6 (§V-B).

Whenever the network cost of the live stream replicas ``R`` exceeds the target ``θ`` (line 1), the
coordinator computes ``dependents(S)`` for every ``S ∈ R`` — the group that must go together with
``S`` — and discards the non-empty group with the least ``utility(D) / cost(D)`` (lines 2-4).

``dependents`` follows the paper's pseudo-code line by line (lines 5-28):

* ``dependents(S, D)`` adds ``S`` to ``D``, visits ``S.source`` and, unless that failed, ``S.destination``;
* ``dependents(o, D)`` fails (returns ∅) if ``|C(o; D)| < kmin``; otherwise, if ``o`` would be useless
  once ``D`` is gone (``need_to_remove``), it visits every stream of ``in(o) ∪ out(o) − D`` and fails
  if any of those fails.

Decisions where the paper is silent (docs/placement.md):

* ``need_to_remove(o, D)``: ``D`` holds all of ``o``'s output streams, or all the streams into one
  of its input ports (an operator lacking an input cannot produce).  Applications have no outputs.
* ``C(o; D)`` counts the replicas of ``o``'s logical node that are not ``need_to_remove`` under ``D``;
  the floor is ``min(kmin, replicas it has now)``, so nodes that never had ``kmin`` replicas (pinned
  entry points, applications) may still lose stream replicas but never a replica.
* ``in(o) ∪ out(o) − D`` is re-read at each step: a stream the recursion already added is not visited twice.
* Groups that cost nothing (both ends on one server) are not candidates: discarding them cannot lower
  the cost.  Ties go to the first stream replica in sorted order.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable, Iterator

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.cost import stream_cost
from replicast.placement import tolerance
from replicast.placement.model import Deployment, Network, Workload
from replicast.placement.tolerance import Removal
from replicast.placement.utility import Utilities


@dataclass(frozen=True)
class GCConfig:
    """Alg. 6's parameters: keep at least ``kmin`` replicas of each operator; collect while cost > ``theta``."""

    kmin: int = 2
    theta: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.kmin, bool) or not isinstance(self.kmin, int) or self.kmin < 1:
            raise ValueError(f"kmin: expected an integer >= 1, got {self.kmin!r}")


@dataclass(frozen=True)
class Discard:
    """One group ``D*`` removed by a round: its stream replicas and the replicas left useless."""

    streams: frozenset[StreamReplica]
    replicas: frozenset[ReplicaId]
    utility: float
    cost: float


class Dependents:
    """``dependents(S)`` over one deployment (Alg. 6 lines 5-28).

    Within one call it keeps, per replica, how many of its output streams and of each port's input
    streams ``D`` already holds, so ``need_to_remove`` and ``|C(o; D)|`` are lookups, not scans.
    """

    def __init__(self, deployment: Deployment, kmin: int):
        self.deployment = deployment
        self.kmin = kmin
        self.touched: set[str] = set()          # logical nodes the last call looked at (for caching)

    def __call__(self, stream: StreamReplica) -> frozenset[StreamReplica] | None:
        """The group to discard with ``stream``, or None for ∅ (discarding it would break ``kmin``)."""
        self.touched = set()
        self._outs_taken: collections.Counter[ReplicaId] = collections.Counter()
        self._ins_taken: collections.Counter[tuple[ReplicaId, int]] = collections.Counter()
        self._useless: set[ReplicaId] = set()
        self._useless_of: collections.Counter[str] = collections.Counter()
        found = self._stream(stream, set())                           # line 7
        return frozenset(found) if found is not None else None

    def _stream(self, stream: StreamReplica, found: set[StreamReplica]) -> set[StreamReplica] | None:
        self._add(stream, found)                                      # line 11
        if self._replica(stream.source, found) is None:               # lines 12-14
            return None
        return self._replica(stream.target, found)                    # line 16

    def _replica(self, replica: ReplicaId, found: set[StreamReplica]) -> set[StreamReplica] | None:
        self.touched.add(replica.name)
        name = replica.name
        if self.deployment.count(name) - self._useless_of[name] < self._floor(name):   # lines 20-21: |C(o; D)| < kmin
            return None
        if replica in self._useless:                                  # line 22: need_to_remove(o, D)
            # in(o) ∪ out(o) − D, re-read at each step; the order does not change the outcome: a
            # replica left useless is visited after the stream that made it so, so line 20 sees it.
            for stream in [*self.deployment.in_streams(replica), *self.deployment.out_streams(replica)]:   # line 23
                if stream in found:
                    continue
                if self._stream(stream, found) is None:               # lines 24-26
                    return None
        return found                                                  # line 27

    def _add(self, stream: StreamReplica, found: set[StreamReplica]) -> None:
        found.add(stream)
        source, target = stream.source, stream.target
        self._outs_taken[source] += 1
        if self._outs_taken[source] == len(self.deployment.out_streams(source)):
            self._mark(source)                                        # no output left
        self._ins_taken[target, stream.port] += 1
        if self._ins_taken[target, stream.port] == sum(s.port == stream.port for s in self.deployment.in_streams(target)):
            self._mark(target)                                        # a port with no input left

    def _mark(self, replica: ReplicaId) -> None:
        if replica not in self._useless:
            self._useless.add(replica)
            self._useless_of[replica.name] += 1

    def _floor(self, name: str) -> int:
        return min(self.kmin, self.deployment.count(name))

    def need_to_remove(self, replica: ReplicaId, found: set[StreamReplica] | frozenset[StreamReplica]) -> bool:
        """Whether ``replica`` is useless once ``found`` is gone: no outputs left, or a port with no inputs."""
        outs = self.deployment.out_streams(replica)
        if outs and outs <= found:
            return True
        ports: dict[int, bool] = {}
        for s in self.deployment.in_streams(replica):
            ports[s.port] = ports.get(s.port, True) and s in found
        return any(ports.values())


def _order(stream: StreamReplica) -> tuple:
    return stream.source, stream.target, stream.port


def collect(deployment: Deployment, network: Network, workload: Workload, utility: Utilities,
            config: GCConfig, *, max_groups: int | None = None,
            keep: frozenset[StreamReplica] = frozenset(),
            admissible: Callable[[Removal], bool] | None = None) -> list[Discard]:
    """Alg. 6 on ``deployment`` (changed in place): discard groups while the cost exceeds ``theta``.

    Utilities stay those measured before the round (§V-B recomputes them every U seconds).  Each
    discard lowers the cost by the group's cost > 0, so the cost never rises and the loop ends.
    A group holding a stream replica of ``keep`` is not a candidate (the coordinator keeps the last
    timely input of a port whose others are late: §V-C would revive it at once).

    Line 3 takes the least useful group per cost *among those that keep the promises*: discarding
    it must not make any failure ``kmin`` covers starve a node that survived it before
    (:mod:`placement.tolerance`), and ``admissible`` (the latency objective,
    :mod:`placement.objective`) must accept it.  Without such a group the round ends.
    """
    costs = {s: stream_cost(s, deployment, network, workload) for s in deployment.streams}
    total = sum(costs.values())
    dependents = Dependents(deployment, config.kmin)
    order = sorted(deployment.streams, key=_order)                     # ties: the first stream in this order
    cache: dict[StreamReplica, tuple[frozenset[StreamReplica] | None, set[str]]] = {}
    discarded: list[Discard] = []
    promises = tolerance.Tolerance(deployment, workload, config.kmin)
    # Discards only remove paths, so a group that ``admissible`` refused (a latency it would raise past
    # a bound) stays refused for the rest of the call: it is not asked again.
    refused: set[frozenset[StreamReplica]] = set()
    while total > config.theta and (max_groups is None or len(discarded) < max_groups):   # line 1
        ranked = []
        for position, (stream, group) in enumerate(_groups(order, deployment, dependents, cache)):   # line 2
            group_cost = sum(costs[s] for s in group)
            if group_cost <= 0 or (keep and not keep.isdisjoint(group)):
                continue
            ranked.append((utility.of(group) / group_cost, position, group, group_cost))
        ranked.sort(key=lambda c: (c[0], c[1]))                                               # line 3
        best = None
        for _, _, group, group_cost in ranked:
            gone = frozenset(r for s in group for r in (s.source, s.target) if dependents.need_to_remove(r, group))
            removal = Removal(group, gone)
            if group in refused:
                continue
            ok, update = promises.check(removal)
            if not ok:
                continue                                        # a failure kmin covers would starve a node
            if admissible is not None and not admissible(removal):
                refused.add(group)
                continue
            best = group, group_cost, gone
            promises.apply(update)
            break
        if best is None:
            break
        group, group_cost, gone = best
        for s in group:                                                                       # line 4
            deployment.remove_stream(s)
            del costs[s]
        for r in gone:
            deployment.remove_replica(r)
        changed = {r.name for s in group for r in (s.source, s.target)}
        for s in [s for s, (_, names) in cache.items() if s in group or names & changed]:
            del cache[s]
        total -= group_cost
        discarded.append(Discard(group, gone, utility.of(group), group_cost))
    return discarded


def _groups(order: list[StreamReplica], deployment: Deployment, dependents: Dependents,
            cache: dict) -> Iterator[tuple[StreamReplica, frozenset]]:
    for stream in order:
        if stream not in deployment.streams:
            continue
        if stream not in cache:
            cache[stream] = (dependents(stream), dependents.touched)
        group = cache[stream][0]
        if group is not None:
            yield stream, group
