"""Trace queries (docs/tracing.md): the language, partial aggregation, and the node core's tracepoints
on an in-memory network of node cores (both runtimes drive the same core)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicast.engine.core import tracepoints
from replicast.engine.core.baggage import trace_id
from replicast.engine.core.trace_aggregate import LogHistogram, Partial, finish, merge
from replicast.engine.core.trace_language import TraceQueryError, parse
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_node import NODES, QUERY, assert_same, placement, publish_all
from tests.test_purity import ALLOWED, imported_modules

ROOT = Path(__file__).resolve().parents[2]

WIN_SHARE = """From a In Arrival Where a.outcome = "pass"
               GroupBy a.replica, a.port, a.upstream Select a.replica, a.port, a.upstream, COUNT, SHARE Sample 1/1"""


def test_the_tracing_modules_are_pure():
    for name in ("engine/core/tracepoints.py", "engine/core/trace_language.py", "engine/core/trace_aggregate.py",
                 "engine/core/baggage.py", "engine/core/trace_sampling.py", "engine/core/trace_memory.py"):
        assert imported_modules(ROOT / name) <= ALLOWED, name


def test_a_query_parses_into_its_clauses():
    q = parse('from a in Arrival where a.replica = "correlate#0" and a.rank >= 2 '
              'groupby a.upstream select a.upstream, P50(a.later_us), P99(a.later_us), COUNT sample 1/1000')
    assert q.tracepoint == "Arrival" and q.sample == 1000 and q.group_by == ("upstream",)
    assert [(c.field, c.op, c.value) for c in q.where] == [("replica", "=", "correlate#0"), ("rank", ">=", 2)]
    assert [o.label for o in q.select] == ["upstream", "P50(later_us)", "P99(later_us)", "COUNT"]
    assert parse("From d In Deliver Select COUNT").sample == 100


@pytest.mark.parametrize("text, words", [
    ("From a In Nowhere Select COUNT", ["Nowhere", "Arrival"]),
    ("From a In Arrival Select a.colour, COUNT", ["colour"]),
    ("From a In Arrival Select a.upstream, COUNT", ["upstream", "GroupBy"]),
    ("From a In Arrival Where b.rank = 1 Select COUNT", ["b"]),
    ("From a In Arrival Where a.rank ~ 1 Select COUNT", ["~"]),
    ("From a In Arrival Where a.rank = 1 Or a.rank = 2 Select COUNT", ["And", "Or"]),
    ("From a In Arrival GroupBy a.port", ["Select"]),
    ("From a In Arrival Select a.port", ["aggregate"]),
    ("From a In Arrival Select COUNT Sample 2/3", ["Sample"]),
    ("Select COUNT From a In Arrival", ["order"]),
    ("From a In Arrival Select MEDIAN(a.rank)", ["MEDIAN"]),
])
def test_a_bad_query_is_one_line_naming_what_is_wrong(text, words):
    with pytest.raises(TraceQueryError) as error:
        parse(text)
    assert "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value)


def test_partial_tables_merge_into_shares_and_percentiles():
    q = parse("From a In Arrival GroupBy a.port, a.upstream "
              "Select a.port, a.upstream, COUNT, SHARE, P50(a.later_us), P99(a.later_us), AVG(a.rank), MAX(a.rank)")
    one, two = Partial(q), Partial(q)
    for i in range(300):
        (one if i % 2 else two).add({"port": 0, "upstream": "x#0", "later_us": 1000 + i, "rank": 1})
    for i in range(100):
        one.add({"port": 0, "upstream": "x#1", "later_us": 50_000, "rank": 2})
    one.add({"port": 1, "upstream": "y#0", "later_us": 7, "rank": 3})
    rows = finish(q, merge(q, [one.take(), two.take()]))
    assert [(r["port"], r["upstream"], r["COUNT"], r["SHARE"]) for r in rows] == \
        [(0, "x#0", 300, 0.75), (0, "x#1", 100, 0.25), (1, "y#0", 1, 1.0)]
    assert rows[0]["P50(later_us)"] == pytest.approx(1150, rel=0.02)
    assert rows[0]["P99(later_us)"] == pytest.approx(1296, rel=0.02)
    assert rows[1]["P50(later_us)"] == pytest.approx(50_000, rel=0.02)
    assert rows[2]["AVG(rank)"] == 3 and rows[2]["MAX(rank)"] == 3
    assert one.take() == []                              # taken: the next interval starts empty


def test_log_histogram_quantiles_are_within_two_percent():
    values = [v * 37 % 100_003 + 2 for v in range(5000)]
    buckets: dict = {}
    for v in values:
        buckets[LogHistogram.index(v)] = buckets.get(LogHistogram.index(v), 0) + 1
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99):
        assert LogHistogram.quantile(buckets, q) == pytest.approx(ordered[int(q * (len(values) - 1))], rel=0.02)


def install_everywhere(net: MemoryNetwork, qid: str, text: str) -> None:
    for core in net.cores.values():
        tracepoints.install(core, qid, parse(text))


def answers(net: MemoryNetwork, qid: str, text: str) -> list[dict]:
    """The answer to query ``qid``: every node's table merged (taking hands out every query's tables)."""
    taken = net.__dict__.setdefault("taken", {})
    for name, core in net.cores.items():
        for query, table in tracepoints.take(core).items():
            taken.setdefault(query, []).append(table)
    q = parse(text)
    return finish(q, merge(q, taken.get(qid, [])))


def test_tracing_is_off_by_default_and_removing_the_last_query_turns_it_off():
    net = MemoryNetwork(QUERY, placement(2, NODES))
    assert all(core.tracer is None for core in net.cores.values())
    core = net.cores["n1"]
    tracepoints.install(core, "a", parse(WIN_SHARE))
    tracepoints.install(core, "b", parse("From d In Deliver Select COUNT"))
    assert set(tracepoints.installed(core)) == {"a", "b"}
    assert tracepoints.remove(core, "a") and core.tracer is not None
    assert not tracepoints.remove(core, "a")
    assert tracepoints.remove(core, "b") and core.tracer is None


def test_every_copy_is_an_arrival_and_the_drops_are_the_duplicate_filters_drops():
    """At Sample 1/1 each copy of every record at every port is one Arrival: the passes are the
    records the filters passed, the drops exactly the filters' duplicates (§IV-B), and every
    record passed at a port of a k = 2 replica arrives twice (both upstream replicas live)."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=3)
    text = """From a In Arrival GroupBy a.node, a.replica, a.outcome, a.rank
              Select a.node, a.replica, a.outcome, a.rank, COUNT, P50(a.later_us) Sample 1/1"""
    install_everywhere(net, "copies", text)
    publish_all(net, place)
    assert_same(net)                                    # tracing changes no output
    rows = answers(net, "copies", text)
    drops: dict = {}
    for row in rows:
        assert (row["outcome"] == "pass") == (row["rank"] == 1)
        if row["outcome"] == "drop":
            drops[(row["node"], row["replica"])] = drops.get((row["node"], row["replica"]), 0) + row["COUNT"]
    for name, core in net.cores.items():
        for replica, values in core.statistics()["replicas"].items():
            if values["kind"] != "entry":
                assert drops.get((name, replica), 0) == values["duplicates"], (name, replica)
    passes = {(r["node"], r["replica"]): r["COUNT"] for r in rows if r["rank"] == 1}
    seconds = {(r["node"], r["replica"]): r["COUNT"] for r in rows if r["rank"] == 2}
    operators = [key for key in passes if key[1].split("#")[0] in QUERY.operators]
    assert operators and all(seconds.get(key) == passes[key] for key in operators)


