"""The coordinator core, driven like the node core: reports in, decisions out, a fake clock.

``Cluster`` is a tiny stand-in for the nodes, without I/O: it turns each decision into its engine
control message (which must exist one-to-one), applies it to per-server state, and writes the
reports a node would send (RTTs, hosted replicas, inputs with weights and delays, output counters).
"""

import random

import numpy as np
import pytest

from replicast.engine.decision_messages import control_message
from replicast.engine.messages import ConnectStream, DeployReplica, DisconnectStream, RemoveReplica
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.constraints import DeployConfig
from replicast.placement.coordinator import CoordinatorConfig, CoordinatorCore, elect
from replicast.placement.decisions import Connect, Deploy, Disconnect, Remove
from replicast.placement.gc import GCConfig
from replicast.placement.objective import LatencyObjective
from replicast.placement.reports import InputReport, ServerReport
from tests.placement.instances import chain

SEC = 1_000_000
SERVERS = tuple(f"s{i}" for i in range(6))
POSITIONS = np.array([0.0, 50, 100, 150, 200, 250])
RTT = 2 * np.abs(POSITIONS[:, None] - POSITIONS[None])          # RTT = 2 × one-way


class Cluster:
    def __init__(self):
        self.hosted = {s: set() for s in SERVERS}
        self.streams: dict[StreamReplica, tuple[str, str]] = {}
        self.weights: dict[StreamReplica, float] = {}
        self.delays: dict[StreamReplica, int] = {}
        self.outputs: dict[ReplicaId, int] = {}
        self.messages: list[tuple[str, object]] = []
        self.silent: set[str] = set()

    def apply(self, decisions):
        for d in decisions:
            message = control_message(d)
            for node in d.nodes:
                self.messages.append((node, message))
            if isinstance(d, Deploy):
                assert isinstance(message, DeployReplica) and d.nodes == (d.server,)
                self.hosted[d.server].add(d.replica)
            elif isinstance(d, Remove):
                assert isinstance(message, RemoveReplica)
                self.hosted[d.server].discard(d.replica)
                assert not [s for s in self.streams if d.replica in (s.source, s.target)], "remove after disconnect"
            elif isinstance(d, Connect):
                assert isinstance(message, ConnectStream) and set(d.nodes) == {d.source_server, d.target_server}
                assert d.stream.source in self.hosted[d.source_server] and d.stream.target in self.hosted[d.target_server]
                self.streams[d.stream] = (d.source_server, d.target_server)
            else:
                assert isinstance(d, Disconnect) and isinstance(message, DisconnectStream)
                del self.streams[d.stream]

    def run(self, period_s: float):
        """Data flows for ``period_s``: each port credits its fastest stream 1, the next 1/2, … (§V-B)."""
        ports: dict[tuple[ReplicaId, int], list[StreamReplica]] = {}
        for s, (a, b) in self.streams.items():
            ports.setdefault((s.target, s.port), []).append(s)
        for group in ports.values():
            group.sort(key=lambda s: (RTT[SERVERS.index(self.streams[s][0]), SERVERS.index(self.streams[s][1])], s.source))
            for rank, s in enumerate(group, 1):
                self.weights[s] = self.weights.get(s, 0.0) + period_s / rank
        for replicas in self.hosted.values():
            for r in replicas:
                self.outputs[r] = self.outputs.get(r, 0) + int(period_s)

    def reports(self):
        for i, server in enumerate(SERVERS):
            if server in self.silent:
                continue
            inputs = {s: InputReport(self.weights.get(s, 0.0), self.delays.get(s, 0))
                      for s, (_, b) in self.streams.items() if b == server}
            yield ServerReport(server, {p: float(RTT[i, j]) for j, p in enumerate(SERVERS) if j != i}, load=0.0,
                               capacity=1.0, hosted=tuple(sorted(self.hosted[server])),
                               records_out={r: self.outputs.get(r, 0) for r in self.hosted[server]}, inputs=inputs,
                               routes=tuple(s for s, (a, _) in self.streams.items() if a == server))

    def deployment_matches(self, core):
        view = core.deployment
        assert {r: SERVERS[s] for r, s in view.hosts.items()} == {r: s for s, rs in self.hosted.items() for r in rs}
        assert view.streams == set(self.streams)


def workload():
    return chain(0, 5, operators=("u", "o"))          # e on s0 -> u -> o -> a on s5


def config(**kw):
    base = dict(deploy=DeployConfig(kmax=3, alpha=0.9, dmin_ms=20), settle_us=60 * SEC, expiry_us=40 * SEC,
                utility_period_us=30 * SEC, gc_period_us=60 * SEC, revival_period_us=5 * SEC)
    base.update(kw)
    return CoordinatorConfig(**base)


