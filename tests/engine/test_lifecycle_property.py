"""Property: over random query DAGs and random schedules of crash, restart, add-replica,
remove-replica and stream-replica disconnection, every application receives exactly the
non-replicated reference (DESIGN.md §6a; replay's reference).

The schedule never takes the last *live* replica of an entry point or operator (that would be more
than kmax − 1 failures), but it freely leaves a restarted or newly added replica as the only
survivor once it is live — the case a replica that is merely quiet would fail.  Node cores run on
the in-memory network (wire frames, FIFO links, seeded interleavings).
"""

from __future__ import annotations

import os
from collections import Counter

from hypothesis import HealthCheck, Phase, event, example, given, note, settings, strategies as st

from replicast.engine.core.configure import placement_plan
from replicast.engine.messages import ConnectStream, DisconnectStream
from replicast.engine.node import InboundState, ReplicaState
from replicast.engine.replay import replay
from replicast.operators.plan import ReplicaId
from replicast.operators.query import QueryBuilder
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork

P = 1_000_000
NODES = ["n1", "n2", "n3", "n4", "n5"]


def build_query(spec: list[tuple]) -> "Query":
    """A query from a list of ``(method, args, kwargs)`` calls on a QueryBuilder (printable, so a
    failing example can be rebuilt by hand)."""
    q = QueryBuilder("random")
    for method, args, kwargs in spec:
        getattr(q, method)(*args, **kwargs)
    return q.build()


@st.composite
def queries(draw):
    """Streams of (k, v) ints, a few schema-keeping operators, then joins and aggregates."""
    spec: list[tuple] = []
    plain = [f"s{i}" for i in range(draw(st.integers(1, 3)))]
    for name in plain:
        spec.append(("stream", (name, {"k": "int", "v": "int"}), {}))
    outputs = []
    for i in range(draw(st.integers(1, 4))):
        name, source = f"o{i}", draw(st.sampled_from(plain))
        kind = draw(st.sampled_from(["filter", "map", "union", "join", "window", "count"]))
        others = [p for p in plain if p != source]
        if kind == "filter":
            spec.append(("filter", (name, source), {"where": "v % 3 != 0"}))
            plain.append(name)
        elif kind == "map":
            spec.append(("map", (name, source), {"set": {"k": "k", "v": "v + k"}}))
            plain.append(name)
        elif kind == "union" and others:
            spec.append(("union", (name, [source, draw(st.sampled_from(others))]), {}))
            plain.append(name)
        elif kind == "join" and others:
            other = draw(st.sampled_from(others))
            spec.append(("join", (name, [source, other]), {"window_ms": 1500, "on": f"{source}.k == {other}.k"}))
            outputs.append(name)
        elif kind == "window":
            spec.append(("aggregate", (name, source), {"window": {"kind": "time", "size_ms": 3000, "slide_ms": 1000},
                                                       "compute": {"n": "count()", "total": "sum(v)"},
                                                       "group_by": ["k"]}))
            outputs.append(name)
        else:
            spec.append(("aggregate", (name, source), {"window": {"kind": "count", "size": 3, "slide": 2},
                                                       "compute": {"total": "sum(v)"}, "group_by": ["k"]}))
            outputs.append(name)
    outputs.append(plain[-1])
    for i, name in enumerate(dict.fromkeys(outputs)):
        spec.append(("application", (f"app{i}", name), {"ordered": draw(st.booleans())}))
    return spec


@st.composite
def scenarios(draw):
    spec = draw(queries())
    query = build_query(spec)
    rng_seed = draw(st.integers(0, 2**16))
    placement = {}
    for name in (*query.streams, *query.operators):
        k = draw(st.integers(2, 3))
        placement[name] = draw(st.permutations(NODES))[:k]
    for app in query.applications:
        placement[app] = ["app"]
    streams = {}
    for name in query.streams:
        times = sorted(draw(st.lists(st.integers(0, 12 * P), min_size=1, max_size=25)))
        streams[name] = [(1_000 * P + t, draw(st.integers(0, 2)), draw(st.integers(0, 9))) for t in times]
    actions = draw(st.lists(st.tuples(st.integers(0, 200), st.sampled_from(
        ["crash", "crash", "restart", "restart", "add", "remove", "disconnect"]), st.integers(0, 2**16)), max_size=12))
    lag = draw(st.sampled_from([0, 0, 2, 5]))     # entry replicas' subscriptions deliver up to this many steps late
    return spec, placement, streams, actions, rng_seed, lag