def test_win_share_per_upstream_replica_moves_when_a_node_dies():
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=1)
    install_everywhere(net, "share", WIN_SHARE)
    publish_all(net, place, kill="n3")
    rows = answers(net, "share", WIN_SHARE)
    by_port: dict = {}
    for row in rows:
        by_port.setdefault((row["replica"], row["port"]), {})[row["upstream"]] = row["SHARE"]
    assert all(sum(shares.values()) == pytest.approx(1.0) for shares in by_port.values())
    # correlate's upstream replicas on n3 won only until n3 died: their peers won the rest
    correlate = [r for r in rows if r["replica"].startswith("correlate") and r["upstream"].split("#")[0] == "load"]
    assert len({r["upstream"] for r in correlate}) == 2


def test_deliver_counts_every_sampled_record_with_its_latency():
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place)
    every = "From d In Deliver GroupBy d.app Select d.app, COUNT, MAX(d.latency_us)"
    install_everywhere(net, "all", every + " Sample 1/1")
    install_everywhere(net, "some", every + " Sample 1/10")
    publish_all(net, place)
    counts = {r["app"]: r["COUNT"] for r in answers(net, "all", every + " Sample 1/1")}
    assert counts == {app: len(records) for app, records in net.delivered.items() if records}
    some = {r["app"]: r["COUNT"] for r in answers(net, "some", every + " Sample 1/10")}
    expected = {app: sum(tracepoints.sampled(r[0], 10) for r in records) for app, records in net.delivered.items()}
    assert some == {app: n for app, n in expected.items() if n}
    assert sum(some.values()) < sum(counts.values()) / 3