def step(core, cluster, now):
    for report in cluster.reports():
        core.receive(report, now=now)
    while core.next_timer() is not None and core.next_timer() <= now:
        core.handle_timer(now=now)
    decisions = core.decisions_to_send()
    cluster.apply(decisions)
    return decisions


def started(**kw):
    cluster = Cluster()
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config(**kw))
    decisions = step(core, cluster, 10 * SEC)
    return core, cluster, decisions


def test_nothing_is_decided_before_reports_or_settling():
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config())
    assert core.next_timer() == 60 * SEC
    core.handle_timer(now=1 * SEC)
    assert core.decisions_to_send() == [] and core.deployment is None


def test_initial_deployment_once_every_server_reported():
    core, cluster, decisions = started()
    kinds = [type(d).__name__ for d in decisions]
    assert kinds == sorted(kinds, key=["Deploy", "Connect"].index)          # replicas exist before streams
    assert core.deployment.count("u") == core.deployment.count("o") == 3
    assert all(d.reason == "initial" for d in decisions)
    cluster.deployment_matches(core)
    assert len(core.deployment.streams) == 3 + 9 + 3
    assert step(core, cluster, 15 * SEC) == []                              # nothing more to do


def test_a_new_coordinator_adopts_what_runs_instead_of_redeploying():
    core, cluster, _ = started()
    successor = CoordinatorCore(workload(), SERVERS, now=100 * SEC, rng=random.Random(2), config=config())
    assert step(successor, cluster, 101 * SEC) == []
    assert successor.deployment == core.deployment and successor.counters["adopted"] == 1


def test_garbage_collection_removes_the_least_useful_and_keeps_kmin():
    core, cluster, _ = started(gc=GCConfig(kmin=2, theta=0.0))
    before = core.cost()
    decisions = []
    for t in range(20, 200, 10):
        cluster.run(10)
        decisions += step(core, cluster, t * SEC)
    assert decisions and all(d.reason == "gc" for d in decisions)
    assert any(isinstance(d, Disconnect) for d in decisions)
    cluster.deployment_matches(core)
    assert core.cost() < before
    assert core.deployment.count("u") >= 2 and core.deployment.count("o") >= 2
    assert core.collected.streams


def collected(**kw):
    core, cluster, _ = started(**kw)
    for t in range(20, 200, 10):
        cluster.run(10)
        step(core, cluster, t * SEC)
    return core, cluster


def test_revival_brings_back_a_collected_stream_when_inputs_are_late():
    core, cluster = collected(gc=GCConfig(kmin=3, theta=0.0))            # kmin = kmax: only streams may go
    assert core.deployment.count("o") == 3 and core.collected.streams and not core.collected.replicas
    hindered = next(r for r in core.deployment.replicas_of("o") if any(s.target == r for s in core.collected.streams))
    for s in [s for s in cluster.streams if s.target == hindered]:
        cluster.delays[s] = 30 * SEC                                    # every live input is late
    revived = step(core, cluster, 205 * SEC)
    assert len(revived) == 1 and isinstance(revived[0], Connect) and revived[0].reason == "revival"
    assert revived[0].stream.target == hindered and revived[0].stream not in core.collected.streams
    assert core.counters["revival_stream"] == 1
    cluster.deployment_matches(core)


def test_revival_redeploys_a_collected_upstream_replica():
    core, cluster = collected(gc=GCConfig(kmin=2, theta=0.0))
    gone = sorted(core.collected.replicas)
    assert gone and all(r.name in ("u", "o") for r in gone)
    app = ReplicaId("a", 0)
    for s in [s for s in cluster.streams if s.target == app]:
        cluster.delays[s] = 30 * SEC
    revived = step(core, cluster, 205 * SEC)
    deploys = [d for d in revived if isinstance(d, Deploy)]
    assert len(deploys) == 1 and deploys[0].replica.name == "o" and deploys[0].replica in gone
    assert SERVERS.index(deploys[0].server) == core.deployment.hosts[deploys[0].replica]
    assert any(isinstance(d, Connect) and d.stream.target == app for d in revived)
    assert core.counters["revival_replica"] == 1
    cluster.deployment_matches(core)


def test_a_silent_server_expires_and_gets_no_decisions():
    core, cluster, _ = started()
    victim = SERVERS[core.deployment.hosts[ReplicaId("o", 0)]]
    cluster.silent.add(victim)
    for t in (20, 40, 60):
        step(core, cluster, t * SEC)
    assert core.counters["expired"] == 1
    assert all(SERVERS[s] != victim for s in core.deployment.hosts.values())
    assert core.live() == {i for i, s in enumerate(SERVERS) if s != victim}


