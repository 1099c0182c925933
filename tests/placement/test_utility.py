"""§V-B utilities: hand-computed shares and the sums they must keep."""

import pytest
from hypothesis import given, settings, strategies as st

from replicast.operators.plan import ReplicaId, StreamReplica, plan
from replicast.operators.query import QueryBuilder
from replicast.placement.deployment import DeployConfig, min_cost
from replicast.placement.errors import PlacementError
from replicast.placement.utility import utilities, weights_of_report
from tests.placement.instances import chain, deployed, networks, workloads

E, O0, O1, A = ReplicaId("e", 0), ReplicaId("o", 0), ReplicaId("o", 1), ReplicaId("a", 0)


def two_replicas():
    workload = chain(0, 3)
    return deployed(workload, [(O0, 1), (O1, 2)]), workload


def test_utilities_by_hand():
    deployment, workload = two_replicas()
    weights = {StreamReplica(O0, A, 0): 3.0, StreamReplica(O1, A, 0): 1.0, StreamReplica(E, O0, 0): 5.0}
    u = utilities(deployment, workload, weights)
    assert u.replicas[A] == 1.0
    assert u.streams[StreamReplica(O0, A, 0)] == 0.75 and u.streams[StreamReplica(O1, A, 0)] == 0.25
    assert u.replicas[O0] == 0.75 and u.replicas[O1] == 0.25
    assert u.streams[StreamReplica(E, O0, 0)] == 0.75                  # alone in its group: all of utility(o0)
    assert u.streams[StreamReplica(E, O1, 0)] == 0.25                  # weight 0 but alone: shares equally
    assert u.replicas[E] == 1.0
    assert u.of([StreamReplica(O0, A, 0), StreamReplica(E, O0, 0)]) == 1.5


def test_a_group_with_no_weight_shares_equally():
    deployment, workload = two_replicas()
    u = utilities(deployment, workload, {})
    assert u.streams[StreamReplica(O0, A, 0)] == u.streams[StreamReplica(O1, A, 0)] == 0.5


def paths_to_applications(workload, name):
    if workload.kind(name) == "application":
        return 1
    return sum(paths_to_applications(workload, c) for c, _ in workload.consumers[name])


@given(st.data())
@settings(max_examples=60)
def test_utilities_add_up(data):
    network = data.draw(networks(min_servers=4, max_servers=8))
    workload = data.draw(workloads(network.n))
    try:
        deployment = min_cost(network, workload, DeployConfig(kmax=data.draw(st.integers(1, 3)), alpha=1.0, dmin_ms=0))
    except PlacementError:
        return
    streams = sorted(deployment.streams, key=lambda s: (s.source, s.target, s.port))
    weights = {s: data.draw(st.sampled_from([0.0, 0.5, 1.0, 7.0])) for s in streams}
    u = utilities(deployment, workload, weights)
    for replica in deployment.hosts:
        if workload.kind(replica.name) == "application":
            assert u.replicas[replica] == 1.0
        else:                                       # utility(o) = Σ_{S∈out(o)} utility(S)
            assert u.replicas[replica] == pytest.approx(sum(u.streams[s] for s in deployment.out_streams(replica)))
        for port in range(len(workload.inputs.get(replica.name, ()))):
            group = [s for s in deployment.in_streams(replica) if s.port == port]
            assert sum(u.streams[s] for s in group) == pytest.approx(u.replicas[replica])
            total = sum(weights[s] for s in group)
            for s in group:                          # weight share × downstream utility
                share = weights[s] / total if total else 1 / len(group)
                assert u.streams[s] == pytest.approx(share * u.replicas[replica])
    for name in workload.nodes():                    # each logical node passes on one unit per path to an app
        assert sum(u.replicas[r] for r in deployment.replicas_of(name)) == pytest.approx(paths_to_applications(workload, name))


def test_weights_from_a_node_report_follow_the_duplicate_filter_order():
    q = QueryBuilder()
    q.stream("s", {"x": "int"})
    q.union("u", ["s", "s"])
    q.application("app", "u")
    physical = plan(q.build(), 2)
    target = ReplicaId("u", 1)
    upstreams = {port: physical.upstreams(target, port) for port in range(2)}
    got = weights_of_report(upstreams, target, [[1.5, 0.5], [0.0, 2.0]])
    assert got == {StreamReplica(ReplicaId("s", 0), target, 0): 1.5, StreamReplica(ReplicaId("s", 1), target, 0): 0.5,
                   StreamReplica(ReplicaId("s", 0), target, 1): 0.0, StreamReplica(ReplicaId("s", 1), target, 1): 2.0}
