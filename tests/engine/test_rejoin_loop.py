"""A rebuilding replica does not ask a peer for the same snapshot over and over (docs/lifecycle.md,
"Asking again"; lifecycle rules 3 and 4).

The sim-fig1 hunt's seeds 16 and 161 (``tests/simulator/hunt.py``) crawled after a crash-restart:
the restarted node's Join replica was fed only by upstream replicas on its own node, which had
restarted too and knew their streams only from their first punctuation, while its live peer was
still behind that point.  The Join restored the peer's snapshot, could not advance (rule 4's
``again``), rebuilt, and the rebuild's probe (rule 3) asked the peer at once; its answer — the
same snapshot — made it rejoin, and so on: two whole Join states per round trip, 14,000 requests
by 470 simulated seconds.  Here the same sequence on the in-memory network, with the pair query.
"""

from __future__ import annotations

from replicast.engine.core.configure import placement_plan
from replicast.engine.messages import DisconnectStream
from replicast.engine.node import NodeOptions, ReplicaState
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_lifecycle import pair_query, publish

JOIN_TIMEOUT_US = 300_000


def stream_between(query, place, source: str, target: str, source_index: int, target_index: int) -> StreamReplica:
    return next(s for s in placement_plan(query, place).stream_replicas
                if s.source == ReplicaId(source, source_index) and s.target == ReplicaId(target, target_index))


def test_a_rebuilt_join_does_not_loop_on_a_peer_snapshot_it_cannot_advance_from():
    """``j#0`` on ``a`` hears only ``l#0`` and ``r#0`` on ``a``, ``j#1`` on ``b`` only ``l#1`` and
    ``r#1`` on ``c`` (garbage collection took the crossed stream replicas).  ``a`` crashes and
    restarts cut off from ``c``: its entry points have no reachable peer and know their streams
    only from their first punctuation (2000), while ``c``'s sources are late — ``j#1`` is LIVE at
    300.  Over three join time-outs ``j#1`` may give a snapshot at most a few times (the first
    join, then one probe a join time-out); before the fix it gave one every round trip (hundreds
    here: 39).  Once ``c``'s sources catch up, the output is exactly the two pairs."""
    query = pair_query()
    place = {"l": ["a", "c"], "r": ["a", "c"], "j": ["a", "b"], "out": ["d"]}
    net = MemoryNetwork(query, place, seed=1, options=NodeOptions(join_timeout_us=JOIN_TIMEOUT_US))
    net.run()
    publish(net, "l", [{"punctuation": 50}, {"ts": 100, "k": 1}, {"punctuation": 300}])
    publish(net, "r", [{"punctuation": 50}, {"ts": 200, "k": 1}, {"punctuation": 300}])
    net.run()
    crossed = [stream_between(query, place, s, "j", i, 1 - i) for s in ("l", "r") for i in (0, 1)]
    for stream in crossed:
        ends = {place[stream.source.name][stream.source.index], place["j"][stream.target.index]}
        net.control({node: [DisconnectStream(stream)] for node in ends})
    net.run()

    net.kill("a")
    net.cut_link("a", "c")
    net.restart("a")
    # The restarted node's own configuration has every stream replica; the coordinator's view does not.
    net.control({"a": [DisconnectStream(s) for s in crossed if s.target.index == 0]})
    for stream, ts in (("l", 1500), ("r", 1600)):
        net.publish("a", stream, [{"ts": ts, "k": 2}, {"punctuation": 2000}])
    for _ in range(30):                              # three join time-outs; each run() is bounded
        net.run(400)
        net.tick(JOIN_TIMEOUT_US // 10)
    given = net.cores["b"].counters["snapshots_given"]
    assert 1 <= given <= 6, f"j#1 gave {given} snapshots after one restart"
    assert net.cores["a"].counters["snapshots_skipped"] >= 1

    net.restore_link("a", "c")                       # c's sources catch up: j#1 moves past 2000
    for stream, ts in (("l", 1500), ("r", 1600)):
        net.publish("c", stream, [{"ts": ts, "k": 2}, {"punctuation": 2000}])
    for stream in ("l", "r"):
        publish(net, stream, [{"punctuation": 5000}, {"punctuation": CLOSED}])
    for _ in range(10):
        net.run()
        net.tick(JOIN_TIMEOUT_US)
    assert net.delivered["out"] == [(200, 1, 1), (1600, 2, 2)]
    assert net.cores["a"].hosted[ReplicaId("j", 0)].state is ReplicaState.LIVE
