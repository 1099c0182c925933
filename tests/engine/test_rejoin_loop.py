"""A rebuilding replica does not ask a peer for the same snapshot over and over (docs/lifecycle.md,
"Asking again"; lifecycle rules 3 and 4).

The sim-fig1 hunt's seeds 16 and 161 (``tests/simulator/hunt.py``) crawled after a crash-restart:
the restarted node's Join replica was fed only by upstream replicas on its own node, which had
restarted too and knew their streams only from their first punctuation, while its live peer was
still behind that point.  The Join restored the peer's snapshot, could not advance (rule 4's
``again``), rebuilt, and the rebuild's probe (rule 3) asked the peer at once; its answer — the
same snapshot — made it rejoin, and so on: two whole Join states per round trip, 14,000 requests
by 470 simulated seconds.  Here the same sequence on the in-memory network.
"""

from __future__ import annotations

from replicast.engine.core.configure import placement_plan
from replicast.engine.messages import DisconnectStream
from replicast.engine.node import NodeOptions, ReplicaState
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.query import QueryBuilder
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_lifecycle import pair_query, publish

JOIN_TIMEOUT_US = 300_000


def count_query():
    q = QueryBuilder("count")
    q.stream("l", {"k": "int", "v": "int"})
    q.stream("r", {"k": "int", "v": "int"})
    q.aggregate("c", "l", group_by=["k"], window={"kind": "count", "size": 2, "slide": 2}, compute={"v": "sum(v)"})
    q.application("out", "c")
    return q.build()


def stream_between(query, place, source: str, target: str, source_index: int, target_index: int) -> StreamReplica:
    return next(s for s in placement_plan(query, place).stream_replicas
                if s.source == ReplicaId(source, source_index) and s.target == ReplicaId(target, target_index))


BEFORE = {"l": [{"punctuation": 50}, {"ts": 100, "k": 1, "v": 1}, {"ts": 150, "k": 1, "v": 2}, {"punctuation": 300}],
          "r": [{"punctuation": 50}, {"ts": 200, "k": 1, "v": 0}, {"punctuation": 300}]}
AFTER = {"l": [{"ts": 1500, "k": 2, "v": 3}, {"ts": 1550, "k": 2, "v": 4}, {"punctuation": 2000}],
         "r": [{"ts": 1600, "k": 2, "v": 0}, {"punctuation": 2000}]}
END = [{"punctuation": 5000}, {"punctuation": CLOSED}]


def items(query, batches: dict[str, list]) -> dict[str, list]:
    """``batches`` with only the fields of ``query``'s streams (the pair query has no ``v``)."""
    return {stream: [{f: v for f, v in item.items() if f in ("ts", "punctuation") or f in query.streams[stream].schema.names}
                     for item in batch] for stream, batch in batches.items()}


def reference(query) -> list:
    net = MemoryNetwork(query, {"l": ["a"], "r": ["a"], **{op: ["a"] for op in query.operators}, "out": ["d"]}, seed=1)
    net.run()
    for batches in (BEFORE, AFTER):
        for stream, batch in items(query, batches).items():
            publish(net, stream, batch)
            net.run()
    for stream in ("l", "r"):
        publish(net, stream, END)
    net.run()
    return net.delivered["out"]


def restart_behind_the_peer(query, name: str) -> tuple[MemoryNetwork, int]:
    """``name#0`` on ``a`` hears only ``l#0`` and ``r#0`` on ``a``, ``name#1`` on ``b`` only ``l#1``
    and ``r#1`` on ``c`` (garbage collection took the crossed stream replicas).  ``a`` crashes and
    restarts cut off from ``c``: its entry points have no reachable peer and know their streams
    only from their first punctuation (2000), while ``c``'s sources are late — ``name#1`` is LIVE
    at 300.  Returns the network after three join time-outs, and how many snapshots ``name#1``
    gave meanwhile; then ``c``'s sources catch up and every stream closes."""
    place = {"l": ["a", "c"], "r": ["a", "c"], name: ["a", "b"], "out": ["d"]}
    net = MemoryNetwork(query, place, seed=1, options=NodeOptions(join_timeout_us=JOIN_TIMEOUT_US))
    net.run()
    for stream, batch in items(query, BEFORE).items():
        publish(net, stream, batch)
    net.run()
    crossed = [stream_between(query, place, s, name, i, 1 - i) for s in ("l", "r") for i in (0, 1)
               if any(t.source.name == s for t in placement_plan(query, place).stream_replicas)]
    for stream in crossed:
        ends = {place[stream.source.name][stream.source.index], place[name][stream.target.index]}
        net.control({node: [DisconnectStream(stream)] for node in ends})
    net.run()

    net.kill("a")
    net.cut_link("a", "c")
    net.restart("a")
    # The restarted node's own configuration has every stream replica; the coordinator's view does not.
    net.control({"a": [DisconnectStream(s) for s in crossed if s.target.index == 0]})
    for stream, batch in items(query, AFTER).items():
        net.publish("a", stream, batch)
    for _ in range(30):                              # three join time-outs; each run() is bounded
        net.run(400)
        net.tick(JOIN_TIMEOUT_US // 10)
    given = net.cores["b"].counters["snapshots_given"]

    net.restore_link("a", "c")                       # c's sources catch up: name#1 moves past 2000
    for stream, batch in items(query, AFTER).items():
        net.publish("c", stream, batch)
    for stream in ("l", "r"):
        publish(net, stream, END)
    for _ in range(10):
        net.run()
        net.tick(JOIN_TIMEOUT_US)
    return net, given


def test_a_rebuilt_join_does_not_loop_on_a_peer_snapshot_it_cannot_advance_from():
    """The Join restores ``j#1``'s snapshot once, cannot advance, rebuilds and becomes LIVE at its
    horizon on its own; before, ``j#1`` gave a snapshot every round trip (39 here)."""
    query = pair_query()
    net, given = restart_behind_the_peer(query, "j")
    assert given == 1, f"j#1 gave {given} snapshots after one restart"
    assert net.delivered["out"] == reference(query)
    assert net.cores["a"].hosted[ReplicaId("j", 0)].state is ReplicaState.LIVE


def test_a_rebuilt_count_window_asks_again_only_once_its_peer_moved():
    """A count window never reaches a horizon: it keeps asking its peer every join time-out, but
    skips an answer no further than the snapshot it could not advance from (``snapshots_skipped``)."""
    query = count_query()
    net, given = restart_behind_the_peer(query, "c")
    assert 1 <= given <= 6, f"c#1 gave {given} snapshots after one restart"
    assert net.cores["a"].counters["snapshots_skipped"] >= 1
    assert net.delivered["out"] == reference(query)
