"""Liveness under replica management (docs/lifecycle.md, "Inputs that vanish or are taken away"):
no port waits for ever on a stream replica nobody will send, and nothing that can advance again
stays stalled.

Each scenario runs the real node cores on the in-memory network and compares the applications'
output with the one-process reference.
"""

from __future__ import annotations

from collections import Counter

from replicast.engine.core.configure import placement_plan
from replicast.engine.core.states import InboundState
from replicast.engine.messages import ConnectStream, DisconnectStream
from replicast.engine.node import NodeOptions, ReplicaState
from replicast.engine.replay import replay
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.engine.aio.metrics import NodeMetrics
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_lifecycle import FIG1, FIG1_STREAMS, P, assert_reference, fig1_messages, run_fig1

OPERATORS = list(FIG1.operators)


def own_nodes_placement() -> dict[str, list[str]]:
    """Two replicas of every entry point and operator, each operator replica on a node of its own
    (``o<i>`` and ``p<i>``), applications on ``apps``: a node's crash touches one replica."""
    place = {stream: ["e1", "e2"] for stream in FIG1.streams}
    place.update({op: [f"o{i}", f"p{i}"] for i, op in enumerate(OPERATORS)})
    place.update({app: ["apps"] for app in FIG1.applications})
    return place


def scrape(net: MemoryNetwork, node: str) -> dict:
    """The node's Prometheus samples as the asyncio driver exposes them: (name, labels) -> value."""
    metrics = NodeMetrics(node)
    metrics.refresh(net.cores[node].statistics())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in metrics.registry.collect() for s in family.samples}


def stream_between(place, source: str, target: str, source_index: int, target_index: int) -> StreamReplica:
    return next(s for s in placement_plan(FIG1, place).stream_replicas
                if s.source == ReplicaId(source, source_index) and s.target == ReplicaId(target, target_index))


def node_of(place, replica: ReplicaId) -> str:
    return place[replica.name][replica.index]