def test_bad_reports_are_counted_not_raised():
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config())
    core.receive(ServerReport("nobody"), now=1)
    core.receive("garbage", now=1)
    core.receive(ServerReport("s1", rtt_ms={"s2": float("nan"), "s3": -5.0, "zz": 3.0, "s4": 10.0}, load="high"), now=1)
    assert core.counters["unknown_reports"] == 2 and core.counters["bad_values"] == 4
    assert core.measurements.measured_pairs() == 1


def test_an_impossible_deployment_is_reported_and_retried():
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config(
        deploy=DeployConfig(kmax=3, dmin_ms=1000)))
    cluster = Cluster()
    assert step(core, cluster, 10 * SEC) == []
    assert core.counters["deploy_failures"] == 1 and "dmin = 1000 ms" in core.last_error
    step(core, cluster, 69 * SEC)
    assert core.counters["deploy_failures"] == 1                    # waits settle_us before trying again
    step(core, cluster, 70 * SEC)
    assert core.counters["deploy_failures"] == 2


def test_election_picks_the_smallest_live_name():
    assert elect(["s3", "s1", "s2"]) == "s1" and elect([]) is None


@pytest.mark.parametrize("kmax", [1, 2])
def test_rates_are_measured_from_output_counters(kmax):
    core, cluster, _ = started(deploy=DeployConfig(kmax=kmax, dmin_ms=20))
    cluster.run(10)                 # every replica emitted 10 records in 10 s
    step(core, cluster, 20 * SEC)
    assert core.workload().rate["o"] == pytest.approx(1.0)


@pytest.mark.parametrize("entry_servers", [("s0",), ("s0", "s1")], ids=["one", "several"])
def test_a_coordinator_deploys_operators_around_the_entry_points_and_applications_nodes_run(entry_servers):
    """Nodes run their pinned entry points and applications from their own configuration; the
    coordinator deploys only what is missing around them.  A pin to several servers
    (docs/placement.md): Alg. 5 places around ``e#0`` and ``e#1``, wired alike, so every replica of
    ``u`` reads from both and a restarted ``e#0`` has a live peer."""
    cluster = Cluster()
    for i, server in enumerate(entry_servers):
        cluster.hosted[server].add(ReplicaId("e", i))
    cluster.hosted["s5"].add(ReplicaId("a", 0))
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config())
    decisions = step(core, cluster, 10 * SEC)
    assert core.counters["adopted"] == 0 and core.deployment.count("o") == 3
    assert core.deployment.count("e") == len(entry_servers)
    assert {d.replica.name for d in decisions if isinstance(d, Deploy)} == {"u", "o"}
    for u in core.deployment.replicas_of("u"):
        assert {s.source for s in core.deployment.in_streams(u)} == {ReplicaId("e", i) for i in range(len(entry_servers))}
    cluster.deployment_matches(core)


def test_a_server_that_lost_what_the_view_places_there_gets_it_back_once_decisions_have_settled():
    """Rule 7: a node restarted without a replica the coordinator had deployed there, and its entry
    points without the routes the coordinator had connected: once ``settle_us`` has passed since the
    last decision for it, the coordinator deploys the replica there again and connects every stream
    replica it lacks at both ends."""
    core, cluster, _ = started()
    victim = ReplicaId("o", 1)
    server = SERVERS[core.deployment.hosts[victim]]
    before = core.deployment.copy()
    cluster.hosted[server].discard(victim)                      # the node restarted without it
    lost = [s for s in cluster.streams if victim in (s.source, s.target)
            or cluster.streams[s][0] == server]                 # … and without its routes
    for s in lost:
        del cluster.streams[s]
    assert lost
    step(core, cluster, 30 * SEC)                               # within settle_us of the initial decisions
    assert core.counters["reissued_replicas"] == 0
    decisions = [d for t in (71, 100, 130, 160, 190) for d in step(core, cluster, t * SEC)]
    assert {d.replica for d in decisions if isinstance(d, Deploy)} == {victim}
    assert {d.stream for d in decisions if isinstance(d, Connect)} >= set(lost)
    assert decisions and all(d.reason == "restore" for d in decisions)
    assert core.counters["reissued_replicas"] == 1 and core.counters["reissued_streams"] >= len(lost)
    assert core.deployment == before
    cluster.deployment_matches(core)
    assert step(core, cluster, 220 * SEC) == []                 # nothing more to restore


