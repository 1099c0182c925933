"""Seals per key (operators/key_seals.py, Blazes §V-B1): keyed windows close per key, replicas agree."""

import random
from collections import Counter

from hypothesis import given, settings, strategies as st

from replicast.operators.aggregate import TimeWindowAggregate
from replicast.operators.count_aggregate import CountWindowAggregate
from replicast.operators.key_seals import KeySealing, SealTable, key_sealing
from replicast.operators.query import QueryBuilder
from replicast.operators.record import CLOSED
from replicast.operators.replica import OperatorReplica
from replicast.operators.summaries import Summary
from replicast.operators.union import Union

COUNT = (Summary("count", None, None),)
SUMS = (Summary("count", None, None), Summary("sum", 2, "float"))
AGG_SEALING = KeySealing(("k",), closes=True, record_positions=(1,), group_positions=(0,))
UNION_SEALING = KeySealing(("k",), forwards=True, record_positions=(1,))


def aggregate_replica(k=1, size=10, slide=10, summaries=COUNT, sealing=AGG_SEALING):
    return OperatorReplica(TimeWindowAggregate(size, slide, (1,), summaries), [k], sealing=sealing)


def test_seal_table_keeps_the_highest_seal_above_the_frontier():
    table = SealTable()
    assert table.raise_seal(("a",), 5, 0)
    assert not table.raise_seal(("a",), 5, 0)          # a copy from another replica: first wins
    assert not table.raise_seal(("a",), 3, 0)          # lower: says nothing new
    assert table.raise_seal(("a",), 9, 0) and table.sealed(("a",)) == 9
    assert not table.raise_seal(("b",), 4, 5)          # below the frontier
    assert table.raise_seal(("b",), 5, 5)              # equal to it: still news behind a union
    table.prune(5)
    assert table.seals == {("a",): 9}
    copy = SealTable()
    copy.restore(table.snapshot())
    assert copy.seals == table.seals


def test_a_keys_window_closes_at_its_seal_before_the_punctuation():
    replica = aggregate_replica()
    assert replica.on_batch(0, 0, [(3, "a", 1.0), (4, "b", 1.0), (12, "a", 1.0)]) == ([], None)
    assert replica.on_key_seals(0, 0, [(("a",), 8)]) == ([], [])        # [0, 10) could still get a at 9
    assert replica.on_key_seals(0, 0, [(("a",), 9)]) == ([(10, "a", 1)], [])
    out, p = replica.on_batch(0, 0, [], 9)                               # the punctuation closes only b's
    assert out == [(10, "b", 1)] and p == 9
    assert replica.on_batch(0, 0, [], 100) == ([(20, "a", 1)], 100)


def test_a_record_behind_its_keys_seal_is_dropped_and_counted():
    replica = aggregate_replica()
    replica.on_batch(0, 0, [(3, "a", 1.0)])
    replica.on_key_seals(0, 0, [(("a",), 9)])
    assert replica.on_batch(0, 0, [(5, "a", 1.0), (6, "b", 1.0), (10, "a", 1.0)]) == ([], None)
    assert replica.late_for_seal == 1
    out, _ = replica.on_batch(0, 0, [], CLOSED)
    assert sorted(out) == [(10, "b", 1), (20, "a", 1)]


def test_seals_from_every_upstream_replica_act_once():
    replica = aggregate_replica(k=2)
    replica.on_batch(0, 0, [(3, "a", 1.0)])
    assert replica.on_key_seals(0, 0, [(("a",), 9)])[0] == [(10, "a", 1)]
    replica.on_batch(0, 1, [(3, "a", 1.0)])                               # the copy: a duplicate
    assert replica.on_key_seals(0, 1, [(("a",), 9)]) == ([], [])
    assert replica.late_for_seal == 0
    assert replica.on_batch(0, 0, [], CLOSED)[0] == []


