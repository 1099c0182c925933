"""The consumer library's pure part (replicast.consume_core): Alg. 1 on output ids over sink
replicas, orders, and the resumable position (docs/consume.md)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from replicast.consume_core import ExactlyOnce, Order, Position
from replicast.engine.core.events import Delivered
from replicast.engine.sinks import OutputIds, mqtt_items
from replicast.operators.record import CLOSED

NAMES = ("server", "load")


def reference(seed: int, n: int = 300):
    """An application's delivered stream: records with repeated values and ts, punctuations."""
    rng = random.Random(seed)
    records, ts = [], 0
    for _ in range(n):
        ts += rng.choice((0, 0, 1, 2))
        records.append((ts, rng.choice("abc"), float(rng.randrange(3))))
    return records


def sink_payloads(records, rng: random.Random, *, restart_at: int | None = None) -> list[bytes]:
    """What one sink replica publishes: its own batching, punctuations between ts; restarted (ids
    from scratch, everything above the punctuation before ``restart_at`` delivered again) if asked."""
    payloads, ids, i = [], OutputIds("alerts"), 0
    last_p = None
    while i < len(records):
        j = min(len(records), i + rng.randint(1, 8))
        batch = records[i:j]
        p = None
        if j < len(records) and records[j][0] > batch[-1][0] and rng.random() < 0.5:
            p = batch[-1][0]
        event = Delivered("alerts", batch, p, 0)
        payloads.append(mqtt_items(NAMES, event, ids.ids(event)))
        last_p = p if p is not None else last_p
        i = j
        if restart_at is not None and i >= restart_at and last_p is not None:
            restart_at = None
            ids = OutputIds("alerts")              # a new incarnation: above its adopted frontier again
            i = next(k for k, r in enumerate(records) if r[0] > last_p)
    payloads.append(mqtt_items(NAMES, Delivered("alerts", [], CLOSED, 0)))
    return payloads


def interleave(rng, *streams):
    """A random merge keeping each stream's order (one broker's per-publisher order)."""
    queues, out = [list(s) for s in streams], []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        out.append(q.pop(0))
    return out


def as_tuples(items):
    return [(i["ts"], i["server"], i["load"]) for i in items]


def by_items(consumer: ExactlyOnce, payload: bytes) -> list[dict]:
    return consumer.offer(json.loads(payload))


def by_payload(consumer: ExactlyOnce, payload: bytes) -> list[dict]:
    """What ``replicast.consume`` does: byte-identical payloads are dropped undecoded."""
    return consumer.offer_payload(payload, json.loads)


FEEDS = st.sampled_from([by_items, by_payload])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), restart=st.booleans(), order=st.sampled_from(list(Order)), feed=FEEDS)
def test_two_sink_replicas_give_each_record_exactly_once(seed, restart, order, feed):
    rng = random.Random(seed)
    records = reference(seed)
    a = sink_payloads(records, rng)
    b = sink_payloads(records, rng, restart_at=rng.randrange(len(records)) if restart else None)
    consumer = ExactlyOnce(order)
    got = [r for payload in interleave(rng, a, b) for r in feed(consumer, payload)]
    if order is Order.TIMESTAMP:
        assert [r["ts"] for r in got] == sorted(r["ts"] for r in got)
    assert sorted(as_tuples(got)) == sorted(records)
    assert consumer.frontier == CLOSED and consumer.remembered == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.sampled_from(list(Order)), feed=FEEDS)
def test_a_consumer_restarted_from_its_position_neither_skips_nor_repeats(seed, order, feed):
    rng = random.Random(seed)
    records = reference(seed)
    stream = interleave(rng, sink_payloads(records, rng), sink_payloads(records, rng))
    cut = rng.randrange(len(stream))
    first = ExactlyOnce(order)
    got = [r for payload in stream[:cut] for r in feed(first, payload)]
    saved = Position.from_json(first.position().to_json())
    # restarted: the broker sends again some of what the first incarnation had seen (QoS 1)
    again = ExactlyOnce(order, saved)
    got += [r for payload in stream[max(0, cut - 5):] for r in feed(again, payload)]
    assert sorted(as_tuples(got)) == sorted(records)


