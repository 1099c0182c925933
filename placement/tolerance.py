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
