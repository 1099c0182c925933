"""The fault-tolerance invariant (docs/placement.md): after any garbage-collection decision, no set of
at most kmin − 1 servers, and no single link, is the only way into any operator or application."""

from hypothesis import given, settings, strategies as st

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.cost import total_cost
from replicast.placement.gc import GCConfig, collect
from replicast.placement.tolerance import Failure, Removal, failures, starved, violations
from replicast.placement.utility import utilities
from tests.placement.instances import chain, deployed, line_network, random_min_cost


def two_hops():
    """e (server 0) -> f (servers 1, 2, 3) -> g (servers 4, 5, 6) -> a (server 7), fully wired."""
    workload = chain(0, 7, operators=("f", "g"))
    placed = [(ReplicaId("f", i), 1 + i) for i in range(3)] + [(ReplicaId("g", i), 4 + i) for i in range(3)]
    return deployed(workload, placed), workload


def test_one_upstream_replica_feeding_every_survivor_is_a_single_point_of_failure():
    deployment, workload = two_hops()
    f = [ReplicaId("f", i) for i in range(3)]
    g = [ReplicaId("g", i) for i in range(3)]
    # g0 and g1 fed by f0 alone, f1 (on server 2) still up but feeding neither.
    cut = Removal(frozenset({StreamReplica(f[i], g[j], 0) for i in (1, 2) for j in (0, 1)}
                            | {StreamReplica(x, g[2], 0) for x in f} | {StreamReplica(g[2], ReplicaId("a", 0), 0)}),
                  frozenset({g[2], f[2]}))
    assert starved(deployment, workload, Failure(frozenset({1})), cut) == {"g", "a"}
    assert (Failure(frozenset({1})), "g") in violations(deployment, workload, 2, cut)
    assert not violations(deployment, workload, 2)
    assert not violations(deployment, workload, 1, cut)          # kmin 1 promises nothing beyond running


def test_a_lost_entry_point_is_not_a_placement_failure():
    deployment, workload = two_hops()
    assert starved(deployment, workload, Failure(frozenset({0}))) == set()


def test_a_cut_link_counts_as_one_failure():
    deployment, workload = two_hops()
    g0, a = ReplicaId("g", 0), ReplicaId("a", 0)
    only = Removal(frozenset({StreamReplica(ReplicaId("g", i), a, 0) for i in (1, 2)}))
    assert starved(deployment, workload, Failure(links=frozenset({(4, 7)})), only) == {"a"}
    assert Failure(links=frozenset({(4, 7)})) in failures(deployment, 2)
    assert (Failure(links=frozenset({(4, 7)})), "a") in violations(deployment, workload, 2, only)
    assert g0 in deployment.hosts


def test_gc_keeps_the_invariant_on_a_hand_built_case():
    """kmin = 2 of 3: Alg. 6 alone would leave g's survivors fed by one f replica when f1 and f2's
    streams are worthless; the guard keeps two disjoint ways into g."""
    deployment, workload = two_hops()
    network = line_network([0, 10, 20, 30, 40, 50, 60, 70])
    f0 = ReplicaId("f", 0)
    weights = {s: (5.0 if s.source == f0 or s.source.name != "f" else 0.0) for s in deployment.streams}
    collect(deployment, network, workload, utilities(deployment, workload, weights), GCConfig(kmin=2, theta=0))
    assert not violations(deployment, workload, 2)
    assert any(s.source.name == "f" and s.source != f0 for s in deployment.streams)


@given(st.data())
@settings(max_examples=80, deadline=None)
def test_gc_rounds_never_leave_a_failure_kmin_covers_starving_a_node(data):
    instance = random_min_cost(data, kmax=(2, 4))
    if instance is None:
        return
    network, workload, kmax, deployment = instance
    kmin = data.draw(st.integers(1, kmax))
    # Alg. 5 wires every replica to every upstream one: no server failure kmin covers starves anything.
    # A single link may (both replicas of an operator at the two ends of the link between a pinned
    # entry point and a pinned application): that is the deployment's, and GC must not add to it.
    initial = violations(deployment, workload, kmin)
    assert all(not failure.servers for failure, _ in initial)
    for _ in range(data.draw(st.integers(1, 4))):                 # rounds, each with freshly measured weights
        order = sorted(deployment.streams, key=lambda s: (s.source, s.target, s.port))
        weights = {s: data.draw(st.sampled_from([0.0, 0.1, 1.0, 5.0])) for s in order}
        theta = data.draw(st.sampled_from([0.0, 0.5])) * total_cost(deployment, network, workload)
        collect(deployment, network, workload, utilities(deployment, workload, weights),
                GCConfig(kmin=kmin, theta=theta), max_groups=data.draw(st.integers(1, 5)))
        broken = violations(deployment, workload, kmin) - initial
        assert not broken, sorted((f.describe(network.servers), name) for f, name in broken)