def test_the_first_copy_wins_and_below_the_frontier_is_a_copy():
    ids = OutputIds("alerts")
    event = Delivered("alerts", [(5, "a", 1.0), (5, "a", 1.0)], None, 0)
    payload = json.loads(mqtt_items(NAMES, event, ids.ids(event)))
    consumer = ExactlyOnce()
    assert len(consumer.offer(payload)) == 2            # two occurrences of an equal record
    assert consumer.offer(payload) == [] and consumer.copies == 2
    assert consumer.offer([{"punctuation": 5}]) == [] and consumer.remembered == 0
    assert consumer.offer(payload) == [] and consumer.late == 2


def test_a_byte_identical_payload_is_dropped_without_decoding():
    ids = OutputIds("alerts")
    first = Delivered("alerts", [(5, "a", 1.0), (6, "b", 2.0)], 6, 0)
    second = Delivered("alerts", [(7, "a", 1.0)], None, 0)
    a, b = (mqtt_items(NAMES, e, ids.ids(e)) for e in (first, second))
    decoded = []

    def decode(payload):
        decoded.append(payload)
        return json.loads(payload)
    consumer = ExactlyOnce(covered_bytes=len(a))
    assert len(consumer.offer_payload(a, decode)) == 2
    assert len(consumer.offer_payload(b, decode)) == 1
    assert consumer.offer_payload(a, decode) == [] and consumer.offer_payload(b, decode) == []
    assert decoded == [a, b] and consumer.copy_payloads == 2
    consumer.offer_payload(mqtt_items(NAMES, Delivered("alerts", [], 7, 0)), decode)   # b passed: covered, a forgotten
    assert consumer.offer_payload(b, decode) == [] and decoded[-1] != b
    assert consumer.offer_payload(a, decode) == [] and decoded[-1] == a and consumer.late == 2


def test_payloads_of_records_without_ids_are_never_skipped():
    consumer, payload = ExactlyOnce(), b'[{"ts": 1, "server": "a"}]'
    assert len(consumer.offer_payload(payload, json.loads)) == 1
    assert len(consumer.offer_payload(payload, json.loads)) == 1 and consumer.unidentified == 2


def test_records_without_ids_pass_and_are_counted():
    consumer = ExactlyOnce()
    assert consumer.offer([{"ts": 1, "server": "a"}, "junk", {"punctuation": "x"}]) == [{"ts": 1, "server": "a"}]
    assert consumer.unidentified == 1


@pytest.mark.parametrize("text", ["", "[]", '{"frontier": "1", "ids": []}', '{"frontier": 1, "ids": [3]}'])
def test_a_bad_position_is_named(text):
    with pytest.raises(ValueError, match="where.json: not a consumer position"):
        Position.from_json(text, "where.json")


def test_the_consumer_core_is_pure():
    """DESIGN.md §3: the filter, ordering and position read no clock and do no I/O."""
    import ast
    from pathlib import Path

    from tests.test_purity import FORBIDDEN
    path = Path(__file__).resolve().parents[2] / "replicast" / "consume_core.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & (FORBIDDEN | {"os", "aiomqtt", "pathlib"}), imported
    assert "open(" not in path.read_text(encoding="utf-8")


def test_the_command_names_a_bad_position_file(tmp_path, capsys):
    from replicast.engine.cli import main
    position = tmp_path / "alerts.pos"
    position.write_text('{"frontier": "x"}')
    assert main(["consume", "alerts", "--position", str(position)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("replicast consume: error:") and str(position) in err and len(err.splitlines()) == 1
    assert main(["consume", "alerts", "--broker", "http://x"]) == 2
    assert "broker must be" in capsys.readouterr().err
