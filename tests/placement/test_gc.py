"""Alg. 6: dependents(S) by hand, kmin, and the properties of a collection round (§V-B)."""

import pytest
from hypothesis import given, settings, strategies as st

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.cost import cost, total_cost
from replicast.placement.gc import Dependents, GCConfig, collect
from replicast.placement.tolerance import Removal, violations
from replicast.placement.utility import utilities
from tests.placement.instances import chain, deployed, line_network, random_min_cost

E, A = ReplicaId("e", 0), ReplicaId("a", 0)
O0, O1, U0, U1 = ReplicaId("o", 0), ReplicaId("o", 1), ReplicaId("u", 0), ReplicaId("u", 1)


def S(a, b, port=0):
    return StreamReplica(a, b, port)


def one_operator():
    """e -> {o0, o1} -> a"""
    workload = chain(0, 3)
    return deployed(workload, [(O0, 1), (O1, 2)]), workload


def two_operators():
    """e -> {u0, u1} -> {o0, o1} -> a: four stream replicas between u and o"""
    workload = chain(0, 4, operators=("u", "o"))
    return deployed(workload, [(U0, 1), (U1, 2), (O0, 2), (O1, 3)]), workload


def test_a_replica_losing_its_only_output_takes_its_inputs_along():
    deployment, _ = one_operator()
    dependents = Dependents(deployment, kmin=1)
    assert dependents(S(O0, A)) == {S(O0, A), S(E, O0)}
    assert dependents(S(E, O1)) == {S(E, O1), S(O1, A)}


def test_kmin_forbids_groups_that_remove_a_replica():
    deployment, _ = one_operator()
    dependents = Dependents(deployment, kmin=2)
    assert all(dependents(s) is None for s in deployment.streams)


def test_a_redundant_stream_replica_goes_alone():
    deployment, _ = two_operators()
    dependents = Dependents(deployment, kmin=2)
    assert dependents(S(U0, O0)) == {S(U0, O0)}                  # u0 still feeds o1, o0 still hears u1


def test_the_last_output_of_a_replica_drags_it_and_kmin_then_decides():
    deployment, _ = two_operators()
    deployment.remove_stream(S(U0, O1))
    assert Dependents(deployment, kmin=1)(S(U0, O0)) == {S(U0, O0), S(E, U0)}
    assert Dependents(deployment, kmin=2)(S(U0, O0)) is None


def test_an_application_keeps_its_last_input():
    deployment, _ = one_operator()
    deployment.remove_replica(O1)
    assert Dependents(deployment, kmin=1)(S(O0, A)) is None
    assert Dependents(deployment, kmin=1)(S(E, O0)) is None


def test_an_entry_point_below_kmin_may_still_lose_streams():
    deployment, _ = one_operator()                                # one entry replica, kmin 1 floor = min(1, 1)
    assert Dependents(deployment, kmin=3)(S(E, O0)) is None       # o would drop to 1 < min(3, 2)
    deployment2, _ = two_operators()
    assert Dependents(deployment2, kmin=3)(S(U0, O0)) == {S(U0, O0)}


def test_collect_discards_the_least_useful_group_per_cost():
    network = line_network([0, 10, 10, 20])                       # o0 and o1 are equally far from e and a
    deployment, workload = one_operator()
    weights = {S(O0, A): 3.0, S(O1, A): 1.0}
    u = utilities(deployment, workload, weights)
    before = total_cost(deployment, network, workload)
    discarded = collect(deployment, network, workload, u, GCConfig(kmin=1, theta=before - 1))
    assert len(discarded) == 1
    assert discarded[0].streams == {S(E, O1), S(O1, A)} and discarded[0].replicas == {O1}
    assert discarded[0].utility == pytest.approx(0.5) and discarded[0].cost == pytest.approx(2 * 10.0)
    assert O1 not in deployment.hosts and total_cost(deployment, network, workload) == before - 20
    assert collect(deployment, network, workload, u, GCConfig(kmin=1, theta=0)) == []   # nothing more may go


def test_collect_stops_at_theta():
    network = line_network([0, 10, 10, 20])
    deployment, workload = one_operator()
    u = utilities(deployment, workload, {})
    assert collect(deployment, network, workload, u, GCConfig(kmin=1, theta=total_cost(deployment, network, workload))) == []


@given(st.data())
@settings(max_examples=60)
def test_gc_keeps_kmin_never_raises_cost_and_leaves_no_useless_replica(data):
    instance = random_min_cost(data, kmax=(1, 3))
    if instance is None:
        return
    network, workload, kmax, deployment = instance
    weights = {s: data.draw(st.floats(0, 5)) for s in sorted(deployment.streams, key=lambda s: (s.source, s.target))}
    u = utilities(deployment, workload, weights)
    kmin = data.draw(st.integers(1, 3))
    theta = data.draw(st.sampled_from([0.0, 0.5])) * total_cost(deployment, network, workload)
    counts = {name: deployment.count(name) for name in workload.nodes()}
    had_outputs = {r for r in deployment.hosts if deployment.out_streams(r)}
    before = total_cost(deployment, network, workload)
    discarded = collect(deployment, network, workload, u, GCConfig(kmin=kmin, theta=theta))
    after = total_cost(deployment, network, workload)
    assert all(d.cost > 0 for d in discarded)
    assert after == pytest.approx(before - sum(d.cost for d in discarded)) and after <= before + 1e-9
    if after > theta + 1e-9:                 # stopped early: no group left that may go, saves anything and
        dependents = Dependents(deployment, kmin)        # keeps the failures kmin covers survivable
        promised = violations(deployment, workload, kmin)
        for s in deployment.streams:
            group = dependents(s)
            if group is None or cost(group, deployment, network, workload) == 0:
                continue
            gone = frozenset(r for x in group for r in (x.source, x.target) if dependents.need_to_remove(r, group))
            assert not violations(deployment, workload, kmin, Removal(group, gone)) <= promised, group
    for name, count in counts.items():
        assert deployment.count(name) >= min(kmin, count)
    for replica in deployment.hosts:
        if replica in had_outputs:
            assert deployment.out_streams(replica), f"{replica} kept without outputs"
        for port in range(len(workload.inputs.get(replica.name, ()))):
            assert any(s.port == port for s in deployment.in_streams(replica)), f"{replica} kept without input {port}"
