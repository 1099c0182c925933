"""Replicas that join, rejoin or leave mid-stream stay exact (DESIGN.md §6a, docs/lifecycle.md).

Every scenario runs the real node cores on the in-memory network (wire frames, FIFO links, seeded
interleavings) and compares each application's output with the non-replicated reference.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from replicast.engine.event_file import read_events
from replicast.engine.node import NodeOptions, ReplicaChanged, ReplicaState, StreamCutOff
from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.plan import ReplicaId
from replicast.operators.query import QueryBuilder
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_node import source_messages

ROOT = Path(__file__).resolve().parents[2]
FIG1 = load_query(ROOT / "examples/fig1.toml")
FIG1_STREAMS = read_events(ROOT / "examples/fig1-events.jsonl", FIG1)
P = 1_000_000


def pair_query():
    q = QueryBuilder("pair")
    q.stream("l", {"k": "int"})
    q.stream("r", {"k": "int"})
    q.join("j", ["l", "r"], window_ms=1000, on="l.k == r.k")
    q.application("out", "j")
    return q.build()


def publish(net: MemoryNetwork, stream: str, items: list) -> None:
    for node in net.placement[stream]:
        if node and net.live(node):
            net.publish(node, stream, items)


@pytest.mark.parametrize("seed", range(50))
def test_a_restarted_join_replica_never_costs_the_pair(seed):
    """The issue's reproduction: ``l`` at ts 100 is buffered by both join replicas, one restarts
    empty, then ``r`` at ts 200 arrives.  The restarted replica must neither lose the pair nor let
    downstream drop the healthy replica's copy (it lost it in 25 of 50 interleavings before)."""
    rng = random.Random(seed)
    query = pair_query()
    place = {"l": ["n0"], "r": ["n0"], "j": ["n1", "n2"], "out": ["n3"]}
    net = MemoryNetwork(query, place, seed=seed)
    net.run()
    publish(net, "l", [{"punctuation": 50}, {"ts": 100, "k": 1}])
    publish(net, "r", [{"punctuation": 50}])
    net.run(rng.randrange(0, 40))
    net.kill("n2")
    net.run(rng.randrange(0, 10))
    net.restart("n2")
    net.run(rng.randrange(0, 60))
    publish(net, "r", [{"ts": 200, "k": 1}])
    net.run(rng.randrange(0, 20))
    for p in (300, 5000, CLOSED):
        for stream in ("l", "r"):
            publish(net, stream, [{"punctuation": p}])
        net.run(rng.randrange(0, 20))
    net.run()
    assert net.delivered["out"] == [(200, 1, 1)]


# -- the Fig. 1 query, replicas added, restarted, removed --------------------------------------------
NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


def fig1_placement(k: int) -> dict[str, list[str]]:
    """Replica i of the j-th logical node on NODES[(i + j) % 5]; applications on n6."""
    out = {}
    for j, name in enumerate([*FIG1.streams, *FIG1.operators]):
        out[name] = [NODES[(i + j) % 5] for i in range(k)]
    for app in FIG1.applications:
        out[app] = ["n6"]
    return out


def fig1_messages() -> list[tuple[int, str, dict]]:
    return source_messages(FIG1, FIG1_STREAMS)


def start(net: MemoryNetwork) -> None:
    """Bring the cluster up before sources publish (as ``cluster up`` waits for readiness)."""
    while not all(core.ready() for node, core in net.cores.items() if net.live(node)):
        net.run()
        net.tick(500_000)


def run_fig1(net: MemoryNetwork, actions: dict[int, callable], steps_between: int = 3, tick_us: int = 2_000) -> None:
    """Publish the Fig. 1 events in time order, doing ``actions[i]`` before message ``i``."""
    start(net)
    for i, (_, stream, item) in enumerate(fig1_messages()):
        if i in actions:
            actions[i](net)
        publish(net, stream, [item])
        net.run(steps_between)
        net.tick(tick_us)                            # time passes: join time-outs and port checks run
    for stream in FIG1.streams:
        publish(net, stream, [{"punctuation": CLOSED}])
    for _ in range(20):
        net.tick(1_000_000)
        net.run()


