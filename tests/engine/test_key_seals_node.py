"""Seals per key in the node (engine/core/key_seals.py, engine/entry.py): the wire message, what an
entry point accepts, and a keyed aggregate closing a key's windows while another producer is held up."""

from __future__ import annotations

from collections import Counter

import pytest

from replicast.engine.entry import EntryPoint
from replicast.engine.messages import KeySeals
from replicast.engine.query_file import parse_query
from replicast.engine.replay import replay
from replicast.engine.wire import WireError, decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork

S = StreamReplica(ReplicaId("cpu", 1), ReplicaId("load", 0), 0)

QUERY = """
[[streams]]
name = "cpu_a"
fields = { server = "str", load = "float" }
seal = ["server"]

[[streams]]
name = "cpu_b"
fields = { server = "str", load = "float" }
seal = ["server"]

[[streams]]
name = "plain"
fields = { server = "str", load = "float" }

[[operators]]
name = "cpu"
kind = "union"
inputs = ["cpu_a", "cpu_b"]

[[operators]]
name = "load"
kind = "aggregate"
input = "cpu"
group_by = ["server"]
window = { kind = "time", size_ms = 10 }
compute = { n = "count()", avg = "avg(load)" }

[[applications]]
name = "out"
input = "load"

[[applications]]
name = "raw"
input = "plain"
"""


def test_key_seals_cross_the_wire_and_bad_ones_are_refused():
    message = KeySeals(S, 7, 42, ((("h1",), 10), (("h2", 3, 1.5, True), 11)))
    assert decode(encode(message)[4:]) == message
    for seals in ([["h1", 10]], [[[], 10]], [[[{"a": 1}], 10]], [[["h1"], "10"]], "x"):
        body = encode(message)[4:]
        import msgpack
        fields = list(msgpack.unpackb(body))
        fields[-1] = seals
        with pytest.raises(WireError):
            decode(msgpack.packb(fields))


def entry(stream="cpu_a", mode="source"):
    return EntryPoint(parse_query(QUERY, "q.toml").streams[stream], mode)


def test_an_entry_point_takes_seals_behind_its_records_and_refuses_records_behind_them():
    e = entry()
    segments, rejects = e.on_items([{"ts": 5, "server": "a", "load": 1.0}, {"punctuation": 8, "key": {"server": "a"}},
                                    {"ts": 7, "server": "a", "load": 1.0}, {"ts": 7, "server": "b", "load": 1.0},
                                    {"punctuation": 8, "key": {"server": "a"}}], now=0, stamping=False)
    assert segments == [([(5, "a", 1.0), (7, "b", 1.0)], None)]
    assert e.take_seals() == [(("a",), 8)] and e.take_seals() == []
    assert [reason for reason, _ in rejects] == ["late: ts 7 is not after the seal of its key {'server': 'a'}"]
    e.on_items([{"punctuation": 20}], now=0, stamping=False)
    assert e.key_seals.seals == {}                                   # the punctuation covers it now


@pytest.mark.parametrize("stream, mode, item, reason", [
    ("plain", "source", {"punctuation": 5, "key": {"server": "a"}}, "declares none"),
    ("cpu_a", "entry", {"punctuation": 5, "key": {"server": "a"}}, "is entry-stamped"),
    ("cpu_a", "source", {"punctuation": 5, "key": {"host": "a"}}, "exactly the fields ['server']"),
    ("cpu_a", "source", {"punctuation": 5, "key": {"server": 3}}, "'server' must be str, got 3"),
    ("cpu_a", "source", {"punctuation": "5", "key": {"server": "a"}}, "bad seal punctuation '5'"),
])
def test_a_bad_seal_is_a_one_line_reject_naming_what_is_wrong(stream, mode, item, reason):
    e = entry(stream, mode)
    _, rejects = e.on_items([item], now=0, stamping=False)
    assert len(rejects) == 1 and reason in rejects[0][0] and f"stream '{stream}'" in rejects[0][0]
    assert e.malformed == 1 and e.take_seals() == []


def publish(net, node, stream, server, ts, sealed=True):
    items = [{"ts": ts, "server": server, "load": 0.5}, {"punctuation": ts}]
    net.publish(node, stream, items + ([{"punctuation": ts, "key": {"server": server}}] if sealed else []))


