"""§V-A cost model, checked against hand-computed values."""

import numpy as np
import pytest

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.cost import bandwidth, cost, placement_cost, stream_cost, total_cost
from replicast.placement.model import Deployment, connect, pinned_deployment
from tests.placement.instances import chain, line_network

E, O0, O1, A = ReplicaId("e", 0), ReplicaId("o", 0), ReplicaId("o", 1), ReplicaId("a", 0)


@pytest.fixture
def setting():
    network = line_network([0, 10, 30])                 # s0 --10 ms-- s1 --20 ms-- s2
    workload = chain(0, 2)
    workload = type(workload)(workload.streams, workload.operators, workload.applications, workload.inputs,
                              {"e": 2.0, "o": 3.0}, workload.load, workload.pinned)
    deployment = pinned_deployment(workload)
    deployment.add_replica(O0, 1)
    connect(deployment, workload, O0)
    return network, workload, deployment


def test_cost_of_a_stream_replica_is_rate_times_latency(setting):
    network, workload, deployment = setting
    assert stream_cost(StreamReplica(E, O0, 0), deployment, network, workload) == 2.0 * 10
    assert stream_cost(StreamReplica(O0, A, 0), deployment, network, workload) == 3.0 * 20
    assert total_cost(deployment, network, workload) == 80.0
    assert bandwidth(deployment, workload) == 5.0


def test_a_second_replica_adds_its_streams_and_same_server_streams_cost_nothing(setting):
    network, workload, deployment = setting
    deployment.add_replica(O1, 2)
    assert set(connect(deployment, workload, O1)) == {StreamReplica(E, O1, 0), StreamReplica(O1, A, 0)}
    assert total_cost(deployment, network, workload) == 80.0 + 2.0 * 30 + 3.0 * 0
    assert bandwidth(deployment, workload) == 2 + 3 + 2            # O1 -> A stays on s2
    assert cost([StreamReplica(E, O1, 0)], deployment, network, workload) == 60.0


def test_in_and_out_cost_of_a_new_replica_on_every_server(setting):
    network, workload, deployment = setting
    # cost_s(in(o) ∪ out(o)) = rate(e)·lat(s0, s) + rate(o)·lat(s, s2)
    assert placement_cost("o", deployment, network, workload).tolist() == [90.0, 80.0, 60.0]


def test_in_and_out_cost_equals_the_cost_a_replica_actually_adds(setting):
    network, workload, deployment = setting
    price = placement_cost("o", deployment, network, workload)
    before = total_cost(deployment, network, workload)
    for server in range(network.n):
        trial = deployment.copy()
        trial.add_replica(O1, server)
        connect(trial, workload, O1)
        assert total_cost(trial, network, workload) - before == pytest.approx(price[server])


def test_deployment_indexes_follow_changes(setting):
    _, workload, deployment = setting
    assert deployment.in_streams(O0) == {StreamReplica(E, O0, 0)}
    deployment.remove_replica(O0)
    assert deployment.streams == set() and deployment.out_streams(E) == set()
    assert deployment.placement(("s0", "s1", "s2")) == {"e": ["s0"], "a": ["s2"]}
    assert Deployment(deployment.hosts) == deployment
    assert np.array_equal(deployment.servers_of("a"), [2])