def test_sliding_windows_and_a_key_of_part_of_the_groups():
    # group by (k, host), sealed on k: a seal on k closes every (k, *) group's windows
    agg = TimeWindowAggregate(10, 5, (1, 2), COUNT)
    sealing = KeySealing(("k",), closes=True, record_positions=(1,), group_positions=(0,))
    replica = OperatorReplica(agg, [1], sealing=sealing)
    replica.on_batch(0, 0, [(7, "a", "h1"), (8, "a", "h2"), (8, "b", "h1")])
    out, _ = replica.on_key_seals(0, 0, [(("a",), 10)])
    assert sorted(out) == [(10, "a", "h1", 1), (10, "a", "h2", 1)]       # [5, 15) stays open
    out, _ = replica.on_batch(0, 0, [], CLOSED)
    assert sorted(out) == [(10, "b", "h1", 1), (15, "a", "h1", 1), (15, "a", "h2", 1), (15, "b", "h1", 1)]


def test_count_windows_release_a_keys_sorted_prefix_at_its_seal():
    sealing = KeySealing(("k",), closes=True, record_positions=(1,), group_positions=(0,))
    replica = OperatorReplica(CountWindowAggregate(2, 2, (1,), COUNT), [1], sort_inputs=True, sealing=sealing)
    replica.on_batch(0, 0, [(5, "a", 1.0), (2, "a", 2.0), (3, "b", 1.0), (4, "b", 1.0)])
    out, _ = replica.on_key_seals(0, 0, [(("a",), 6)])
    assert out == [(5, "a", 2)]                                          # b waits for the punctuation
    assert replica.on_batch(0, 0, [], 10) == ([(4, "b", 2)], 10)


def test_a_union_forwards_seals_above_its_frontier_once():
    replica = OperatorReplica(Union(2), [1, 1], sealing=UNION_SEALING)
    replica.on_batch(0, 0, [(3, "a", 1.0)], 5)
    assert replica.on_key_seals(0, 0, [(("a",), 5)]) == ([], [(("a",), 5)])   # its output's frontier is below
    assert replica.on_key_seals(0, 0, [(("a",), 5)]) == ([], [])
    replica.on_batch(1, 0, [], 7)                                             # frontier 5
    assert replica.on_key_seals(0, 0, [(("a",), 6)]) == ([], [(("a",), 6)])
    assert replica.on_key_seals(1, 0, [(("b",), 4)]) == ([], [])              # below the frontier


def test_a_map_renaming_a_two_field_key_reorders_the_values_it_forwards():
    b = QueryBuilder()
    b.stream("cpu", {"site": "str", "server": "str", "load": "float"}, seal=["site", "server"])
    b.operator("renamed", "map", "cpu", set={"a_host": "server", "z_site": "site", "load": "load"})
    b.operator("per_host", "aggregate", "renamed", group_by=["z_site", "a_host"],
               window={"kind": "time", "size_ms": 10}, compute={"n": "count()"})
    b.application("out", "per_host")
    query = b.build()
    sealing = key_sealing(query, "renamed")
    assert sealing.key == ("server", "site") and sealing.order is None     # a_host, z_site: the same order
    replica = OperatorReplica(query.new_operator("renamed"), [1], sealing=sealing)
    assert replica.on_key_seals(0, 0, [(("s1", "east"), 5)]) == ([], [(("s1", "east"), 5)])
    agg = key_sealing(query, "per_host")
    assert agg.key == ("a_host", "z_site") and agg.group_positions == (1, 0)
    b = QueryBuilder()
    b.stream("cpu", {"site": "str", "server": "str", "load": "float"}, seal=["site", "server"])
    b.operator("renamed", "map", "cpu", set={"z_host": "server", "a_site": "site", "load": "load"})
    b.application("out", "renamed")
    sealing = key_sealing(b.build(), "renamed")
    assert sealing.order == (1, 0)                    # (server, site) values become (a_site, z_host) order
    replica = OperatorReplica(Union(1), [1], sealing=sealing)
    assert replica.on_key_seals(0, 0, [(("s1", "east"), 5)]) == ([], [(("east", "s1"), 5)])


