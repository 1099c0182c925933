"""Control messages come from the node itself or the cluster's coordinator (engine/core/control_policy.py).

The attack the control policy stops (docs/node.md): a member of the cluster (it has the secret) connects a stream
replica of its own into a replica hosted here, then sends batches, which were delivered."""

from __future__ import annotations

from replicast.engine.messages import Batch, ConnectStream, DeployReplica, DisconnectStream, RemoveReplica, StreamHead
from replicast.engine.node import ControlRefused, Delivered
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_node import NODES, QUERY, placement, started_core

APP = ReplicaId("rtt_stats", 0)
FORGED = (2_000, "n9", 3, 150.0, 170.0)


def attack(core, attacker: str, now: int) -> list:
    """``attacker`` connects replica 7 of ``rtt_by_dst`` (its own) into the application and feeds it."""
    own = StreamReplica(ReplicaId("rtt_by_dst", 7), APP, 0)
    core.receive(attacker, ConnectStream(own, attacker, core.name), now=now)
    core.receive(attacker, StreamHead(own, 1, 0, NO_PUNCTUATION), now=now)
    core.receive(attacker, Batch(own, 1, 0, [FORGED], CLOSED), now=now)
    return core.events()


def app_core():
    place = placement(2, NODES)
    core, now = started_core(place, "rtt_stats")
    return core, now, place


def test_a_member_cannot_connect_its_own_stream_replica_into_a_hosted_replica():
    core, now, place = app_core()
    attacker = next(n for n in NODES if n != core.name)
    events = attack(core, attacker, now)
    assert not [e for e in events if isinstance(e, Delivered) and FORGED in e.records]
    refused = [e for e in events if isinstance(e, ControlRefused)]
    assert [e.node for e in refused] == [attacker] and "ConnectStream" in refused[0].reason
    assert core.counters["refused_control"] == 1
    assert not [s for s in core.inbound if s.source.index == 7]


def test_the_coordinator_may_connect_a_stream_replica():
    core, now, place = app_core()
    coordinator = next(n for n in NODES if n != core.name)
    core.set_coordinator(coordinator)
    events = attack(core, coordinator, now)
    assert [e for e in events if isinstance(e, Delivered) and FORGED in e.records]
    assert core.counters["refused_control"] == 0
    core.set_coordinator(None)                          # a new election: it is not the coordinator any more
    other = StreamReplica(ReplicaId("rtt_by_dst", 8), APP, 0)
    core.receive(coordinator, ConnectStream(other, coordinator, core.name), now=now)
    assert other not in core.inbound and core.counters["refused_control"] == 1


def test_peers_cannot_deploy_or_remove_replicas():
    core, now, place = app_core()
    peer = next(n for n in NODES if n != core.name)
    core.receive(peer, DeployReplica(ReplicaId("hot", 5), ("",) * 5 + (core.name,)), now=now)
    core.receive(peer, RemoveReplica(APP), now=now)
    assert APP in core.hosted and ReplicaId("hot", 5) not in core.hosted
    assert core.counters["refused_control"] == 2
    assert [type(e).__name__ for e in core.events()] == ["ControlRefused", "ControlRefused"]
    core.apply([RemoveReplica(APP)], now=now)           # its own configuration may
    assert APP not in core.hosted


def test_a_peer_may_disconnect_only_a_stream_replica_whose_other_end_it_is():
    core, now, place = app_core()
    stream, inbound = next(iter(core.inbound.items()))
    stranger = next(n for n in NODES if n not in (core.name, inbound.node))
    core.receive(stranger, DisconnectStream(stream), now=now)
    assert stream in core.inbound and core.counters["refused_control"] == 1
    unknown = StreamReplica(ReplicaId("rtt_by_dst", 9), APP, 0)
    core.receive(stranger, DisconnectStream(unknown), now=now)       # nothing here: a no-op, not a refusal
    assert core.counters["refused_control"] == 1
    core.receive(inbound.node, DisconnectStream(stream), now=now)    # the sender (a removal tells it so)
    assert stream not in core.inbound and core.counters["refused_control"] == 1


def test_removal_still_tells_the_other_ends():
    """Control rule 3 through the policy: a removed replica's upstream nodes drop their routes to it."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=3)
    net.run()
    removed = ReplicaId("hot", 1)
    upstream = set(place["correlate"])
    net.remove_replica(removed)
    net.run()
    for node in upstream:
        routes = [s for h in net.cores[node].hosted.values() for s in h.routes if s.target == removed]
        assert routes == [], node
    assert all(core.counters["refused_control"] == 0 for core in net.cores.values())
