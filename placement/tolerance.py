"""Fault tolerance of a deployment: which failures leave every logical node fed (§V-B's kmin, by paths).

Alg. 6 keeps ``kmin`` replicas of every operator, but replica *counts* are not what a failure takes
away: after garbage collection two replicas of an operator may both be fed by one upstream replica,
so one crash starves both.  What ``kmin`` is meant to buy (§V-B: "to maintain the minimum
fault-tolerance level") is stated here as a property of paths, and garbage collection keeps it
(docs/placement.md, "The fault-tolerance invariant"):

    For every set ``F`` of at most ``kmin − 1`` servers, and (when ``kmin ≥ 2``) for every single
    link between two servers, every logical operator and application that still has a replica on a
    server outside ``F`` has a *fed* replica once ``F`` is down (or the link is cut).

A replica is **fed** under a failure when its server is up and every input port has a live stream
replica, not on a cut link, from a fed replica of the upstream node — or the upstream node has no
replica on a server that is up (its data is lost whatever the placement does: a pinned entry point
on a crashed server).  Entry points are fed when their server is up.

Rules of this module: pure (no clock, no I/O); a failure is a :class:`Failure` value; callers may
evaluate a deployment *minus* some stream and operator replicas without copying it (``without``).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Iterable

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.model import Deployment, Workload


@dataclass(frozen=True, order=True)
class Failure:
    """Servers down and links cut (each link an ordered pair ``(low, high)`` of server indices, both directions)."""

    servers: frozenset[int] = frozenset()
    links: frozenset[tuple[int, int]] = frozenset()

    def describe(self, names: tuple[str, ...] | None = None) -> str:
        name = (lambda i: names[i]) if names else str
        parts = [f"server {name(s)} down" for s in sorted(self.servers)]
        parts += [f"link {name(a)}-{name(b)} cut" for a, b in sorted(self.links)]
        return ", ".join(parts) or "no failure"


@dataclass(frozen=True)
class Removal:
    """Stream and operator replicas taken out of a deployment for an evaluation (a GC group)."""

    streams: frozenset[StreamReplica] = frozenset()
    replicas: frozenset[ReplicaId] = frozenset()


_NOTHING = Removal()


def fed_replicas(deployment: Deployment, workload: Workload, failure: Failure = Failure(),
                 without: Removal = _NOTHING) -> set[ReplicaId]:
    """The replicas of ``deployment`` (less ``without``) that are fed under ``failure`` (module docstring)."""
    down, cut = failure.servers, failure.links
    hosts = deployment.hosts
    up_nodes = {name for name in workload.nodes()
                if any(hosts[r] not in down and r not in without.replicas for r in deployment.replicas_of(name))}
    fed: set[ReplicaId] = set()
    for name in workload.nodes():                                       # upstream first
        ports = workload.inputs.get(name, ())
        for replica in deployment.replicas_of(name):
            host = hosts[replica]
            if host in down or replica in without.replicas:
                continue
            feeding = [False] * len(ports)
            for s in deployment.in_streams(replica):
                if s.source in fed and s not in without.streams and _link(hosts[s.source], host) not in cut:
                    feeding[s.port] = True
            if all(feeding[p] or upstream not in up_nodes for p, upstream in enumerate(ports)):
                fed.add(replica)
    return fed


def starved(deployment: Deployment, workload: Workload, failure: Failure = Failure(),
            without: Removal = _NOTHING) -> set[str]:
    """Logical operators and applications with a replica on a server that is up, none of them fed."""
    fed = fed_replicas(deployment, workload, failure, without)
    out = set()
    for name in (*workload.operators, *workload.applications):
        up = [r for r in deployment.replicas_of(name) if deployment.hosts[r] not in failure.servers
              and r not in without.replicas]
        if up and not any(r in fed for r in up):
            out.add(name)
    return out


def failures(deployment: Deployment, kmin: int) -> list[Failure]:
    """The failures ``kmin`` promises to survive: every set of at most ``kmin − 1`` servers hosting a
    replica and, when ``kmin ≥ 2``, every single link that carries a stream replica."""
    servers = sorted(set(deployment.hosts.values()))
    out = [Failure(frozenset(c)) for k in range(0, kmin) for c in itertools.combinations(servers, k)]
    if kmin >= 2:
        links = {_link(deployment.hosts[s.source], deployment.hosts[s.target]) for s in deployment.streams}
        out += [Failure(links=frozenset({link})) for link in sorted(links) if link[0] != link[1]]
    return out


def violations(deployment: Deployment, workload: Workload, kmin: int, without: Removal = _NOTHING,
               among: Iterable[Failure] | None = None) -> set[tuple[Failure, str]]:
    """``(failure, node)`` pairs breaking the invariant: ``node`` starves under a failure ``kmin`` covers."""
    return {(failure, name) for failure in (failures(deployment, kmin) if among is None else among)
            for name in starved(deployment, workload, failure, without)}


def _link(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a <= b else (b, a)


class Tolerance:
    """The invariant kept incrementally while garbage collection discards group after group.

    Holds, for every failure ``kmin`` covers, the fed replicas and starved nodes of the current
    deployment.  :meth:`check` re-evaluates only replicas whose inputs a group changes, and goes
    further downstream only from a replica whose fed status changed, so a redundant stream replica
    costs one evaluation per failure; :meth:`apply` keeps the result once the group is discarded (the
    caller then changes the deployment).
    """

    def __init__(self, deployment: Deployment, workload: Workload, kmin: int):
        self.deployment, self.workload = deployment, workload
        self.failures = failures(deployment, kmin)
        self.fed = {f: fed_replicas(deployment, workload, f) for f in self.failures}
        self.starved = {f: starved(deployment, workload, f) for f in self.failures}
        self._order = {name: i for i, name in enumerate(workload.nodes())}

    def check(self, removal: Removal) -> tuple[bool, dict]:
        """Whether discarding ``removal`` starves, under some failure, no node it did not starve
        before; returns ``(ok, update)`` for :meth:`apply`."""
        update = {}
        for failure in self.failures:
            fed, changed = self._refeed(failure, removal)
            names = {r.name for r in changed} | {r.name for r in removal.replicas}
            now_starved = set(self.starved[failure])
            for name in names & {*self.workload.operators, *self.workload.applications}:
                up = [r for r in self.deployment.replicas_of(name)
                      if self.deployment.hosts[r] not in failure.servers and r not in removal.replicas]
                if up and not any(r in fed for r in up):
                    now_starved.add(name)
                else:
                    now_starved.discard(name)
            if not now_starved <= self.starved[failure]:
                return False, {}
            if changed or now_starved != self.starved[failure]:
                update[failure] = (fed, now_starved)
        return True, update

    def apply(self, update: dict) -> None:
        for failure, (fed, now_starved) in update.items():
            self.fed[failure], self.starved[failure] = fed, now_starved

    def _key(self, replica: ReplicaId) -> tuple:
        return self._order[replica.name], replica

    def _refeed(self, failure: Failure, removal: Removal) -> tuple[set[ReplicaId], set[ReplicaId]]:
        """The fed replicas under ``failure`` once ``removal`` is gone, and those whose status changed."""
        deployment, hosts, down = self.deployment, self.deployment.hosts, failure.servers
        # A node whose every replica up is removed is no longer up: its consumers' ports are exempt.
        gone_nodes = {r.name for r in removal.replicas
                      if not any(hosts[x] not in down and x not in removal.replicas for x in deployment.replicas_of(r.name))}
        dirty = {s.target for s in removal.streams} | set(removal.replicas)
        for name in gone_nodes:
            for consumer, _ in self.workload.consumers.get(name, ()):
                dirty.update(deployment.replicas_of(consumer))
        heap = [self._key(r) for r in dirty if r in hosts]
        heapq.heapify(heap)
        old, fed, changed, seen = self.fed[failure], None, set(), set()
        while heap:
            _, replica = heapq.heappop(heap)
            if replica in seen:
                continue
            seen.add(replica)
            now = self._fed(replica, failure, removal, gone_nodes, fed if fed is not None else old)
            if now == (replica in old):
                continue
            if fed is None:
                fed = set(old)
            (fed.add if now else fed.discard)(replica)
            changed.add(replica)
            for s in deployment.out_streams(replica):
                heapq.heappush(heap, self._key(s.target))
        return (old if fed is None else fed), changed

    def _fed(self, replica: ReplicaId, failure: Failure, removal: Removal, gone_nodes: set[str],
             fed: set[ReplicaId]) -> bool:
        hosts = self.deployment.hosts
        if hosts[replica] in failure.servers or replica in removal.replicas:
            return False
        ports = self.workload.inputs.get(replica.name, ())
        feeding = [False] * len(ports)
        for s in self.deployment.in_streams(replica):
            if s.source in fed and s not in removal.streams and _link(hosts[s.source], hosts[replica]) not in failure.links:
                feeding[s.port] = True
        return all(feeding[p] or upstream in gone_nodes or not self._up(upstream, failure)
                   for p, upstream in enumerate(ports))

    def _up(self, name: str, failure: Failure) -> bool:
        return any(self.deployment.hosts[r] not in failure.servers for r in self.deployment.replicas_of(name))
