"""The latency objective (placement/objective.py): the model of each application's latency, the bound
it gives GC, and what revival brings back when it is broken."""

import dataclasses
import math
import random

import numpy as np
import pytest

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.gc import GCConfig, collect
from replicast.placement.measurements import FRAME_US, Measurements
from replicast.placement.objective import LatencyObjective, Objective, arrivals, repair, tail
from replicast.placement.reports import ServerReport
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
    with pytest.raises(ValueError, match="window_s must be a number > 0, got 0"):
        LatencyObjective(within_percent=25, window_s=0)


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


def alternating_frames(network, slow_ms=1000.0):
    """Two frames of one-way delays (n × n × 2): in the first the way through s1 (o#0) is slow, in the
    second the way through s2 (o#1); the other way is as ``network`` says."""
    frames = np.repeat(network.latency_ms[:, :, None], 2, axis=2)
    for frame, server in ((0, 1), (1, 2)):
        frames[0, server, frame] = frames[server, 0, frame] = slow_ms
    return frames


def test_over_frames_an_application_gets_its_quantile_of_the_earliest_copies():
    deployment, network, workload = two_paths()
    per_frame = arrivals(deployment, network, workload, latency_ms=alternating_frames(network))
    assert per_frame["a"].tolist() == [180.0, 20.0]              # the fast way slow, then the slow way slower
    assert tail(per_frame) == {"a": 180.0} and tail({"a": 7.0}) == {"a": 7.0}


def test_over_frames_gc_keeps_the_redundancy_the_tail_needs():
    """Each way is slow in one frame of two: with both the application's tail is 180 ms, with one of them
    over 1 s.  A per-link tail (each link's worst frame) puts both ways at over 1 s, so losing one
    looks free and GC takes it; over time-aligned frames, the objective keeps both."""
    deployment, network, workload = two_paths()
    frames = alternating_frames(network)
    objective = Objective.now(LatencyObjective(within_percent=100), deployment, Collected(), network, workload,
                              {0, 1, 2, 3}, {}, frames)
    assert objective.static == {"a": 180.0}
    for replica in (O0, O1):
        assert not objective.admits(Removal(replicas=frozenset({replica}),
                                            streams=frozenset(s for s in deployment.streams if replica in (s.source, s.target))))
    per_link = dataclasses.replace(network, latency_ms=frames.max(axis=2))
    summary = Objective.now(LatencyObjective(within_percent=100), deployment, Collected(), per_link, workload,
                            {0, 1, 2, 3}, {})
    assert summary.admits(Removal(replicas=frozenset({O1}),
                                  streams=frozenset(s for s in deployment.streams if O1 in (s.source, s.target))))


def test_reports_of_one_frame_of_time_make_one_frame_of_rtts():
    """Measurements.frames_ms: the reports received within FRAME_US make one frame (each pair's latest
    RTT then), an unreported direction takes the reverse one, a pair never measured the network's."""
    workload = chain(0, 2)
    m = Measurements(("s0", "s1", "s2"), workload, random.Random(1), window_us=10 * FRAME_US)
    assert m.frames_ms(line_network([0, 1, 2])) is None
    m.add(ServerReport("s0", {"s1": 10.0}), now=1)
    m.add(ServerReport("s1", {"s2": 40.0}), now=FRAME_US - 1)             # the same frame
    m.add(ServerReport("s0", {"s1": 30.0}), now=FRAME_US + 1)             # the next one
    network = line_network([0, 100, 200])                                 # s0-s2 never measured: 200 ms
    frames = m.frames_ms(network)
    assert frames.shape == (3, 3, 2)
    assert frames[0, 1].tolist() == [5.0, 15.0] and frames[1, 0].tolist() == [5.0, 15.0]
    assert frames[1, 2].tolist() == [20.0, 20.0] and frames[2, 1].tolist() == [20.0, 20.0]
    assert frames[0, 2].tolist() == [200.0, 200.0] and frames[1, 1].tolist() == [0.0, 0.0]
    assert m.history_us(FRAME_US + 1) == FRAME_US
    for k in range(15):                                                   # only the window's frames are kept
        m.add(ServerReport("s0", {"s1": 10.0}), now=(k + 2) * FRAME_US)
    assert m.frames_ms(network).shape == (3, 3, 10)


def test_over_frames_a_moment_when_every_path_is_slow_does_not_hide_a_removed_path():
    """Frame 0: every link from e's server 2 s slower (a busy server answers every heartbeat late);
    frames 1-2 as the network says.  The tails alone (2,020 ms static, 2,180 ms with the fast way
    removed) differ by 8 %; frame by frame the slow way is 9 times static, so within 25 % GC keeps it."""
    deployment, network, workload = two_paths()
    frames = np.repeat(network.latency_ms[:, :, None], 3, axis=2)
    frames[0, 1:, 0] += 2000.0
    frames[1:, 0, 0] += 2000.0
    objective = Objective.now(LatencyObjective(within_percent=25), deployment, Collected(), network, workload,
                              {0, 1, 2, 3}, {}, frames)
    fast_way = Removal(replicas=frozenset({O0}),
                       streams=frozenset(s for s in deployment.streams if O0 in (s.source, s.target)))
    assert objective.static == {"a": 2020.0}
    assert tail(arrivals(deployment, network, workload, without=fast_way, latency_ms=frames)) == {"a": 2180.0}
    assert objective.latencies(fast_way) == {"a": pytest.approx(2020.0 * 9)}
    assert not objective.admits(fast_way)
    assert objective.latencies() == {"a": 2020.0}