def test_records_waiting_in_a_sorter_are_released_at_a_punctuation():
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place)
    text = "From w In Wait GroupBy w.replica Select w.replica, COUNT, MAX(w.wait_us) Sample 1/1"
    install_everywhere(net, "waits", text)
    ticking = net.publish

    def publish_and_tick(node, stream, items):       # time passes between source items
        net.now += 1000
        ticking(node, stream, items)
    net.publish = publish_and_tick
    publish_all(net, place)
    rows = {r["replica"]: r for r in answers(net, "waits", text)}
    sorted_replicas = {name for name in rows if name.split("#")[0] in ("load_trend", "alerts", "load_trends")}
    assert sorted_replicas and set(rows) == sorted_replicas
    # records reach alerts and load_trend before the punctuation that releases them; load_trend's
    # count windows emit only at punctuations, so load_trends' records never wait
    assert all(r["MAX(wait_us)"] > 0 for name, r in rows.items() if not name.startswith("load_trends"))
    assert rows["load_trends#0"]["MAX(wait_us)"] == 0


HOPS = "From h In Hop GroupBy h.app, h.hop, h.replica Select h.app, h.hop, h.replica, COUNT, SUM(h.hop_us), " \
       "SUM(h.latency_us) Sample 1/1"


def test_baggage_carries_each_sampled_records_hops_across_the_wire_and_they_add_up_to_its_latency():
    """Frames cross memnet's links encoded (engine/wire.py): the hops reach the application only
    if the baggage travels in them.  Per delivered record its hops' times add up to its latency."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=2)
    install_everywhere(net, "hops", HOPS)
    publish = net.publish

    def publish_and_tick(node, stream, items):
        net.now += 700
        publish(node, stream, items)
    net.publish = publish_and_tick
    publish_all(net, place)
    rows = answers(net, "hops", HOPS)
    for app in QUERY.applications:
        mine = [r for r in rows if r["app"] == app]
        first = [r for r in mine if r["hop"] == 0]
        assert first, app
        records = sum(r["COUNT"] for r in first)
        assert records == len(net.delivered[app]), app      # every delivered record had its baggage
        assert sum(r["SUM(hop_us)"] for r in mine) == sum(r["SUM(latency_us)"] for r in first)
        assert any(r["replica"].startswith(app + "#") for r in mine)     # the last hop: the application
    # alerts' records come all the way from the entry points (joined and filtered, not aggregated)
    starts = {r["replica"].split("#")[0] for r in rows if r["app"] == "alerts" and r["hop"] == 0}
    assert starts and starts <= set(QUERY.streams)


def test_baggage_is_on_the_wire_only_while_a_query_needs_it():
    from replicast.engine.messages import Batch
    from replicast.engine.wire import batch_frame_size, batch_header_size, decode, encode
    from replicast.operators.plan import ReplicaId, StreamReplica
    stream = StreamReplica(ReplicaId("load", 0), ReplicaId("correlate", 1), 0)
    plain = Batch(stream, 5, 7, [(1, "a", 0.5)], 3)
    untimed = Batch(stream, 5, 7, [(1, "a", 0.5)], 3, ("cpu_a#0@n1", "load#0@n2"))   # the simulator's paths
    timed = Batch(stream, 5, 7, [(1, "a", 0.5)], 3, ("cpu_a#0@n1@10", "load#0@n2@25"))
    assert encode(untimed) == encode(plain)
    assert len(encode(timed)) > len(encode(plain))
    assert decode(encode(timed)[4:]).path == timed.path and decode(encode(plain)[4:]).path == ()
    header = batch_header_size(stream)
    for batch in (plain, timed):
        assert batch_frame_size(header, batch) == len(encode(batch))
    net = MemoryNetwork(QUERY, placement(2, NODES))
    assert all(core.tracer is None for core in net.cores.values())


@pytest.mark.parametrize("code, baggage", [(50, ("x",) * 17), (50, ("a" * 201,)), (50, (1, 2)), (1, ("x@n@1",))])
def test_oversized_or_odd_baggage_is_a_wire_error(code, baggage):
    """Baggage has its own frame code (50, the batch frame plus the hops); a plain batch frame (1)
    with one field more is malformed, as any frame longer than its schema."""
    import msgpack
    from replicast.engine.wire import WireError, decode
    body = msgpack.packb([code, "load", 0, "correlate", 1, 0, 5, 7, msgpack.packb([[1, "a", 0.5]]), None,
                          list(baggage)])
    with pytest.raises(WireError):
        decode(body)
    assert decode(msgpack.packb([50, "load", 0, "correlate", 1, 0, 5, 7, msgpack.packb([[1, "a", 0.5]]), None,
                                 ["cpu#0@n1@10"]])).path == ("cpu#0@n1@10",)


@pytest.mark.parametrize("signal", ["rank", "win-share"])
def test_the_coordinator_is_told_win_share_or_rank_weights(signal):
    """NodeOptions.utility picks what a server reports per stream replica (placement reports):
    §V-B's Σ 1/rank, or its wins — a stream replica that never wins weighs 0 only then."""
    from dataclasses import replace as with_options
    from replicast.engine.node import NodeOptions
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, options=with_options(NodeOptions(), utility=signal))
    publish_all(net, place)
    checked = 0
    for core in net.cores.values():
        report = core.server_report(net.now)
        for stream, inbound in core.inbound.items():
            hosted = core.hosted[stream.target]
            if hosted.logic is None or inbound.index is None:
                continue
            counts = hosted.logic.filters[stream.port].rank_counts[inbound.index]
            expected = counts[0] if signal == "win-share" else sum(n / (r + 1) for r, n in enumerate(counts))
            assert report.inputs[stream].weight == pytest.approx(expected)
            checked += counts[1] > 0                     # it lost some: the two signals differ there
    assert checked