def test_a_key_closes_while_another_producer_is_held_up_and_the_output_is_the_reference():
    query = parse_query(QUERY, "q.toml")
    placement = {"cpu_a": ["a1", "a2"], "cpu_b": ["b1"], "plain": ["b1"], "cpu": ["r1", "r2"], "load": ["r1", "r2"],
                 "out": ["r1"], "raw": ["b1"]}
    net = MemoryNetwork(query, placement, seed=4)
    net.run()
    net.congest("b1", "r1"), net.congest("b1", "r2")                 # cpu_b's producer is far away
    inputs = {"cpu_a": [], "cpu_b": [], "plain": []}
    for t in range(1_000, 40_000, 3_000):                           # µs: 10-ms windows hold 3 or 4 each
        for node in ("a1", "a2"):
            publish(net, node, "cpu_a", "a", t)
        publish(net, "b1", "cpu_b", "b", t + 1)
        inputs["cpu_a"].append((t, "a", 0.5))
        inputs["cpu_b"].append((t + 1, "b", 0.5))
    net.run()
    early = list(net.delivered["out"])
    assert sorted(early) == [(10_000, "a", 3, 0.5), (20_000, "a", 4, 0.5), (30_000, "a", 3, 0.5)]   # b holds nothing of a back
    net.decongest("b1", "r1"), net.decongest("b1", "r2")
    for node, stream in (("a1", "cpu_a"), ("a2", "cpu_a"), ("b1", "cpu_b"), ("b1", "plain")):
        net.publish(node, stream, [{"punctuation": CLOSED}])
    net.run()
    reference = replay(query, inputs, replicas=1).outputs["out"]
    assert Counter(net.delivered["out"]) == Counter(reference)
    stats = [net.cores[n].statistics() for n in ("r1", "r2")]
    assert all(s["key_seals"] > 0 for s in stats)
    assert sum(r["late_for_seal"] for s in stats for r in s["replicas"].values()) == 0


def test_a_seal_ahead_of_records_the_receiver_lacks_is_dropped():
    query = parse_query(QUERY, "q.toml")
    placement = {"cpu_a": ["a1"], "cpu_b": ["b1"], "plain": ["b1"], "cpu": ["r1"], "load": ["r1"], "out": ["r1"],
                 "raw": ["b1"]}
    net = MemoryNetwork(query, placement)
    net.run()
    core = net.cores["r1"]
    stream = next(s for s in core.inbound if s.target.name == "load")
    inbound = core.inbound[stream]
    core.receive("r1", KeySeals(stream, inbound.epoch, inbound.next + 5, ((("a",), 99),)), now=net.now)
    assert core.statistics()["stale_key_seals"] == 1 and core.statistics()["key_seals"] == 0


@pytest.mark.pure_python        # patches a method of a class the native build compiles
def test_replay_carries_seals_through_replicas_and_crashes_and_checks_against_the_unsealed_reference(monkeypatch):
    from pathlib import Path

    from replicast.engine.event_file import read_events
    from replicast.operators.aggregate import TimeWindowAggregate
    from replicast.engine.query_file import load_query

    examples = Path(__file__).resolve().parents[2] / "examples"
    query = load_query(examples / "keyed-seal.toml")
    inputs = read_events(examples / "keyed-seal-events.jsonl", query)
    closed = []
    original = TimeWindowAggregate.on_key_seal
    monkeypatch.setattr(TimeWindowAggregate, "on_key_seal", lambda self, *a: _count(original, self, a, closed))
    reference = Counter(replay(query, inputs, replicas=1, punctuation_us=1_000_000).outputs["per_server"])
    assert not closed and len(reference) == 600                  # the reference run ignores seals
    for seed in range(3):
        result = replay(query, inputs, replicas=3, seed=seed, crash=2, punctuation_us=1_000_000)
        assert Counter(result.outputs["per_server"]) == reference, seed
    assert len(closed) > 1000                                     # most windows were closed by a seal


def _count(original, operator, args, closed):
    out = original(operator, *args)
    closed.extend(out)
    return out


