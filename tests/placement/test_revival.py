"""§V-C revival decisions, case by case."""

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.constraints import DeployConfig
from replicast.placement.model import Workload
from replicast.placement.revival import Action, Collected, Revival, apply, late_ports, revive
from tests.placement.instances import chain, deployed, line_network

E, A = ReplicaId("e", 0), ReplicaId("a", 0)
O0, O1, O2 = (ReplicaId("o", i) for i in range(3))
SEC = 1_000_000
NETWORK = line_network([0, 40, 80, 120, 160])
CONFIG = DeployConfig(kmax=3, alpha=0.9, dmin_ms=30)
ALL = set(range(5))


def S(a, b, port=0):
    return StreamReplica(a, b, port)


def test_a_collected_stream_from_a_live_replica_comes_back_first():
    workload = chain(0, 4)
    deployment = deployed(workload, [(O0, 1), (O1, 2)], without=[S(O1, A)])
    collected = Collected(streams={S(O1, A)})
    late = {S(O0, A): 12 * SEC}
    assert late_ports(A, deployment, workload, late, 10 * SEC) == [0]
    got = revive(A, late, 10 * SEC, deployment, collected, ALL, NETWORK, workload, CONFIG)
    assert got == [Revival(A, 0, Action.STREAM, (S(O1, A),))]
    apply(got[0], deployment, collected)
    assert S(O1, A) in deployment.streams and not collected.streams


def test_no_revival_under_the_threshold_or_while_one_input_is_on_time():
    workload = chain(0, 4)
    deployment = deployed(workload, [(O0, 1), (O1, 2)])
    assert revive(A, {S(O0, A): 9 * SEC}, 10 * SEC, deployment, Collected(), ALL, NETWORK, workload, CONFIG) == []
    assert revive(A, {S(O0, A): 20 * SEC, S(O1, A): 0}, 10 * SEC, deployment, Collected(), ALL, NETWORK, workload,
                  CONFIG) == []


def test_a_collected_upstream_replica_is_revived_on_its_old_server():
    workload = chain(0, 4)
    deployment = deployed(workload, [(O0, 1)])
    collected = Collected(streams={S(E, O1), S(O1, A)}, replicas={O1: 2})
    got = revive(A, {S(O0, A): 30 * SEC}, 10 * SEC, deployment, collected, ALL, NETWORK, workload, CONFIG)
    assert got == [Revival(A, 0, Action.REPLICA, (S(E, O1), S(O1, A)), O1, 2)]
    apply(got[0], deployment, collected)
    assert deployment.hosts[O1] == 2 and {S(E, O1), S(O1, A)} <= deployment.streams and not collected.replicas


def test_a_dead_server_is_not_used_and_creation_needs_permission():
    workload = chain(0, 4)
    deployment = deployed(workload, [(O0, 1)])
    collected = Collected(replicas={O1: 2})
    live = ALL - {2}
    late = {S(O0, A): 30 * SEC}
    assert revive(A, late, 10 * SEC, deployment, collected, live, NETWORK, workload, CONFIG) == [Revival(A, 0, Action.NONE)]
    got = revive(A, late, 10 * SEC, deployment, collected, live, NETWORK, workload, CONFIG, allow_create=True)
    # a new index (o#1 is collected), on the cheapest live candidate: s1 holds o#0, s2 is dead, and
    # e(s0) -> s -> a(s4) costs 160 on each of s0, s3, s4: the lowest index wins
    assert got == [Revival(A, 0, Action.CREATE, (S(E, O2), S(O2, A)), O2, 0)]
    heavier = Workload(workload.streams, workload.operators, workload.applications, workload.inputs,
                       {"e": 1.0, "o": 3.0}, workload.load, workload.pinned)
    got = revive(A, late, 10 * SEC, deployment, collected, live, NETWORK, heavier, CONFIG, allow_create=True)
    assert got[0].server == 4                          # now the output dominates: next to the application


def test_pinned_entry_points_are_never_created():
    workload = chain(0, 4)
    deployment = deployed(workload, [(O0, 1)])
    got = revive(O0, {S(E, O0): 30 * SEC}, 10 * SEC, deployment, Collected(), ALL, NETWORK, workload, CONFIG,
                 allow_create=True)
    assert got == [Revival(O0, 0, Action.NONE)]


def test_each_late_port_is_handled_on_its_own():
    workload = Workload(("e", "f"), ("j",), ("a",), {"j": ("e", "f"), "a": ("j",)}, {"e": 1, "f": 1, "j": 1},
                        {"e": 0, "f": 0, "j": 0.1, "a": 0}, {"e": 0, "f": 4, "a": 2})
    J = ReplicaId("j", 0)
    deployment = deployed(workload, [(J, 2)])
    late = {S(ReplicaId("f", 0), J, 1): 60 * SEC, S(E, J, 0): 1 * SEC}
    assert late_ports(J, deployment, workload, late, 10 * SEC) == [1]