def test_sink_replicas_are_placed_like_operator_replicas_and_revived_when_their_server_goes():
    """docs/consume.md: with ``sink_replicas = 2`` Alg. 5 places a second replica of the pinned
    application where its input streams cost least, fed by every replica of its input; when that
    server goes silent, revival places another (a fresh index), like an operator replica."""
    from replicast.placement.cost import placement_cost
    deploy = DeployConfig(kmax=3, alpha=0.9, dmin_ms=20, sink_replicas=2)
    core, cluster, decisions = started(deploy=deploy)
    view = core.deployment
    sinks = sorted(view.replicas_of("a"))
    assert [r.index for r in sinks] == [0, 1] and SERVERS[view.hosts[sinks[0]]] == "s5"   # the pin stays
    added = sinks[1]
    assert {s.source for s in view.streams if s.target == added} == set(view.replicas_of("o"))
    without = view.copy()
    without.remove_replica(added)
    price = placement_cost("a", without, core.network(), core.workload())
    assert view.hosts[added] == min((s for s in range(len(SERVERS)) if s != 5), key=lambda s: (price[s], s))
    cluster.deployment_matches(core)
    victim = SERVERS[view.hosts[added]]
    cluster.silent.add(victim)
    made = [d for t in (20, 40, 60, 70, 80) for d in step(core, cluster, t * SEC)]
    revived = [d for d in made if isinstance(d, Deploy) and d.replica.name == "a"]
    assert [(d.replica, d.reason) for d in revived] == [(ReplicaId("a", 2), "revival")], made
    assert revived[0].server != victim and core.counters["revival_sink"] == 1
    fed = {d.stream.source for d in made if isinstance(d, Connect) and d.stream.target == ReplicaId("a", 2)}
    assert fed == set(core.deployment.replicas_of("o"))


def test_one_sink_replica_by_default():
    core, _, _ = started()
    assert core.deployment.count("a") == 1


def test_sink_replicas_must_fit_kmax():
    from replicast.placement.errors import PlacementError
    with pytest.raises(PlacementError, match="sink_replicas: expected an integer from 1 to kmax = 2, got 3"):
        DeployConfig(kmax=2, sink_replicas=3)


def test_a_coordinator_reported_to_by_a_minority_decides_nothing():
    """Rule 8: a partial partition cut s0 off from s1 and s2, which elected s1; s1's coordinator hears
    only from its group (3 of 6 servers).  Without a quorum it deployed a whole second deployment
    around the pinned replicas its group showed (the hunt's split schedules: 59 `initial` decisions
    from the minority's coordinator); now it waits, and decides once the others report to it."""
    cluster = Cluster()
    cluster.hosted["s0"].add(ReplicaId("e", 0))
    cluster.hosted["s5"].add(ReplicaId("a", 0))
    cluster.silent |= {"s0", "s3", "s4"}                         # they report to the other coordinator
    core = CoordinatorCore(workload(), SERVERS, now=0, rng=random.Random(1), config=config())
    for t in (10, 61, 100, 150):
        assert step(core, cluster, t * SEC) == []
    assert core.deployment is None and core.counters["no_quorum"] > 0
    cluster.silent.clear()                                      # the partition healed
    decided = [d for t in (160, 230) for d in step(core, cluster, t * SEC)]
    assert core.deployment is not None and decided
    cluster.deployment_matches(core)


def test_a_deployed_coordinator_that_loses_its_quorum_collects_and_revives_nothing():
    """The same run as test_garbage_collection_removes_the_least_useful_and_keeps_kmin, but half the
    servers stop reporting (they elected another coordinator) before the first GC round (70 s)."""
    core, cluster, _ = started(gc=GCConfig(kmin=2, theta=0.0))
    cluster.silent |= {"s3", "s4", "s5"}
    decisions = []
    for t in range(20, 200, 10):
        cluster.run(10)
        decisions += step(core, cluster, t * SEC)
    assert decisions == [] and core.counters["no_quorum"] > 0
    assert core.next_timer() > 190 * SEC                         # skipped, not pending
    cluster.silent.clear()                                       # healed: the view follows the reports again
    for t in range(200, 400, 10):
        cluster.run(10)
        decisions += step(core, cluster, t * SEC)
    assert any(d.reason == "gc" for d in decisions)


def test_under_a_latency_objective_gc_waits_for_a_whole_window_of_rtts():
    """The objective's p99 is over the frames of its window: GC before the coordinator has that much
    history would judge a tail from a few calm frames, and without revival its decision is final."""
    objective = LatencyObjective(within_percent=1000, window_s=120)
    core, cluster, _ = started(gc=GCConfig(kmin=2, theta=0.0), objective=objective, revival=False)
    decisions = []
    for t in range(20, 300, 10):
        cluster.run(10)
        decisions += [(t, d) for d in step(core, cluster, t * SEC)]
    assert core.counters["gc_waiting_history"] >= 1                 # the round at 70 s: 60 s of reports
    assert decisions and min(t for t, _ in decisions) >= 10 + 120     # reports from 10 s on
    assert all(d.reason == "gc" for _, d in decisions)
    cluster.deployment_matches(core)