@pytest.mark.parametrize("kind", ["load", "cpu"])
def test_a_replica_that_joins_mid_stream_and_outlives_its_donor_gives_the_reference(kind):
    """A new replica of the aggregate (or the union) takes a snapshot, seals included, from a live peer
    while seals flow; then the original dies: the output is still the reference's."""
    query = parse_query(QUERY, "q.toml")
    placement = {"cpu_a": ["a1"], "cpu_b": ["b1"], "plain": ["b1"], "cpu": ["u1"], "load": ["r1"], "out": ["app"],
                 "raw": ["b1"]}
    net = MemoryNetwork(query, placement, seed=2, spare=("spare",))
    original = placement[kind][0]
    net.run()
    inputs = {"cpu_a": [], "cpu_b": [], "plain": []}
    for n, t in enumerate(range(1_000, 60_000, 1_500)):
        publish(net, "a1", "cpu_a", "a", t)
        publish(net, "b1", "cpu_b", "b", t + 500)
        inputs["cpu_a"].append((t, "a", 0.5))
        inputs["cpu_b"].append((t + 500, "b", 0.5))
        net.run(max_steps=5)
        if n == 12:
            net.add_replica(kind, "spare")
        if n == 28:
            net.run()
            net.kill(original)
    for node, stream in (("a1", "cpu_a"), ("b1", "cpu_b"), ("b1", "plain")):
        net.publish(node, stream, [{"punctuation": CLOSED}])
    net.run()
    reference = replay(query, inputs, replicas=1).outputs["out"]
    assert Counter(net.delivered["out"]) == Counter(reference)
    assert net.cores["spare"].counters["snapshots_taken"] == 1
    assert net.cores["spare"].statistics()["key_seals"] > 0


@pytest.mark.pure_python        # patches a method of a class the native build compiles
def test_replay_of_sealed_count_windows_releases_each_keys_sorted_prefix_and_gives_the_reference(monkeypatch):
    from pathlib import Path

    from replicast.engine.event_file import read_events
    from replicast.operators.sorter import Sorter

    examples = Path(__file__).resolve().parents[2] / "examples"
    text = (examples / "keyed-seal.toml").read_text().replace(
        'window = { kind = "time", size_ms = 1000 }', 'window = { kind = "count", size = 3, slide = 2 }')
    query = parse_query(text, "count-seal.toml")
    assert query.coordination.by_name["load"].coordination.value == "seal per key" and query.order_sensitive("load")
    inputs = read_events(examples / "keyed-seal-events.jsonl", query)
    released = []
    original = Sorter.release_key
    monkeypatch.setattr(Sorter, "release_key", lambda self, *a: _count(original, self, a, released))
    reference = Counter(replay(query, inputs, replicas=1, punctuation_us=1_000_000).outputs["per_server"])
    assert len(reference) == 290                                   # 29 windows of 3 (slide 2) per server
    for seed in range(3):
        result = replay(query, inputs, replicas=2, seed=seed, crash=1, punctuation_us=1_000_000)
        assert Counter(result.outputs["per_server"]) == reference, seed
    assert len(released) > 500


JOIN = """
[[streams]]
name = "load"
fields = { server = "str", load = "float" }
seal = ["server"]

[[streams]]
name = "ping"
fields = { dst = "str", rtt = "float" }
seal = ["dst"]

[[operators]]
name = "j"
kind = "join"
inputs = ["load", "ping"]
window_ms = 500
on = "load.server == ping.dst"

[[applications]]
name = "out"
input = "j"
"""


@pytest.mark.pure_python        # patches a method of a class the native build compiles
def test_replay_of_a_join_sealed_on_its_key_prunes_per_key_and_gives_the_reference(monkeypatch):
    import random

    from replicast.operators.keyed_join import KeyedJoin

    query = parse_query(JOIN, "join-seal.toml")
    rng = random.Random(1)
    inputs = {"load": [(i * 50_000 + 1, rng.choice("abc"), 0.5) for i in range(200)],
              "ping": [(i * 50_000 + 7, rng.choice("abc"), 1.0) for i in range(200)]}
    pruned = []
    original = KeyedJoin.on_key_seal
    monkeypatch.setattr(KeyedJoin, "on_key_seal",
                        lambda self, port, key, p: pruned.append(key) or original(self, port, key, p))
    reference = Counter(replay(query, inputs, replicas=1, punctuation_us=1_000_000).outputs["out"])
    assert sum(reference.values()) > 1000
    for seed in range(3):
        result = replay(query, inputs, replicas=3, seed=seed, crash=2, punctuation_us=1_000_000)
        assert Counter(result.outputs["out"]) == reference, seed
    assert len(pruned) > 100
