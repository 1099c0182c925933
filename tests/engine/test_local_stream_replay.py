"""A stream replica between two replicas on one node, served after its sender has logged output.

The Union ``u`` on n1 merges a local entry point (``a``) and a remote one (``b`` on n2).  Until the
link to n2 is up its log's frontier is unknown, so the local Join's request for its stream waits
(parked) while ``u`` already emits ``a``'s records.  Once the link is up the request is served: the
StreamHead says "from offset 0" and the logged batches must follow.  A local route needs no
retention once active, but the replay must come before the log is trimmed for it.  Found by
``replicast experiment fig3``: min-cost deployment put the Fig. 1 Join beside its Union at
kmax = 1 (and the Union beside one of its entry points) and the Join never delivered anything.
"""

from __future__ import annotations

import json
from collections import Counter

from replicast.engine.node import Delivered, NodeCore, NodeOptions, configure
from replicast.engine.replay import replay
from replicast.operators.query import QueryBuilder

P = 100_000


def query():
    q = QueryBuilder("<local stream replay>")
    for name in ("a", "b", "c"):
        q.stream(name, {"k": "int"})
    q.operator("u", "union", ["a", "b"])
    q.operator("j", "join", ["u", "c"], window_ms=1000, on="u.k == c.k")
    q.application("app", "j")
    return q.build()


def test_a_local_receiver_positioned_late_gets_the_logged_prefix():
    q = query()
    place = {"a": ["n1"], "b": ["n2"], "u": ["n1"], "j": ["n1"], "app": ["n1"], "c": ["n2"]}
    cores = {n: NodeCore(n, q, NodeOptions(punctuation_us=P), now=0) for n in ("n1", "n2")}
    for name, core in cores.items():
        core.apply(configure(q, place, name), now=0)
    delivered: list = []

    def pump(now: int) -> None:
        moved = True
        while moved:
            moved = False
            for name, core in cores.items():
                for dst, message in core.messages_to_send():
                    cores[dst].receive(name, message, now=now)
                    moved = True
                delivered.extend(r for e in core.events() if isinstance(e, Delivered) for r in e.records)

    inputs = {s: [] for s in q.streams}

    def publish(node: str, stream: str, t: int) -> None:
        inputs[stream].append((t * P, t))
        cores[node].on_source(stream, json.dumps([{"ts": t * P, "k": t}, {"punctuation": t * P}]).encode(), now=t * P)

    for t in range(1, 4):                       # n2 is not reachable yet: u emits a's records, j waits
        publish("n1", "a", t)
        publish("n2", "b", t)
        pump(t * P)
    u = next(h for r, h in cores["n1"].hosted.items() if r.name == "u")
    assert u.records_out == 3 and u.log.frontier is None and u.parked    # logged before j's request is served
    for name, other in (("n1", "n2"), ("n2", "n1")):
        cores[name].on_peer_up(other, now=4 * P)
    pump(4 * P)
    for t in range(1, 8):
        if t >= 4:
            publish("n1", "a", t)
            publish("n2", "b", t)
        publish("n2", "c", t)
        pump(max(t, 4) * P)
    for node, stream in (("n1", "a"), ("n2", "b"), ("n2", "c")):
        cores[node].on_source(stream, json.dumps([{"punctuation": 2**62}]).encode(), now=9 * P)
    pump(9 * P)
    expected = replay(q, {s: sorted(r) for s, r in inputs.items()}, replicas=1, punctuation_us=P).outputs["app"]
    assert len(expected) == 14                  # each of the 7 c records meets two union records
    assert Counter(delivered) == Counter(expected)