def test_an_input_trace_context_rides_in_the_baggage_to_the_deliveries():
    """A source message's W3C traceparent (tracepoints rule 5): its records' batches carry the trace
    id through the operators to the application, even where the sampling would not take them."""
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=4)
    install_everywhere(net, "hops", "From h In Hop Select COUNT Sample 1/1000000")
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    publish = net.publish

    def publish_with_context(node, stream, items):
        core = net.cores[node]
        assert tracepoints.source_context(core, stream, f"00-{trace}-00f067aa0ba902b7-01")
        core.on_source(stream, json.dumps(items).encode(), now=net.now)
        tracepoints.source_context(core, None, None)
        net.flush()
    net.publish = publish_with_context
    publish_all(net, place)
    traced = [(name, e) for name, e in net.events if type(e).__name__ == "Delivered" and e.records
              and trace_id(e.path) == trace]
    assert {e.app for _, e in traced} >= {"alerts"}          # joined, filtered and sorted on the way
    assert not tracepoints.source_context(net.cores["n1"], "cpu_a", "not-a-traceparent")
    net.publish = publish


def test_an_entry_stamped_streams_records_wait_for_their_stamp_round():
    """Entry-stamped mode: a stamped record leaves once every entry replica holds its stamp; the
    wait (one round trip between the entry replicas) is a Wait event of kind stamper."""
    from tests.engine.test_entry_stamping import network, publish, settle
    net = network(seed=1)
    text = "From w In Wait GroupBy w.kind, w.replica Select w.kind, w.replica, COUNT, MAX(w.wait_us) Sample 1/1"
    install_everywhere(net, "waits", text)
    publish(net, 0, 20)
    settle(net)
    rows = [r for r in answers(net, "waits", text) if r["kind"] == "stamper"]
    assert sum(r["COUNT"] for r in rows) >= 20 and {r["replica"] for r in rows} <= {"cpu#0", "cpu#1"}
    assert max(r["MAX(wait_us)"] for r in rows) > 0


