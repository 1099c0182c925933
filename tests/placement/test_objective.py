"""The latency objective (placement/objective.py): the model of each application's latency, the bound
it gives GC, and what revival brings back when it is broken."""

import math

import pytest

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.gc import GCConfig, collect
from replicast.placement.objective import LatencyObjective, Objective, arrivals, repair
from replicast.placement.revival import Collected
from replicast.placement.tolerance import Removal
from replicast.placement.utility import utilities
from tests.placement.instances import chain, deployed, line_network

E, A = ReplicaId("e", 0), ReplicaId("a", 0)
O0, O1 = ReplicaId("o", 0), ReplicaId("o", 1)


def two_paths():
    """e at 0 ms, o#0 at 10 ms (fast), o#1 at 100 ms (slow), a at 20 ms."""
    workload = chain(0, 3)
    network = line_network([0, 10, 100, 20])
    return deployed(workload, [(O0, 1), (O1, 2)]), network, workload


def test_an_application_gets_the_earliest_copy_over_its_live_paths():
    deployment, network, workload = two_paths()
    assert arrivals(deployment, network, workload) == {"a": 20.0}
    assert arrivals(deployment, network, workload, without=Removal(frozenset({StreamReplica(O0, A, 0)}))) == {"a": 180.0}
    # A reported delay larger than the link's latency (a congested or cut link) counts.
    assert arrivals(deployment, network, workload, {StreamReplica(E, O0, 0): 500.0}) == {"a": 180.0}


def test_bounds_relative_absolute_or_both():
    assert LatencyObjective(within_percent=50).bounds({"a": 100.0}) == {"a": 150.0}
    assert LatencyObjective(bound_ms=120).bounds({"a": 100.0}) == {"a": 120.0}
    assert LatencyObjective(within_percent=50, bound_ms=120).bounds({"a": 100.0}) == {"a": 120.0}
    with pytest.raises(ValueError, match="within_percent, bound_ms or both"):
        LatencyObjective()
    with pytest.raises(ValueError, match="bound_ms must be a number >= 0"):
        LatencyObjective(bound_ms=-1)


def test_gc_stops_where_the_objective_would_break():
    """The fast path carries little utility (weights say the slow copy won), so Alg. 6 alone takes it;
    within 100 % of static it must stay, and GC takes the slow path instead."""
    deployment, network, workload = two_paths()
    weights = {s: (0.1 if O0 in (s.source, s.target) else 5.0) for s in deployment.streams}
    u = utilities(deployment, workload, weights)
    alone = deployment.copy()
    collect(alone, network, workload, u, GCConfig(kmin=1, theta=0))
    assert O0 not in alone.hosts                                     # Alg. 6 alone: 9x slower
    objective = Objective.now(LatencyObjective(within_percent=100), deployment, Collected(), network, workload,
                              {0, 1, 2, 3}, {})
    collect(deployment, network, workload, u, GCConfig(kmin=1, theta=0), admissible=objective.admits)
    assert O0 in deployment.hosts and O1 not in deployment.hosts
    assert arrivals(deployment, network, workload) == {"a": 20.0}


def test_revival_brings_back_what_restores_the_objective():
    deployment, network, workload = two_paths()
    deployment.remove_replica(O0)                                    # collected earlier: only the slow path left
    collected = Collected(replicas={O0: 1})
    objective = Objective.now(LatencyObjective(within_percent=50), deployment, collected, network, workload,
                              {0, 1, 2, 3}, {})
    assert objective.bounds == {"a": 30.0} and objective.excess(objective.latencies()) == pytest.approx(150.0)
    steps = repair(objective, collected, {0, 1, 2, 3}, {"o": {1: True, 2: False}})
    assert [what for what, _ in steps] == [O0]
    assert arrivals(steps[-1][1], network, workload) == {"a": 20.0}
    # Its server down: nothing to bring back.
    assert repair(objective, collected, {0, 2, 3}, {"o": {1: True}}) == []
    assert math.isinf(arrivals(steps[-1][1], network, workload, without=Removal(replicas=frozenset({O0, O1})))["a"])
