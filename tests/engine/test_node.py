"""NodeCore on an in-memory network: replication transparency with crashes, cuts and replays."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from replicast.engine.event_file import read_events
from replicast.engine.messages import Batch, Heartbeat, StatisticsRequest, Statistics
from replicast.engine.node import DeadLetter, NodeCore, NodeOptions, ProtocolError, configure
from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.engine.wire import PackedRecords, decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork
from tests.engine.started import started_core as started

ROOT = Path(__file__).resolve().parents[2]
QUERY = load_query(ROOT / "examples/fig1.toml")
STREAMS = read_events(ROOT / "examples/fig1-events.jsonl", QUERY)
P = 1_000_000


def placement(k: int, nodes: list[str]) -> dict[str, list[str]]:
    """Replica i of the j-th logical node on nodes[(i + j) % n]; applications on the last node."""
    out, names = {}, [*QUERY.streams, *QUERY.operators]
    for j, name in enumerate(names):
        out[name] = [nodes[(i + j) % (len(nodes) - 1)] for i in range(k)]
    for app in QUERY.applications:
        out[app] = [nodes[-1]]
    return out


def source_messages(query, streams) -> list[tuple[int, str, dict]]:
    """Every stream's records as source items in time order, each preceded by the punctuation of
    the second before it when that second is new: ``(ts, stream, item)``."""
    messages = []
    for stream, records in streams.items():
        names = query.streams[stream].schema.names
        last = None
        for record in records:
            boundary = (record[0] // P) * P - 1
            if last is None or boundary > last:
                messages.append((record[0], stream, {"punctuation": boundary}))
                last = boundary
            messages.append((record[0], stream, {"ts": record[0], **dict(zip(names, record[1:]))}))
    return sorted(messages, key=lambda m: m[0])


def publish_all(net: MemoryNetwork, place, kill: str | None = None, cut: tuple | None = None, steps_between: int = 3):
    """Interleave publication of every stream with network steps; optionally kill/cut halfway."""
    messages = source_messages(QUERY, STREAMS)
    half = len(messages) // 2
    for i, (ts, stream, item) in enumerate(messages):
        if i == half and kill:
            net.kill(kill)
        if i == half and cut:
            net.cut_link(*cut)
        if cut and i == half + 200:
            net.restore_link(*cut)
        for node in place[stream]:
            if node not in net.dead:
                net.publish(node, stream, [item])
        net.run(steps_between)
    for stream in STREAMS:
        for node in place[stream]:
            if node not in net.dead:
                net.publish(node, stream, [{"punctuation": CLOSED}])
    net.run()


def reference():
    return replay(QUERY, STREAMS, replicas=1, punctuation_us=P).outputs


def assert_same(net: MemoryNetwork):
    expected = reference()
    for app, spec in QUERY.applications.items():
        got = net.delivered[app]
        assert Counter(got) == Counter(expected[app]), app
        if spec.ordered:
            assert got == expected[app], app
    assert sum(map(len, expected.values())) > 50


NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


@pytest.mark.parametrize("seed", [0, 1])
def test_k2_six_nodes_equals_reference(seed):
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=seed)
    publish_all(net, place)
    assert_same(net)


def started_core(place: dict, name: str) -> tuple[NodeCore, int]:
    """The core of ``place[name][0]`` started alone (tests/engine/started.py)."""
    return started(QUERY, place, place[name][0])


def upstream_node(core: NodeCore, stream: StreamReplica) -> str:
    return core.inbound[stream].node


def test_byte_identical_batches_from_replicas_are_taken_without_decoding():
    """Two upstream replicas send the same batch as the same bytes (wire rule 4): the second copy
    is recognised by its bytes and never decoded (operators/dedup.py runs); the first passes once."""
    place = placement(2, ["n1", "n2", "n3"])
    core, now = started_core(place, "load")
    target = next(r for r in core.hosted if r.name == "load")
    records = [(ts, "s1", 0.5) for ts in range(100, 140)]
    streams = [StreamReplica(ReplicaId("cpu_a", i), target, 0) for i in range(2)]
    copies = [decode(encode(Batch(stream, 0, 0, records, None))[4:]) for stream in streams]
    for stream, message in zip(streams, copies):
        core.receive(upstream_node(core, stream), message, now=now)
    assert core.counters["known_batches"] == 1
    assert copies[1].records._records is None          # the second copy's bytes were never decoded
    assert core.hosted[target].records_out == len(records)


def test_record_bytes_that_are_not_records_are_counted_not_fatal():
    place = placement(1, ["n1", "n2", "n3"])
    core, now = started_core(place, "load")
    good = next(s for s, i in core.inbound.items() if s.target.name == "load" and i.node != core.name)
    target, src = good.target, upstream_node(core, good)
    for garbage in (b"\x92\x01\x02", b"\x91\x90", b"\x91\xc1"):       # ints, an empty record, bad msgpack
        core.receive(src, Batch(good, 0, 0, PackedRecords(garbage), None), now=now)
    assert core.counters["malformed_batches"] == 3
    assert core.hosted[target].records_in == 0
    # each is a protocol error: the driver drops the link, and the stream resumes where it was
    assert [type(e) for e in core.events()] == [ProtocolError] * 3
    core.on_peer_down(src, now=now)
    core.on_peer_up(src, now=now)
    resumes = [m for dst, m in core.messages_to_send() if dst == src and getattr(m, "stream", None) == good]
    assert [(type(m).__name__, m.epoch, m.offset) for m in resumes] == [("Resume", 0, 0)]


class CorruptingNetwork(MemoryNetwork):
    """Replaces the ``nth`` batch with records that crosses a link by one whose record bytes do not
    decode (same stream, epoch and offset), and drops a link on a ProtocolError, as both runtimes'
    drivers do."""

    nth, seen, corrupted = 25, 0, 0

    def deliver_one(self, src: str, dst: str) -> None:
        queue = self.links[(src, dst)]
        message = decode(queue[0][4:])
        if isinstance(message, Batch) and len(message.records):
            self.seen += 1
            if self.seen == self.nth:
                self.corrupted += 1
                queue[0] = encode(Batch(message.stream, message.epoch, message.offset,
                                        PackedRecords(b"\x92\x01\x02"), message.punctuation))
        before = len(self.events)
        super().deliver_one(src, dst)
        if any(isinstance(e, ProtocolError) for n, e in self.events[before:] if n == dst):
            self.cut_link(src, dst)
            self.restore_link(src, dst)


@pytest.mark.parametrize("nth", [5, 25, 60])
def test_a_malformed_batch_does_not_silence_its_stream_replica(nth):
    """Receiver rule 3 (engine/core/receiver.py): a malformed batch was once dropped without
    advancing the offset, the next batch looked like a gap, and the stream replica's punctuations
    were ignored for ever (150 records and 0 punctuations delivered; windows downstream never closed).  Now it is a protocol error: the
    link drops, the stream resumes from what the receiver holds, and with one replica of everything
    (the only path crosses it) every application still gets exactly the reference."""
    place = placement(1, ["n1", "n2", "n3"])
    net = CorruptingNetwork(QUERY, place, seed=7)
    net.nth = nth
    publish_all(net, place)
    assert net.corrupted == 1 and sum(c.counters["malformed_batches"] for c in net.cores.values()) == 1
    assert_same(net)


def test_crash_of_a_node_changes_nothing():
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=3)
    publish_all(net, place, kill="n2")
    assert_same(net)


def test_cut_link_is_replayed_without_duplicates():
    # k=1: the only path crosses the cut, so the output is complete only if the replay works,
    # and duplicate-free only if receivers skip the offsets they already hold.
    place = placement(1, ["n1", "n2", "n3"])
    net = MemoryNetwork(QUERY, place, seed=5)
    publish_all(net, place, cut=("n1", "n2"), steps_between=1)
    assert_same(net)


def test_acks_trim_the_output_log():
    place = placement(2, NODES)
    net = MemoryNetwork(QUERY, place, seed=2)
    publish_all(net, place)
    net.tick(NodeOptions().heartbeat_us)          # acks left waiting for other traffic go on their own
    net.run()
    retained = [h.log.__len__() for core in net.cores.values() for h in core.hosted.values()]
    assert max(retained) <= 1   # everything acknowledged up to the CLOSED punctuation


def test_dead_letters_late_malformed_unknown():
    core = NodeCore("n1", QUERY, now=0)
    core.apply(configure(QUERY, placement(1, ["n1", "n2"]), "n1"), now=0)
    core.on_source("cpu_a", b'[{"punctuation": 100}, {"ts": 50, "server": "a", "load": 0.5}]', now=1)
    core.on_source("cpu_a", b'{"ts": 200, "server": "a"}', now=1)
    core.on_source("cpu_a", b'\xc1\xff not anything', now=1)
    core.on_source("nope", b'{"ts": 1}', now=1)
    reasons = [e.reason.split(":")[0] for e in core.events() if isinstance(e, DeadLetter)]
    assert reasons == ["late", "malformed", "malformed", "unknown stream 'nope' (the query's streams"]
    assert core.statistics()["replicas"]["cpu_a#0"]["late"] == 1


def test_batches_for_unknown_or_malformed_streams_are_counted_not_fatal():
    place = placement(1, ["n1", "n2", "n3"])
    core, now = started_core(place, "load")
    stream = StreamReplica(ReplicaId("nope", 0), ReplicaId("load", 0), 0)
    core.receive("n1", Batch(stream, 0, 0, [(1, "a")], None), now=now)
    target = next(r for r in core.hosted if r.name == "load")
    good = StreamReplica(ReplicaId("cpu_a", 0), target, 0)
    core.receive(upstream_node(core, good), Batch(good, 0, 0, [(1, "a")], None), now=now)    # wrong width
    assert core.counters["stale_batches"] == 1 and core.counters["malformed_batches"] == 1


def test_heartbeat_echo_and_statistics():
    core = NodeCore("n1", QUERY, NodeOptions(heartbeat_us=10, peer_timeout_us=100), now=0)
    core.on_peer_up("n2", now=0)
    core.handle_timer(now=0)
    assert core.messages_to_send() == [("n2", Heartbeat(0))]
    core.receive("n2", Heartbeat(5, 0), now=7)
    assert core.rtt_us == {"n2": 7}
    core.receive("n2", StatisticsRequest(), now=8)
    [(dst, stats)] = core.messages_to_send()
    assert dst == "n2" and isinstance(stats, Statistics) and stats.data["rtt_us"] == {"n2": 7}
    core.handle_timer(now=200)
    assert any(type(e).__name__ == "PeerTimedOut" for e in core.events())


def test_entry_stamped_takeover_keeps_every_record_once():
    query = load_query(ROOT / "examples/fig1.toml")
    modes = {s: "entry" for s in query.streams}
    place = placement(2, ["n1", "n2", "n3"])
    net = MemoryNetwork(query, place, seed=9, options=NodeOptions(punctuation_us=1000, heartbeat_us=1000, peer_timeout_us=5000,
                                                                  entry_modes=modes), now=10_000)
    sent = Counter()
    for i in range(60):
        for stream in ("cpu_a", "cpu_b", "cpu_c"):
            item = {"server": stream[-1], "load": float(i)}
            sent[(stream[-1], float(i))] += 1
            for node in place[stream]:
                if node not in net.dead:
                    net.publish(node, stream, [item])
        if i == 30:
            net.kill(place["cpu_a"][0])          # the stamper of cpu_a dies
        net.tick(400)
        net.run(20)
    for _ in range(10):
        net.tick(1000)
        net.run()
    load_replicas = [h for c in net.cores.values() if c.name not in net.dead
                     for h in c.hosted.values() if h.replica.name == "load"]
    assert load_replicas
    # every live replica of the union saw each raw record exactly once, stamped once
    for hosted in load_replicas:
        assert hosted.records_out == sum(sent.values())