class Schedule:
    """Carries out actions on a network, refusing those that would take the last live replica."""

    def __init__(self, net: MemoryNetwork):
        self.net = net
        self.disconnected: list = []

    def healthy(self, replica: ReplicaId) -> bool:
        """``replica`` is live and every receiver of its stream trusts it (positioned, punctuations
        counting): losing its peers then costs nothing."""
        net = self.net
        node = net.placement[replica.name][replica.index]
        if not node or not net.live(node) or net.cores[node].hosted[replica].state is not ReplicaState.LIVE:
            return False
        for other, core in net.cores.items():
            if not net.live(other):
                continue
            for stream, inbound in core.inbound.items():
                if stream.source != replica:
                    continue
                target = core.hosted[stream.target]
                if target.state is ReplicaState.JOINING:
                    continue
                if inbound.state is not InboundState.FOLLOWING or (
                        target.logic is not None and target.logic.filters[stream.port].waiting(inbound.index)):
                    return False
        return True

    def live_elsewhere(self, replica: ReplicaId, node: str) -> bool:
        """Some other replica of ``replica.name``, on a live node, is healthy."""
        return any(self.healthy(ReplicaId(replica.name, i)) for i, n in enumerate(self.net.placement[replica.name])
                   if n and n != node and i != replica.index)

    def safe_to_lose(self, node: str) -> bool:
        core = self.net.cores[node]
        return not self.disconnected and all(self.live_elsewhere(r, node) for r in core.hosted)

    def do(self, action: str, pick: int) -> None:
        done = self._do(action, pick)
        note(f"{action} {pick}: {'done' if done else 'refused'}; placement {self.net.placement}; "
             f"dead {sorted(self.net.dead)}")
        event(f"{action}: {'done' if done else 'refused'}")
        COVERAGE[f"{action} {'done' if done else 'refused'}"] += 1

    def _do(self, action: str, pick: int) -> bool:
        net = self.net
        live = [n for n in NODES if net.live(n)]
        if action == "crash" and live:
            node = live[pick % len(live)]
            if self.safe_to_lose(node):
                net.kill(node)
                return True
        elif action == "restart":
            dead = [n for n in NODES if not net.live(n)]
            if dead:
                net.restart(dead[pick % len(dead)])
                return True
        elif action == "add":
            names = [n for n in (*net.query.streams, *net.query.operators)]
            name = names[pick % len(names)]
            free = [n for n in live if n not in net.placement[name]]
            if free and not name.startswith("s"):          # entry points are where their sources publish
                net.add_replica(name, free[pick % len(free)])
                return True
        elif action == "remove" and not self.disconnected:
            replicas = [ReplicaId(name, i) for name, nodes in net.placement.items() if name in net.query.operators
                        for i, node in enumerate(nodes) if node]
            replica = replicas[pick % len(replicas)]
            node = net.placement[replica.name][replica.index]
            if net.live(node) and self.live_elsewhere(replica, node):
                net.remove_replica(replica)
                return True
        elif action == "disconnect" and not self.disconnected:
            plan = placement_plan(net.query, net.placement)
            stream = plan.stream_replicas[pick % len(plan.stream_replicas)]
            ends = {net.placement[r.name][r.index] for r in (stream.source, stream.target)}
            # Collecting a stream replica is not a failure only if its port keeps another live input.
            others = [s for s in plan.stream_replicas if s.target == stream.target and s.port == stream.port
                      and s != stream and self.healthy(s.source)]
            if all(net.live(n) for n in ends) and others:
                net.control({n: [DisconnectStream(stream)] for n in sorted(ends)})
                self.disconnected.append((stream, ends))
                return True
        return False

    def reconnect(self) -> None:
        net = self.net
        for stream, ends in self.disconnected:
            source = net.placement[stream.source.name][stream.source.index]
            target = net.placement[stream.target.name][stream.target.index]
            if source and target and {source, target} == ends:
                net.control({n: [ConnectStream(stream, source, target)] for n in sorted(ends)})
        self.disconnected = []