def test_snapshot_and_restore_carry_the_seals():
    replica = aggregate_replica()
    replica.on_batch(0, 0, [(3, "a", 1.0)])
    replica.on_key_seals(0, 0, [(("a",), 9)])
    copy = aggregate_replica()
    copy.restore(replica.snapshot())
    assert copy.key_seals[0].seals == {("a",): 9}
    assert copy.on_batch(0, 0, [(4, "a", 1.0)]) == ([], None) and copy.late_for_seal == 1


def test_the_analysis_gives_seals_to_keyed_windows_and_the_operators_that_carry_the_key():
    b = QueryBuilder()
    for name in ("east", "west"):
        b.stream(name, {"server": "str", "load": "float"}, seal=["server"])
    b.stream("plain", {"server": "str", "load": "float"})
    b.operator("both", "union", ["east", "west"])
    b.operator("busy", "filter", "both", where="load > 0.5")
    b.operator("renamed", "map", "busy", set={"host": "server", "load": "load"})
    b.operator("per_server", "aggregate", "busy", group_by=["server"],
               window={"kind": "time", "size_ms": 10}, compute={"n": "count()"})
    b.operator("per_host", "aggregate", "renamed", group_by=["host"],
               window={"kind": "time", "size_ms": 10}, compute={"n": "count()"})
    b.operator("mixed", "union", ["east", "plain"])
    b.operator("per_load", "aggregate", "busy", group_by=["load"],
               window={"kind": "time", "size_ms": 10}, compute={"n": "count()"})
    for name in ("per_server", "per_host", "mixed", "per_load"):
        b.application(f"app_{name}", name)
    query = b.build()
    assert key_sealing(query, "both") == KeySealing(("server",), forwards=True, record_positions=(1,))
    assert key_sealing(query, "busy").forwards
    # an aggregate closes per key and passes the seal on: its output keeps the group_by key
    assert key_sealing(query, "per_server") == KeySealing(("server",), forwards=True, closes=True,
                                                          record_positions=(1,), group_positions=(0,))
    assert key_sealing(query, "renamed") == KeySealing(("server",), forwards=True, record_positions=(1,))
    assert key_sealing(query, "per_host") == KeySealing(("host",), forwards=True, closes=True,
                                                        record_positions=(1,), group_positions=(0,))
    assert key_sealing(query, "mixed") is None             # one input does not seal: no partition is complete
    assert key_sealing(query, "per_load") is None          # the key is not compatible with its gate


# -- property: any interleaving of replicated producers, seals and punctuations -------------------

@st.composite
def producers(draw):
    """Per producer: its keys (its own: Blazes' independent seal) and its records in ts order."""
    n = draw(st.integers(1, 3))
    streams = []
    for i in range(n):
        keys = [f"k{i}{j}" for j in range(draw(st.integers(1, 2)))]
        stamps = sorted(draw(st.lists(st.integers(0, 60), max_size=12)))
        streams.append([(ts, draw(st.sampled_from(keys)), draw(st.sampled_from([0.1, 0.2, 1e16, -1e16, 3.0])))
                        for ts in stamps])
    return streams


def producer_items(records, rng):
    """A producer's stream: its records in order, punctuations at random points, and after each
    punctuation the highest valid seal of each of its keys (below that key's next record)."""
    items, keys = [], sorted({r[1] for r in records})
    for i, record in enumerate(records):
        items.append(("r", record))
        later = records[i + 1:]
        if rng.random() < 0.4 and (not later or later[0][0] > record[0]):
            items.append(("p", record[0]))
            for key in keys:
                nxt = [r[0] for r in later if r[1] == key]
                items.append(("s", ((key,), (nxt[0] - 1) if nxt else 100)))
    items.append(("p", CLOSED))
    return items