def test_a_stream_replica_whose_node_restarted_without_it_is_not_waited_for():
    """The coordinator's scenario on a crash-restart: ``hot#0`` hears ``correlate`` only from
    ``correlate#0`` (garbage collection took the other stream replica); ``correlate#0``'s node is
    killed and started again without it (the coordinator had placed it there, the node's own
    configuration does not have it), and the collected stream replica from ``correlate#1`` is
    revived — based above ``hot#0``'s port.  The receiver must learn from the restarted node that
    ``correlate#0`` is not hosted there any more and stop waiting for it: its port is then left
    with only an input complete above it, so it rejoins from its live peer, which later carries
    ``hot`` alone.  Before, it followed the vanished stream replica for ever (the restarted node
    did not answer its ``Resume``), the revived stream's punctuations were held for good, and
    ``alerts`` never closed."""
    place = own_nodes_placement()
    net = MemoryNetwork(FIG1, place, seed=3, options=NodeOptions(join_timeout_us=300_000))
    n = len(fig1_messages())
    collected = stream_between(place, "correlate", "hot", 1, 0)
    vanished = stream_between(place, "correlate", "hot", 0, 0)
    src, dst = node_of(place, collected.source), node_of(place, collected.target)
    crashed = node_of(place, vanished.source)

    def collect(net):
        net.run()                                    # what was published so far has flowed
        net.control({src: [DisconnectStream(collected)], dst: [DisconnectStream(collected)]})

    def crash_restart_without_it(net):
        net.run()
        net.kill(crashed)
        net.placement["correlate"] = [None, src]     # the node's configuration does not place it
        net.restart(crashed)

    def revive(net):
        net.run()
        message = ConnectStream(collected, src, dst)
        net.control({node: [message] for node in {src, dst}})

    def peer_dies(net):
        net.run()
        net.kill(node_of(place, ReplicaId("hot", 1)))

    run_fig1(net, {n // 5: collect, n // 4: crash_restart_without_it, n // 3: revive, 2 * n // 3: peer_dies},
             tick_us=20_000)
    assert_reference(net)
    receiver = net.cores[dst]
    assert receiver.inbound[vanished].state is InboundState.VANISHED
    assert receiver.counters["vanished_streams"] >= 1
    samples = scrape(net, dst)
    assert samples[("replicast_vanished_streams_total", ())] >= 1
    assert samples[("replicast_replica_vanished_inputs", (("replica", "hot#0"),))] == 1
    assert_reference(net)


def test_a_port_whose_last_whole_input_is_collected_rejoins():
    """Garbage collection takes a port's last input that is whole where the port is (§V-B), the
    port being left with a revived stream replica that is complete only above it (§V-C): the
    disconnection itself must trigger the rejoin check.  ``hot#0`` lags behind ``correlate#0``
    (a congested link), the collected stream replica from ``correlate#1`` is revived — based above
    ``hot#0``'s port, which still hears ``correlate#0``, so nothing is wrong yet — and then the
    next round collects ``correlate#0 -> hot#0``.  ``hot#1`` later dies for good.  Before, no check
    ran (the port's inputs changed by a ``DisconnectStream``), ``hot#0``'s port stayed below the
    revived stream's base for good and ``alerts`` never closed."""
    place = own_nodes_placement()
    net = MemoryNetwork(FIG1, place, seed=5, options=NodeOptions(join_timeout_us=300_000))
    n = len(fig1_messages())
    revived = stream_between(place, "correlate", "hot", 1, 0)
    whole = stream_between(place, "correlate", "hot", 0, 0)
    src, dst, other = node_of(place, revived.source), node_of(place, revived.target), node_of(place, whole.source)

    def collect_and_congest(net):
        net.run()
        net.control({src: [DisconnectStream(revived)], dst: [DisconnectStream(revived)]})
        net.congest(other, dst)

    def revive(net):
        net.run()                                    # everything else flows: hot#1 acknowledges
        message = ConnectStream(revived, src, dst)
        net.control({node: [message] for node in {src, dst}})
        net.run()                                    # its head arrives: based above the port
        assert net.cores[dst].hosted[revived.target].logic.filters[0].waiting(net.cores[dst].inbound[revived].index)

    def collect_the_whole_one(net):
        net.control({other: [DisconnectStream(whole)], dst: [DisconnectStream(whole)]})
        net.decongest(other, dst)

    def peer_dies(net):
        net.run()
        net.kill(node_of(place, ReplicaId("hot", 1)))

    run_fig1(net, {n // 5: collect_and_congest, n // 2: revive, n // 2 + 1: collect_the_whole_one,
                   2 * n // 3: peer_dies}, tick_us=20_000)
    assert_reference(net)
    assert net.cores[dst].counters["rejoins"] >= 1


def test_a_replica_whose_peers_are_all_rebuilding_is_reported():
    """Both nodes of the count-window aggregate ``load_trend`` die (beyond kmax − 1 failures) and
    start again one after the other: the first rebuilds (no peer), the second finds its only peer
    REBUILDING — never exact since — and rebuilds too.  Neither will ever emit a count window again
    (docs/lifecycle.md); that must be said — an event naming the peers, the ``peers_rebuilding``
    counter (``replicast_peers_rebuilding_total``) — instead of a silent downstream window.  And
    nothing wrong is delivered."""
    place = own_nodes_placement()
    first, second = place["load_trend"]
    net = MemoryNetwork(FIG1, place, seed=2, options=NodeOptions(join_timeout_us=300_000))
    n = len(fig1_messages())

    def kill_both(net):
        net.run()
        net.kill(first)
        net.kill(second)

    def restart(node):
        def action(net):
            net.run()
            net.restart(node)
            for _ in range(10):
                net.run()
                net.tick(100_000)
        return action

    run_fig1(net, {n // 3: kill_both, n // 3 + 2: restart(first), n // 3 + 4: restart(second)}, tick_us=20_000)
    assert net.cores[second].counters["peers_rebuilding"] == 1
    reports = [e for node, e in net.events if node == second and "rebuilding" in getattr(e, "reason", "")
               and "load_trend#0" in getattr(e, "reason", "")]
    assert reports, "no event names the rebuilding peer"
    assert net.cores[first].counters["peers_rebuilding"] == 0       # it had no live peer at all: plain rebuild
    expected = replay(FIG1, FIG1_STREAMS, replicas=1, punctuation_us=P).outputs
    assert not Counter(net.delivered["load_trends"]) - Counter(expected["load_trends"])


def test_rebuilding_replicas_rejoin_from_a_peer_that_is_live_again():
    """Three replicas of the count-window aggregate ``load_trend``; two die and restart while cut
    off from the third (a partition), so the first restarted rebuilds with no reachable peer and
    the second finds only that one — rebuilding — and rebuilds too (reported).  When the links
    heal, the third is LIVE: both rejoin from it, and once it dies for good they carry the count
    windows alone, exactly.  Before, they stayed REBUILDING (a count window is never again emitted
    by a rebuilt replica) and ``load_trends`` went silent when the live one died."""
    place = own_nodes_placement()
    place["load_trend"] = ["l0", "l1", "l2"]
    # A small retention limit: the dead replicas' routes are cut off, so the restarted ones lose input.
    net = MemoryNetwork(FIG1, place, seed=4, options=NodeOptions(join_timeout_us=300_000, retention_items=100))
    n = len(fig1_messages())

    def settle(net):
        for _ in range(10):
            net.run()
            net.tick(100_000)

    def kill_two(net):
        net.run()
        net.kill("l0")
        net.kill("l1")
        net.cut_link("l0", "l2")
        net.cut_link("l1", "l2")

    def restart(node):
        def action(net):
            net.run()
            net.restart(node)
            settle(net)
        return action

    def heal(net):
        for node in ("l0", "l1"):                    # said while it lasts: cluster status can show it
            assert scrape(net, node)[("replicast_replica_lost_input", (("replica", f"load_trend#{node[1]}"),))] == 1
        assert scrape(net, "l1")[("replicast_peers_rebuilding_total", ())] == 1
        net.restore_link("l0", "l2")
        net.restore_link("l1", "l2")
        settle(net)

    def live_one_dies(net):
        settle(net)
        net.kill("l2")

    run_fig1(net, {n // 4: kill_two, n // 4 + 200: restart("l0"), n // 4 + 202: restart("l1"), n // 2 + 40: heal,
                   2 * n // 3: live_one_dies}, tick_us=20_000)
    assert net.cores["l1"].counters["peers_rebuilding"] == 1
    for node in ("l0", "l1"):
        hosted = net.cores[node].hosted[ReplicaId("load_trend", int(node[1]))]
        assert hosted.state is ReplicaState.LIVE, node
        assert scrape(net, node)[("replicast_replica_lost_input", (("replica", f"load_trend#{node[1]}"),))] == 0
    assert_reference(net)