def source_items(query, streams) -> list[tuple[int, str, dict]]:
    items = []
    for name, records in streams.items():
        last = None
        for ts, k, v in records:
            boundary = (ts // P) * P - 1
            if last is None or boundary > last:
                items.append((ts, name, {"punctuation": boundary}))
                last = boundary
            items.append((ts, name, {"ts": ts, "k": k, "v": v}))
    return sorted(items, key=lambda item: item[0])


#: Examples per run: CI's bounded sample; ``LIFECYCLE_EXAMPLES=2000 pytest …`` for a long hunt.
EXAMPLES = int(os.environ.get("LIFECYCLE_EXAMPLES", "60"))
#: What one run of the property exercised (actions done and refused, snapshots, rebuilds): a run
#: whose schedules refused everything, or never took a snapshot, would prove nothing.
COVERAGE: Counter = Counter()


@settings(max_examples=EXAMPLES, deadline=None, phases=[p for p in Phase if p is not Phase.shrink or not os.environ.get("LIFECYCLE_NO_SHRINK")], suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios())
# Found by a long hunt (seed 21): n4's entry point s0#2 restarts and holds its whole stream before it
# joins; meanwhile the application's stream from o2#1 is disconnected and reconnected past a gap, and
# o2#0 joins from o2#1's snapshot.  The application took o2#0's stream as o2#1's continuation with
# o2#1's counts there, though the gap had lost a copy of an equal record: a record was lost
# (receiver rule 5 now declines a donor stream that is still waiting for its base).
@example(scenario=([('stream', ('s0', {'k': 'int', 'v': 'int'}), {}),
      ('stream', ('s1', {'k': 'int', 'v': 'int'}), {}),
      ('stream', ('s2', {'k': 'int', 'v': 'int'}), {}),
      ('aggregate', ('o0', 's2'), {'window': {'kind': 'time', 'size_ms': 3000, 'slide_ms': 1000},
        'compute': {'n': 'count()', 'total': 'sum(v)'}, 'group_by': ['k']}),
      ('union', ('o1', ['s0', 's1']), {}),
      ('filter', ('o2', 's0'), {'where': 'v % 3 != 0'}),
      ('application', ('app0', 'o0'), {'ordered': False}),
      ('application', ('app1', 'o2'), {'ordered': False})],
     {'s0': ['n3', 'n5', 'n4'], 's1': ['n5', 'n1', 'n3'], 's2': ['n4', 'n5', 'n3'], 'o0': ['n1', 'n2'],
      'o1': ['n1', 'n4', 'n5'], 'o2': ['n1', 'n5', 'n3'], 'app0': ['app'], 'app1': ['app']},
     {'s0': [(1_000_000_000, 0, 0), (1_000_000_000, 0, 0), (1_000_000_001, 0, 1), (1_000_000_001, 0, 1),
       (1_000_000_001, 0, 0), (1_000_000_001, 0, 0), (1_000_000_001, 0, 1), (1_000_000_001, 0, 0),
       (1_000_000_001, 0, 0), (1_000_000_001, 0, 0), (1_000_000_001, 0, 0), (1_000_000_001, 0, 0),
       (1_001_000_000, 0, 0)],
      's1': [(1_000_000_000, 0, 0)], 's2': [(1_000_000_001, 0, 0)]},
     [(0, 'crash', 253), (0, 'restart', 0), (0, 'disconnect', 311), (74, 'crash', 0), (106, 'disconnect', 416),
      (127, 'restart', 0)], 22334, 0))
# Found with subscription lag (seed 0, lag 2): s1#0 restarts after a record was published, and its
# donor takes that record only after its snapshot: the joiner's punctuations promised a record it
# never had (lifecycle rule 5 now waits for a donor that is behind the joiner's own source).
@example(scenario=([('stream', ('s0', {'k': 'int', 'v': 'int'}), {}),
      ('stream', ('s1', {'k': 'int', 'v': 'int'}), {}),
      ('stream', ('s2', {'k': 'int', 'v': 'int'}), {}),
      ('filter', ('o0', 's1'), {'where': 'v % 3 != 0'}),
      ('application', ('app0', 'o0'), {'ordered': False})],
     {'s0': ['n2', 'n4'], 's1': ['n1', 'n3'], 's2': ['n2', 'n4'], 'o0': ['n1', 'n2'], 'app0': ['app']},
     {'s0': [(1_000_000_000, 0, 0)],
      's1': [(1_000_000_000, 0, 0), (1_000_000_000, 0, 0), (1_000_000_000, 0, 0), (1_000_000_000, 0, 0),
             (1_000_000_001, 0, 1), (1_000_000_001, 0, 0)],
      's2': [(1_000_000_000, 0, 0), (1_000_000_000, 0, 0), (1_000_000_000, 0, 0), (1_000_000_000, 0, 0),
             (1_000_000_001, 0, 0), (1_001_000_000, 0, 0), (1_002_000_000, 0, 0)]},
     [(0, 'crash', 0), (137, 'restart', 0)], 0, 2))
def lifecycle_property(scenario):
    check_scenario(*scenario)


def test_output_equals_the_reference_under_any_lifecycle_schedule():
    """The property over EXAMPLES generated schedules (and the examples above), then what they
    exercised: crashes and restarts that happened, joins from snapshots.  (Rebuilds without a peer
    are not asked for: a crash here is done only while another replica of everything it hosts is
    healthy, so a restarted replica always has a live peer; tests/engine/test_lifecycle.py rebuilds.)"""
    COVERAGE.clear()
    lifecycle_property()
    minimum = max(1, EXAMPLES // 10)
    assert COVERAGE["restart done"] >= minimum, COVERAGE
    assert COVERAGE["crash done"] >= minimum, COVERAGE
    assert COVERAGE["examples with a snapshot"] >= minimum, COVERAGE


class Subscriptions:
    """Each entry replica's own subscription to its source (MQTT): every live entry node gets every
    item of its stream in publication order, but each at its own pace — up to ``lag`` network
    steps behind — so a restarted entry point can receive a record after its donor's snapshot
    already carried it.  A dead node's pending items are lost (its session went with it)."""

    def __init__(self, net: MemoryNetwork, lag: int):
        self.net, self.lag = net, lag
        self.pending: dict[tuple[str, str], list] = {}

    def publish(self, stream: str, item: dict) -> None:
        for node in self.net.placement[stream]:
            if node and self.net.live(node):
                self.pending.setdefault((node, stream), []).append([self.net.rng.randrange(0, self.lag + 1), item])

    def step(self, everything: bool = False) -> None:
        net = self.net
        for (node, stream), queue in self.pending.items():
            if not net.live(node):
                queue.clear()
                continue
            due = 0
            while due < len(queue) and (everything or queue[due][0] <= 0):
                due += 1                                   # in order: an item waits for those before it
            if due:
                net.publish(node, stream, [item for _, item in queue[:due]])
                del queue[:due]
            for entry in queue:
                entry[0] -= 1


def check_scenario(spec, placement, streams, actions, seed, lag=0) -> None:
    """Run one scenario (a failing example can be pasted here by hand)."""
    query = build_query(spec)
    net = MemoryNetwork(query, placement, seed=seed, spare=tuple(NODES))
    while not all(core.ready() for core in net.cores.values()):   # sources start once the cluster is up
        net.run()
        net.tick(500_000)
    schedule = Schedule(net)
    subscriptions = Subscriptions(net, lag)
    items = source_items(query, streams)
    todo = sorted(actions)
    for i, (_, stream, item) in enumerate(items):
        while todo and todo[0][0] * len(items) // 200 <= i:
            _, action, pick = todo.pop(0)
            schedule.do(action, pick)
        if i % 7 == 6:
            schedule.reconnect()
        subscriptions.publish(stream, item)
        subscriptions.step()
        net.run(net.rng.randrange(0, 6))
        net.tick(50_000)
    schedule.reconnect()
    for name in query.streams:
        subscriptions.publish(name, {"punctuation": CLOSED})
    subscriptions.step(everything=True)
    for _ in range(40):
        net.tick(500_000)
        net.run()
    expected = replay(query, streams, replicas=1, punctuation_us=P).outputs
    for app, spec in query.applications.items():
        got = net.delivered[app]
        assert Counter(got) == Counter(expected[app]), (app, Counter(got) - Counter(expected[app]),
                                                        Counter(expected[app]) - Counter(got))
        if spec.ordered:
            assert got == expected[app], app
    taken = sum(core.counters["snapshots_taken"] for core in net.cores.values())
    event(f"snapshots taken: {min(taken, 3)}{'+' if taken > 3 else ''}")
    COVERAGE["examples"] += 1
    COVERAGE["examples with a snapshot"] += taken > 0
    COVERAGE["rebuilds"] += sum(core.counters["rebuilt_without_peer"] for core in net.cores.values())