def interleave(sequences, rng):
    """One random merge of ``sequences`` (each kept in order): (sequence index, item) pairs."""
    cursors, out = [0] * len(sequences), []
    while any(c < len(s) for c, s in zip(cursors, sequences)):
        i = rng.choice([i for i, s in enumerate(sequences) if cursors[i] < len(s)])
        out.append((i, sequences[i][cursors[i]]))
        cursors[i] += 1
    return out


def feed(replica, port, upstream, item):
    """One item into ``replica``; returns what it emits as items (records, then seals or punctuation)."""
    kind, value = item
    if kind == "s":
        out, seals = replica.on_key_seals(port, upstream, [value])
        return [("r", r) for r in out] + [("s", s) for s in seals]
    out, p = replica.on_batch(port, upstream, [value] if kind == "r" else [], value if kind == "p" else None)
    return [("r", r) for r in out] + ([("p", p)] if p is not None else [])


def run_chain(streams, make_consumer, rng, k=2, snapshot_at=None):
    """``k`` replicas of every producer → a Union replica → ``k`` consumer-replica inputs; returns the
    consumer's outputs (optionally snapshotted into a fresh replica halfway through)."""
    produced = [producer_items(records, rng) for records in streams]
    union = OperatorReplica(Union(len(streams)), [k] * len(streams), sealing=UNION_SEALING) \
        if len(streams) > 1 else None
    union_outputs = []
    for _ in range(k):               # each union replica sees its own interleaving of the producers' copies
        u = OperatorReplica(Union(len(streams)), [k] * len(streams), sealing=UNION_SEALING)
        sequences = [items for items in produced for _ in range(k)]
        out = []
        for index, item in interleave(sequences, rng):
            out += feed(u, index // k, index % k, item)
        union_outputs.append(out)
    del union
    consumer = make_consumer(k)
    emitted = []
    merged = interleave(union_outputs, rng)
    for n, (upstream, item) in enumerate(merged):
        if snapshot_at is not None and n == int(snapshot_at * len(merged)):
            fresh = make_consumer(k)
            fresh.restore(consumer.snapshot())
            consumer = fresh
        emitted += [value for kind, value in feed(consumer, 0, upstream, item) if kind == "r"]
    return Counter(emitted)


def reference(streams, operator):
    records = sorted(r for records in streams for r in records)
    out = operator.on_batch(0, records)
    return Counter(out + operator.on_punctuation(0, CLOSED)[0])


@settings(max_examples=150, deadline=None)
@given(producers(), st.integers(0, 2**32), st.sampled_from([(10, 10), (10, 5), (7, 3)]),
       st.sampled_from([None, 0.5]))
def test_sealed_time_windows_equal_the_one_copy_reference_in_any_interleaving(streams, seed, window, snapshot_at):
    size, slide = window
    make = lambda k: OperatorReplica(TimeWindowAggregate(size, slide, (1,), SUMS), [k], sealing=AGG_SEALING)
    got = run_chain(streams, make, random.Random(seed), snapshot_at=snapshot_at)
    assert got == reference(streams, TimeWindowAggregate(size, slide, (1,), SUMS))


@settings(max_examples=150, deadline=None)
@given(producers(), st.integers(0, 2**32), st.sampled_from([(2, 2), (3, 1)]), st.sampled_from([None, 0.5]))
def test_sealed_count_windows_equal_the_one_copy_reference_in_any_interleaving(streams, seed, window, snapshot_at):
    size, slide = window
    make = lambda k: OperatorReplica(CountWindowAggregate(size, slide, (1,), SUMS), [k], sort_inputs=True,
                                     sealing=AGG_SEALING)
    got = run_chain(streams, make, random.Random(seed), snapshot_at=snapshot_at)
    from replicast.operators.sorter import Sorter
    sorter = Sorter()
    sorter.add([r for records in streams for r in records])
    expected = CountWindowAggregate(size, slide, (1,), SUMS)
    assert got == Counter(expected.on_batch(0, sorter.release(CLOSED)))


# -- keyed joins: seals prune the other side's buffer per key --------------------------------------

from replicast.operators.keyed_join import KeyedJoin, key_getter  # noqa: E402

JOIN_SEALING = KeySealing(("k",), closes=True, port_orders=((0,), (0,)), port_positions=((1,), (1,)))


def keyed_join(window=10):
    return KeyedJoin(window, (key_getter((1,)), key_getter((1,))))


def test_a_seal_on_one_side_prunes_that_key_on_the_other():
    replica = OperatorReplica(keyed_join(), [1, 1], sealing=JOIN_SEALING)
    replica.on_batch(1, 0, [(3, "a", 1.0), (3, "b", 1.0), (15, "a", 2.0)])
    assert replica.on_key_seals(0, 0, [(("a",), 12)]) == ([], [])       # left promises no a at or below 12
    assert replica.operator.buffered(1) == [(3, "b", 1.0), (15, "a", 2.0)]
    out, _ = replica.on_batch(0, 0, [(13, "a", 5.0), (9, "b", 5.0)])
    assert sorted(out) == [(9, "b", 5.0, "b", 1.0), (15, "a", 5.0, "a", 2.0)]
    replica.on_batch(1, 0, [(2, "a", 9.0)])                             # too old for any later left a
    assert (2, "a", 9.0) not in replica.operator.buffered(1)
    replica.on_batch(0, 0, [], 30)                                      # the punctuation pops the rest
    assert replica.operator.buffered(1) == [] and replica.operator.pruned == ({}, {})
    copy = OperatorReplica(keyed_join(), [1, 1], sealing=JOIN_SEALING)
    copy.restore(replica.snapshot())
    assert copy.operator.buffered(0) == replica.operator.buffered(0)


def test_the_analysis_gives_a_keyed_join_seals_on_the_ports_sealed_on_their_join_fields():
    b = QueryBuilder()
    b.stream("load", {"server": "str", "load": "float"}, seal=["server"])
    b.stream("ping", {"dst": "str", "rtt": "float"})
    b.operator("j", "join", ["load", "ping"], window_ms=5, on="load.server == ping.dst and ping.rtt > 1")
    b.operator("cross", "join", ["load", "ping"], window_ms=5)
    b.application("out", "j")
    b.application("out2", "cross")
    query = b.build()
    assert key_sealing(query, "j") == KeySealing(("server",), closes=True, port_orders=((0,), None),
                                                 port_positions=((1,), (1,)))
    assert key_sealing(query, "cross") is None


@settings(max_examples=150, deadline=None)
@given(producers(), producers(), st.integers(0, 2**32), st.sampled_from([1, 7, 25]), st.sampled_from([None, 0.5]))
def test_sealed_keyed_joins_equal_the_one_copy_reference_in_any_interleaving(left, right, seed, window, snapshot_at):
    rng = random.Random(seed)
    keys = ["k00", "k01"]
    left = [sorted((r[0], keys[hash(r[1]) % 2], r[2]) for r in records) for records in left[:1]]
    right = [sorted((r[0], keys[hash(r[1]) % 2], r[2]) for r in records) for records in right[:1]]
    sequences = [producer_items(left[0], rng)] * 2 + [producer_items(right[0], rng)] * 2
    make = lambda: OperatorReplica(keyed_join(window), [2, 2], sealing=JOIN_SEALING)
    replica, got = make(), []
    merged = interleave(sequences, rng)
    for n, (index, item) in enumerate(merged):
        if snapshot_at is not None and n == int(snapshot_at * len(merged)):
            fresh = make()
            fresh.restore(replica.snapshot())
            replica = fresh
        got += [value for kind, value in feed(replica, index // 2, index % 2, item) if kind == "r"]
    reference = keyed_join(window)
    expected = reference.on_batch(0, left[0]) + reference.on_batch(1, right[0])
    assert Counter(got) == Counter(expected)