def test_a_table_keeps_at_most_max_groups_and_counts_the_rest():
    from replicast.engine.core import trace_aggregate
    q = parse("From a In Arrival GroupBy a.ts Select a.ts, COUNT")
    partial = Partial(q)
    for ts in range(trace_aggregate.MAX_GROUPS + 25):
        partial.add({"ts": ts})
    assert len(partial.groups) == trace_aggregate.MAX_GROUPS and partial.overflow == 25


def test_coordinator_utility_is_a_cluster_file_and_scenario_setting(tmp_path):
    from replicast.engine.cluster_config import ClusterConfigError, load_cluster
    from replicast.engine.placement_config import parse_coordinator
    from tests.engine.test_config_errors import min_cost_cluster
    assert load_cluster(min_cost_cluster(tmp_path, 'kmax = 1\nutility = "win-share"')).options().utility == "win-share"
    assert load_cluster(min_cost_cluster(tmp_path, "kmax = 1")).options().utility == "rank"
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(min_cost_cluster(tmp_path, 'kmax = 1\nutility = "wins"'))
    assert "'utility' must be \"rank\" or \"win-share\", got 'wins'" in str(error.value)
    assert parse_coordinator({"utility": "win-share"}, "scenario", ValueError).utility == "win-share"


def test_a_guarded_core_takes_queries_and_a_refused_one_is_not_the_cores_failure():
    """The asyncio driver holds a GuardedCore (engine/node.py): a query beyond the node's limit is
    the caller's error (TraceQueryError), the core keeps running; a core in ERROR takes none."""
    from replicast.engine.core.tracepoints import MAX_QUERIES
    from replicast.engine.node import CoreFailed, CoreState, GuardedCore, NodeCore
    guarded = GuardedCore(NodeCore("n1", QUERY, now=0))
    for i in range(MAX_QUERIES):
        guarded.install_trace(f"q{i}", parse(WIN_SHARE))
    with pytest.raises(TraceQueryError):
        guarded.install_trace("one-too-many", parse(WIN_SHARE))
    assert guarded.state is CoreState.RUNNING and len(tracepoints.installed(guarded)) == MAX_QUERIES
    assert set(guarded.take_traces()) == {f"q{i}" for i in range(MAX_QUERIES)}
    assert all(guarded.remove_trace(f"q{i}") for i in range(MAX_QUERIES)) and guarded.tracer is None
    guarded.state = CoreState.ERROR
    with pytest.raises(CoreFailed):
        guarded.install_trace("late", parse(WIN_SHARE))


class Stamped(list):
    """A batch whose timestamps were taken out (engine.packed_records.PackedRecords.stamps)."""


