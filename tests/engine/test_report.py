"""What a node tells its placement coordinator (NodeCore.server_report, engine.core.stats), and stream replicas a
coordinator connects with the receiver's half arriving first (engine.core.sender rule 4)."""

from __future__ import annotations

from collections import Counter

from replicast.engine.core.configure import add_replica, remove_replica
from replicast.engine.messages import Report
from replicast.engine.replay import replay
from replicast.engine.wire import decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.query import QueryBuilder
from replicast.operators.record import CLOSED
from tests.engine.memnet import MemoryNetwork

S = 1_000_000
F0, F1, APP = ReplicaId("f", 0), ReplicaId("f", 1), ReplicaId("app", 0)


def chain():
    q = QueryBuilder("chain")
    q.stream("s", {"v": "int"})
    q.filter("f", "s", where="v >= 0")
    q.application("app", "f")
    return q.build()


def start(net: MemoryNetwork) -> None:
    while not all(core.ready() for node, core in net.cores.items() if net.live(node)):
        net.run()
        net.tick(500_000)


def deliver(net: MemoryNetwork, last: tuple[str, str]) -> None:
    """Run the network, but hold the link ``last`` until nothing else can move."""
    while True:
        busy = [link for link, queue in net.links.items() if queue and link != last]
        if busy:
            src, dst = busy[0]
        elif net.links[last]:
            src, dst = last
        else:
            return
        net.cores[dst].receive(src, decode(net.links[(src, dst)].popleft()[4:]), now=net.now)
        net.flush()


def test_a_report_credits_each_stream_replica_its_rank_and_says_how_late_it_is():
    net = MemoryNetwork(chain(), {"s": ["n0"], "f": ["n1", "n2"], "app": ["n3"]})
    start(net)
    base = net.now
    for i in range(10):
        net.publish("n0", "s", [{"ts": base + i, "v": i}])
        deliver(net, ("n2", "n3"))                  # f#0's copy always arrives first
    net.publish("n0", "s", [{"punctuation": base + 20}])
    deliver(net, ("n2", "n3"))
    net.now = base + 20 + net.options.punctuation_us + 3 * S
    report = net.cores["n3"].server_report(net.now, load=0.25, capacity=2.0)
    first, second = StreamReplica(F0, APP, 0), StreamReplica(F1, APP, 0)
    assert set(report.inputs) == {first, second}
    assert report.inputs[first].weight == 10 and report.inputs[second].weight == 5      # ranks 1 and 2 (§V-B)
    assert report.inputs[first].delay_us == report.inputs[second].delay_us == 3 * S     # §V-C
    assert report.hosted == (APP,) and report.records_out == {APP: 10}
    assert (report.load, report.capacity) == (0.25, 2.0)
    assert set(report.rtt_ms) == {"n0", "n1", "n2"}
    # f#0's link breaks: only f#1's punctuations keep coming, so only f#0 falls behind.
    net.cut_link("n1", "n3")
    net.publish("n0", "s", [{"punctuation": net.now}])
    net.run()
    net.now += 4 * S
    later = net.cores["n3"].server_report(net.now)
    assert later.inputs[second].delay_us == 4 * S - net.options.punctuation_us
    assert later.inputs[first].delay_us == report.inputs[first].delay_us + 4 * S
    assert decode(encode(Report(later))[4:]) == Report(later)                           # it crosses the wire


def test_a_stream_replica_whose_receiver_hears_of_it_first_still_flows():
    """A coordinator's ConnectStream reaches the receiving node (and the request it sends reaches the
    sending node) before the sending node's own ConnectStream: the sender answers it once told."""
    query = chain()
    place = {"s": ["n0"], "f": ["n1"], "app": ["n2"]}
    net = MemoryNetwork(query, place, spare=("n3",))
    start(net)
    base = net.now
    inputs = [(base + i, i) for i in range(40)]
    for ts, v in inputs[:10]:
        net.publish("n0", "s", [{"ts": ts, "v": v}])
    net.run()
    placement, messages = add_replica(query, place, "f", "n3")
    net.control({"n2": messages["n2"]})            # app's node asks n3 for f#1 before n3 hosts it
    net.run()
    net.control({"n3": messages["n3"]})            # f#1 asks n0 to hold s before n0 knows the stream
    net.run()
    net.control({"n0": messages["n0"]})
    for _ in range(10):
        net.tick(500_000)
        net.run()
    assert net.cores["n3"].counters["early_requests"] >= 1 and net.cores["n0"].counters["early_requests"] >= 1
    for ts, v in inputs[10:20]:
        net.publish("n0", "s", [{"ts": ts, "v": v}])
    net.run()
    placement, messages = remove_replica(placement, F0)     # f#1 must now carry the stream alone
    net.control(messages)
    for ts, v in inputs[20:]:
        net.publish("n0", "s", [{"ts": ts, "v": v}])
    net.publish("n0", "s", [{"punctuation": CLOSED}])
    for _ in range(5):
        net.tick(500_000)
        net.run()
    expected = replay(query, {"s": list(inputs)}, replicas=1).outputs["app"]
    assert Counter(net.delivered["app"]) == Counter(expected) and len(expected) == 40