def assert_reference(net: MemoryNetwork) -> None:
    expected = replay(FIG1, FIG1_STREAMS, replicas=1, punctuation_us=P).outputs
    for app, spec in FIG1.applications.items():
        assert Counter(net.delivered[app]) == Counter(expected[app]), app
        if spec.ordered:
            assert net.delivered[app] == expected[app], app
    assert sum(map(len, expected.values())) > 50


def states(net: MemoryNetwork, name: str) -> list[ReplicaState]:
    return [h.state for node, core in net.cores.items() if net.live(node)
            for h in core.hosted.values() if h.replica.name == name]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_restart_then_the_peer_dies_for_good(seed):
    """Kill -9 a node, start it again, then kill its peer for good: the restarted replicas become
    live from snapshots and carry every operator alone, exactly."""
    place = fig1_placement(2)
    net = MemoryNetwork(FIG1, place, seed=seed)
    n = len(fig1_messages())
    # n2 hosts replica 1 of some operators and replica 0 of others; n3 is the peer of most of them.

    def restart(net):
        net.restart("n2")
        start(net)                                   # its replicas are live (as `replicast node` reports ready)
    run_fig1(net, {n // 4: lambda net: net.kill("n2"), n // 3: restart, n // 2: lambda net: net.kill("n3")})
    assert_reference(net)
    restarted = net.cores["n2"]
    assert all(h.state is ReplicaState.LIVE for h in restarted.hosted.values())
    assert restarted.counters["snapshots_taken"] >= 1


@pytest.mark.parametrize("kind", ["load", "correlate", "rtt_by_dst", "load_trend", "hot"])
def test_an_added_replica_joins_exactly_and_can_be_the_only_survivor(kind):
    """Add a replica of each operator kind mid-stream (union, join, time and count windows, filter),
    then kill the original for good: the new one carries the operator alone, exactly."""
    operators = list(FIG1.operators)
    place = {stream: ["e1", "e2"] for stream in FIG1.streams}
    place.update({op: [f"o{i}"] for i, op in enumerate(operators)})
    place.update({app: ["apps"] for app in FIG1.applications})
    net = MemoryNetwork(FIG1, place, seed=7, spare=("spare",))
    n = len(fig1_messages())
    original = place[kind][0]
    run_fig1(net, {n // 3: lambda net: net.add_replica(kind, "spare"), 2 * n // 3: lambda net: net.kill(original)})
    assert states(net, kind) == [ReplicaState.LIVE]
    assert net.cores["spare"].counters["snapshots_taken"] == 1
    assert_reference(net)


def test_without_a_live_peer_a_replica_rebuilds_and_is_never_wrong():
    """Both replicas of the count-window aggregate and the time-window aggregate die; one restarts
    with no live peer: it says so, and delivers only windows it can prove complete."""
    place = fig1_placement(2)
    net = MemoryNetwork(FIG1, place, seed=4)
    n = len(fig1_messages())
    agg_nodes = sorted(set(place["rtt_by_dst"]))
    events = []

    def kill(net):
        for node in agg_nodes:
            net.kill(node)

    def restart(net):
        net.restart(agg_nodes[0])

    run_fig1(net, {n // 3: kill, n // 3 + 5: restart})
    expected = replay(FIG1, FIG1_STREAMS, replicas=1, punctuation_us=P).outputs
    for app in FIG1.applications:
        got = Counter(net.delivered[app])
        assert not got - Counter(expected[app]), f"{app}: wrong records {list(got - Counter(expected[app]))[:3]}"
    events = [e for _, e in net.events if isinstance(e, ReplicaChanged) and e.new == "rebuilding"
              and "no live peer" in e.reason]
    assert events and net.cores[agg_nodes[0]].counters["rebuilt_without_peer"] >= 1
    assert len(net.delivered["rtt_stats"]) > 0          # windows after the horizon are delivered


def test_removing_a_replica_trims_upstream_logs_and_changes_nothing():
    place = fig1_placement(2)
    net = MemoryNetwork(FIG1, place, seed=5)
    n = len(fig1_messages())
    run_fig1(net, {n // 3: lambda net: net.remove_replica(ReplicaId("correlate", 1))})
    assert_reference(net)
    assert all(r.target != ReplicaId("correlate", 1) for core in net.cores.values()
               for h in core.hosted.values() for r in h.routes)


def test_a_downstream_gone_for_good_is_cut_off_and_memory_stays_bounded():
    """A downstream node dies and never returns: every upstream log stops at the retention limit."""
    place = fig1_placement(2)
    limit = 40
    net = MemoryNetwork(FIG1, place, seed=6, options=NodeOptions(retention_items=limit))
    n = len(fig1_messages())
    run_fig1(net, {n // 4: lambda net: net.kill("n6")})        # the applications' node
    cut = [e for _, e in net.events if isinstance(e, StreamCutOff)]
    assert cut, "nothing was cut off"
    retained = [len(h.log) for node, core in net.cores.items() if net.live(node) for h in core.hosted.values()]
    assert max(retained) <= limit + 10       # one batch may land on top of the limit


def test_a_collected_stream_replica_is_revived_mid_stream():
    """§V-C: disconnect one stream replica (garbage collection), reconnect it later (revival)."""
    from replicast.engine.messages import ConnectStream, DisconnectStream
    place = fig1_placement(2)
    net = MemoryNetwork(FIG1, place, seed=8)
    n = len(fig1_messages())
    physical = net.cores["n1"].hosted  # noqa: F841  (the placement is what the messages name)
    from replicast.engine.core.configure import placement_plan
    stream = next(s for s in placement_plan(FIG1, place).stream_replicas if s.target.name == "correlate")
    src, dst = place[stream.source.name][stream.source.index], place["correlate"][stream.target.index]

    def collect(net):
        net.control({src: [DisconnectStream(stream)], dst: [DisconnectStream(stream)]})

    def revive(net):
        message = ConnectStream(stream, src, dst)
        net.control({node: [message] for node in {src, dst}})

    run_fig1(net, {n // 4: collect, n // 2: revive})
    assert_reference(net)


def test_a_port_left_with_only_a_waiting_input_rejoins_and_is_never_wrong():
    """Both replicas of an entry point die; one restarts with no live peer, so it knows its stream
    only from its first punctuation: the union downstream, its other input gone for good, rejoins
    and rebuilds rather than wait for ever or let windows miss records; the operators after it
    deliver only what they can prove complete, and the pipeline carries on."""
    operators = list(FIG1.operators)
    place = {stream: ["e1", "e2"] for stream in FIG1.streams}
    place["cpu_a"] = ["a1", "a2"]                     # cpu_a's entry points on nodes of their own
    place.update({op: [f"o{i}", f"o{i + len(operators)}"] for i, op in enumerate(operators)})
    place.update({app: ["apps"] for app in FIG1.applications})
    net = MemoryNetwork(FIG1, place, seed=11, options=NodeOptions(join_timeout_us=300_000))
    n = len(fig1_messages())

    def kill(net):
        net.kill("a1")
        net.kill("a2")

    run_fig1(net, {n // 3: kill, n // 3 + 4: lambda net: net.restart("a1")}, tick_us=20_000)
    expected = replay(FIG1, FIG1_STREAMS, replicas=1, punctuation_us=P).outputs
    for app in FIG1.applications:
        got = Counter(net.delivered[app])
        assert not got - Counter(expected[app]), f"{app}: wrong {list(got - Counter(expected[app]))[:3]}"
    rejoins = sum(core.counters["rejoins"] for core in net.cores.values())
    # Two peers both stuck must not hand each other their state round after round (1,143 rejoins
    # and a port of 71 stream replicas before lifecycle.rejoin rebuilt a replica stuck again on
    # the snapshot it restored): 15 here.
    assert 1 <= rejoins <= 40, rejoins
    assert sum(core.counters["rebuilt_without_peer"] for core in net.cores.values()) >= 1
    # Nothing stalls for good: the join's pairs after the loss are delivered again (alerts) …
    end = max(r[0] for r in FIG1_STREAMS["cpu_a"])
    assert max(r[0] for r in net.delivered["alerts"]) > end - 10 * P
    # … while count windows, which depend on every record since the start, are never guessed again.
    assert len(net.delivered["load_trends"]) < len(expected["load_trends"])


# -- an entry point's source reaches the joiner later than its donor (lifecycle rule 5) -----------
def copy_query():
    q = QueryBuilder("copy")
    q.stream("s", {"v": "int"})
    q.filter("f", "s", where="v >= 0")
    q.application("out", "f", ordered=True)
    return q.build()


def assert_the_joiner_alone_carries_the_stream(net: MemoryNetwork) -> None:
    """Kill the donor e1 for good, close the stream: the application has every record once, in order."""
    net.kill("e1")
    publish(net, "s", [{"ts": 300, "v": 99}, {"punctuation": CLOSED}])
    for _ in range(10):
        net.tick(1_000_000)
        net.run()
    assert net.delivered["out"] == [(100 + i, i) for i in range(40)] + [(300, 99)]


@pytest.mark.parametrize("punctuated", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_an_entry_point_that_joins_before_its_source_catches_up_emits_each_record_once(seed, punctuated):
    """Each entry replica has its own subscription to the source (MQTT), so the restarted one can
    receive a record only after its donor's snapshot carried that record — here the last ``lag``
    records the donor took before the snapshot reach the joiner after it is live.  Its stream
    (the donor's copied log, then its own records) must carry each of them once: a second copy
    counts as a distinct event downstream and the application receives it twice (the Fig. 1
    restart test's alerts duplicates).  ``punctuated``: the donor also took the punctuation after
    them, so they are at or below the joiner's punctuation when they come — already carried,
    skipped and counted, not dead letters ("late")."""
    lag = seed % 4 * 2                                # 0, 2, 4, 6 records
    query = copy_query()
    net = MemoryNetwork(query, {"s": ["e1", "e2"], "f": ["o1"], "out": ["apps"]}, seed=seed)
    start(net)
    items = [{"punctuation": 99}] + [{"ts": 100 + i, "v": i} for i in range(40)]
    publish(net, "s", items[:11])                     # both entry replicas take ts 100..109
    net.run()
    net.kill("e2")
    net.publish("e1", "s", items[11:21])              # e2 is down: only e1 takes ts 110..119
    net.run()
    net.restart("e2")                                 # joining: it asks e1 for a snapshot
    late = items[21:21 + lag] + ([{"punctuation": 119 + lag}] if punctuated else [])
    net.publish("e1", "s", late)                      # e1 takes these before its snapshot ...
    start(net)                                        # ... e2 joins from it (live, as `replicast node` reports ready)
    assert [h.state for h in net.cores["e2"].hosted.values()] == [ReplicaState.LIVE]
    net.publish("e2", "s", late)                      # ... and e2's subscription delivers them only now
    publish(net, "s", items[21 + lag:] + [{"punctuation": 200}])
    net.run()
    assert_the_joiner_alone_carries_the_stream(net)
    assert net.cores["e2"].counters["dead_letters"] == 0
    entry = next(iter(net.cores["e2"].hosted.values())).entry
    assert entry.carried == (lag if punctuated else 0) and entry.late == 0


@pytest.mark.parametrize("seed", range(12))
def test_an_entry_point_waits_for_a_donor_that_is_behind_its_own_source(seed):
    """The other side of the same race: a record published before the restarted entry replica
    subscribed, but delivered to its donor only after the donor's snapshot, would be in neither
    the copy nor the joiner's own input — yet the joiner's punctuations would promise it, and
    downstream drops the donor's copy of it if a promise overtakes it (§IV-B line 2).  The joiner
    sees the donor is behind (the first record it holds is neither in the copy nor at or below the
    donor's punctuation), asks again a heartbeat later, and joins once the copy overlaps what it
    holds."""
    query = copy_query()
    net = MemoryNetwork(query, {"s": ["e1", "e2"], "f": ["o1"], "out": ["apps"]}, seed=seed)
    start(net)
    items = [{"punctuation": 99}] + [{"ts": 100 + i, "v": i} for i in range(40)]
    publish(net, "s", items[:11])
    net.run()
    net.kill("e2")
    net.restart("e2")                                 # it subscribes again: ts 110 was published before that
    net.run()
    net.publish("e2", "s", items[12:14])              # it holds ts 111, 112 and asks e1 for a snapshot ...
    net.run()
    net.publish("e1", "s", items[11:14])              # ... which e1 answered before its source delivered 110..112
    net.publish("e2", "s", items[14:] + [{"punctuation": 200}])
    net.run()                                         # e1's 110 races e2's promises to o1
    for _ in range(8):
        net.tick(500_000)
        net.run()
    assert [h.state for h in net.cores["e2"].hosted.values()] == [ReplicaState.LIVE]
    assert net.cores["e2"].counters["donors_behind"] >= 1
    net.publish("e1", "s", items[14:] + [{"punctuation": 200}])
    net.run()
    assert_the_joiner_alone_carries_the_stream(net)