@pytest.mark.parametrize("n", [2, 7, 100, 1000])
def test_sampling_a_batch_by_its_span_picks_exactly_the_records_sampled_one_by_one(n):
    """Rule 1's constant-time test (the filter's span, the cold stretch of slots remembered
    between batches, the content-key cache) chooses the records the per-record rule would, for
    batches in time order, shuffled, going back in time, spread thinly and repeated by key."""
    import random
    rng = random.Random(n)
    tracer = tracepoints.Tracer("n", {})
    start = 1_000_000
    for i in range(400):
        shape = i % 4
        if shape == 0:                                 # in time order, one µs apart
            stamps = list(range(start, start + rng.randint(1, 2000)))
            start = stamps[-1]
        elif shape == 1:                               # shuffled within the next 3 ms
            stamps = rng.sample(range(start, start + 3000), rng.randint(1, 1000))
        elif shape == 2:                               # back in time (a lagging port)
            back = start - rng.randint(0, 200_000)
            stamps = list(range(back, back + 500))
        else:                                          # thinly over 10 s
            stamps = sorted(rng.sample(range(start, start + 10_000_000), 50))
        records = Stamped((ts, i, j) for j, ts in enumerate(stamps))
        records.stamps = stamps                        # as read off the wire: in record order
        expected = [r for r in records if tracepoints.sampled(r[0], n)]
        span = None if i % 3 == 0 else (min(stamps), max(stamps)) if i % 3 == 1 else \
            (min(stamps), max(stamps), sorted(stamps))  # as the duplicate filter has it
        key = f"batch {i}" if i % 5 == 0 else None
        assert tracer._sample(records, key, n, span) == expected, i
        if key is not None:                            # a copy, known by its key (its span unknown)
            assert tracer._sample(records, key, n) == expected, i


@pytest.mark.parametrize("sample", [3, 10])
def test_sampled_arrivals_are_the_per_record_arrivals_of_the_sampled_records(sample):
    """Rule 7: a batch's Arrival events aggregated before the table give the table per-event adds
    would — the same run traced at 1/1 per record (GroupBy a.ts) and at 1/N agree on each
    port's passes and drops by rank, and their replication gain."""
    place = placement(2, NODES)
    every = """From a In Arrival GroupBy a.node, a.replica, a.port, a.upstream, a.rank, a.ts
               Select a.node, a.replica, a.port, a.upstream, a.rank, a.ts, COUNT, SUM(a.later_us) Sample 1/1"""
    some = f"""From a In Arrival GroupBy a.node, a.replica, a.port, a.upstream, a.rank, a.outcome
               Select a.node, a.replica, a.port, a.upstream, a.rank, a.outcome, COUNT, SUM(a.later_us),
               MAX(a.age_us) Sample 1/{sample}"""
    tables = []
    for text in (every, some):
        net = MemoryNetwork(QUERY, place, seed=5)
        install_everywhere(net, "q", text)
        publish_all(net, place)
        assert_same(net)
        tables.append(answers(net, "q", text))
    expected: dict = {}
    for row in tables[0]:
        if tracepoints.sampled(row["ts"], sample):
            key = (row["node"], row["replica"], row["port"], row["upstream"], row["rank"])
            count, later = expected.get(key, (0, 0))
            expected[key] = (count + row["COUNT"], later + row["SUM(later_us)"])
    got = {(r["node"], r["replica"], r["port"], r["upstream"], r["rank"]): (r["COUNT"], r["SUM(later_us)"])
           for r in tables[1]}
    assert all((r["outcome"] == "pass") == (r["rank"] == 1) for r in tables[1])
    assert got == expected and sum(c for c, _ in got.values()) >= 20


def test_equal_events_added_with_their_count_make_the_table_of_one_add_each():
    q = parse("From a In Arrival Where a.rank >= 2 GroupBy a.port Select a.port, COUNT, SHARE, SUM(a.later_us), "
              "AVG(a.later_us), MIN(a.later_us), MAX(a.later_us), P50(a.later_us)")
    events = [({"port": i % 3, "rank": 1 + i % 4, "later_us": 10 * i}, 1 + i % 5) for i in range(40)]
    one, counted = Partial(q), Partial(q)
    for event, count in events:
        for _ in range(count):
            one.add(event)
        counted.add(event, count)
    assert counted.events == one.events == sum(c for e, c in events if e["rank"] >= 2)
    assert counted.take() == one.take()
    assert q.where[0].field in Partial(q).fields and "later_us" in Partial(q).fields
