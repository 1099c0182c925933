"""Decisions: the diff between two deployments, in an order nodes can apply, as engine messages."""

import pytest

from replicast.engine.decision_messages import control_message
from replicast.engine.messages import ConnectStream, DeployReplica, DisconnectStream, RemoveReplica
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.decisions import Connect, Deploy, Disconnect, Remove, changes
from replicast.placement.model import Deployment, connect
from tests.placement.instances import chain, deployed

SERVERS = ("s0", "s1", "s2", "s3")
E, A, O0, O1, O2 = ReplicaId("e", 0), ReplicaId("a", 0), ReplicaId("o", 0), ReplicaId("o", 1), ReplicaId("o", 2)


def test_changes_in_apply_order_with_peers_by_index():
    workload = chain(0, 3)
    before = deployed(workload, [(O0, 1), (O1, 2)])
    after = before.copy()
    after.remove_replica(O0)
    after.add_replica(O2, 1)
    connect(after, workload, O2)
    got = changes(before, after, SERVERS, "test")
    assert got == [
        Disconnect(StreamReplica(E, O0, 0), "s0", "s1", "test"),
        Disconnect(StreamReplica(O0, A, 0), "s1", "s3", "test"),
        Remove(O0, "s1", "test"),
        Deploy(O2, "s1", ("", "s2", "s1"), "test"),          # o#0 is gone: its index is empty
        Connect(StreamReplica(E, O2, 0), "s0", "s1", "test"),
        Connect(StreamReplica(O2, A, 0), "s1", "s3", "test"),
    ]
    assert [control_message(d) for d in got] == [
        DisconnectStream(StreamReplica(E, O0, 0)), DisconnectStream(StreamReplica(O0, A, 0)), RemoveReplica(O0),
        DeployReplica(O2, ("", "s2", "s1")), ConnectStream(StreamReplica(E, O2, 0), "s0", "s1"),
        ConnectStream(StreamReplica(O2, A, 0), "s1", "s3")]
    assert got[0].nodes == ("s0", "s1") and got[2].nodes == ("s1",)


def test_a_stream_within_one_server_is_sent_once():
    assert Connect(StreamReplica(E, O0, 0), "s1", "s1").nodes == ("s1",)


def test_moving_a_replica_is_refused():
    before, after = Deployment({O0: 1}), Deployment({O0: 2})
    with pytest.raises(ValueError, match="changed server"):
        changes(before, after, SERVERS, "x")
