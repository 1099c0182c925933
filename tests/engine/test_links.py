"""engine.core.links: coalesced acks, keep-alives only on idle links, probes, peer time-outs."""

from __future__ import annotations

from pathlib import Path

from replicast.engine.messages import Ack, Heartbeat
from replicast.engine.node import NodeCore, NodeOptions
from replicast.engine.query_file import load_query
from replicast.operators.plan import ReplicaId, StreamReplica

ROOT = Path(__file__).resolve().parents[2]
QUERY = load_query(ROOT / "examples/fig1.toml")
OPTIONS = NodeOptions(heartbeat_us=100, peer_timeout_us=600)      # keep-alive interval: 200
S1 = StreamReplica(ReplicaId("a", 0), ReplicaId("b", 0), 0)
S2 = StreamReplica(ReplicaId("a", 1), ReplicaId("b", 0), 0)


def core_with(*peers: str) -> NodeCore:
    core = NodeCore("n1", QUERY, OPTIONS, now=0)
    for peer in peers:
        core.on_peer_up(peer, now=0)
    core.messages_to_send()
    return core


def kinds(messages) -> list[tuple[str, str]]:
    return sorted((node, type(m).__name__) for node, m in messages)


def test_keep_alives_go_only_to_links_nothing_else_used():
    core = core_with("n2", "n3")
    core.handle_timer(now=0)
    assert kinds(core.messages_to_send()) == [("n2", "Heartbeat"), ("n3", "Heartbeat")]
    keep_alives = []
    for now in range(50, 1001, 50):                     # n2 gets something from us all the time (echoes)
        core.receive("n2", Heartbeat(now, None), now=now)
        core.messages_to_send()
        if now % 100 == 0:
            core.handle_timer(now=now)
            sent = kinds(core.messages_to_send())
            assert ("n2", "Heartbeat") not in sent, (now, sent)
            keep_alives += [now for node, _ in sent if node == "n3"]
    assert keep_alives == [200, 400, 600, 800, 1000]


def test_an_idle_link_gets_a_keep_alive_three_times_per_peer_timeout():
    core = core_with("n2")
    times, now = [], 0
    while now <= 3000:
        core.handle_timer(now=now)
        times += [now for _, m in core.messages_to_send() if type(m) is Heartbeat]
        now = core.next_timer()
    gaps = {b - a for a, b in zip(times, times[1:])}
    assert gaps == {200}, gaps                   # max(heartbeat_us, peer_timeout_us / 3)


def test_acks_are_coalesced_per_stream_and_ride_with_other_traffic():
    core = core_with("n2")
    for offset in (3, 7, 9):
        core.links.ack("n2", S1, 0, offset, 10)
    core.links.ack("n2", S2, 1, 4, 10)
    assert core.messages_to_send() == []          # nothing else to send: the acks wait
    core.receive("n2", Heartbeat(20, None), now=20)   # an echo to n2 is due: the acks go with it
    sent = core.messages_to_send()
    acks = [m for node, m in sent if type(m) is Ack]
    assert sorted(acks, key=lambda a: a.epoch) == [Ack(S1, 0, 9), Ack(S2, 1, 4)]
    assert all(node == "n2" for node, _ in sent)
    core.handle_timer(now=500)
    assert not [m for _, m in core.messages_to_send() if type(m) is Ack]   # sent once, not again


def test_acks_nothing_carries_leave_on_their_own_after_a_heartbeat_interval():
    core = core_with("n2")
    core.handle_timer(now=0)
    core.messages_to_send()
    core.links.ack("n2", S1, 0, 5, 30)
    assert core.next_timer() <= 30 + OPTIONS.heartbeat_us
    core.handle_timer(now=129)
    assert not [m for _, m in core.messages_to_send() if type(m) is Ack]
    core.handle_timer(now=130)
    assert [m for _, m in core.messages_to_send() if type(m) is Ack] == [Ack(S1, 0, 5)]


def test_acks_for_a_peer_that_went_down_are_void():
    core = core_with("n2")
    core.links.ack("n2", S1, 0, 5, 30)
    core.on_peer_down("n2", now=40)
    core.on_peer_up("n2", now=50)
    core.handle_timer(now=1000)
    assert not [m for _, m in core.messages_to_send() if type(m) is Ack]


def test_a_busy_link_still_carries_an_rtt_probe_now_and_then():
    core = core_with("n2")
    probes = 0
    for now in range(0, 5000, 10):
        core.receive("n2", Heartbeat(now, None), now=now)   # makes an echo to n2: traffic on the link
        probes += sum(1 for node, m in core.messages_to_send() if type(m) is Heartbeat and m.echo_us is None)
    assert probes == 5, probes                   # every PROBE_EVERY = 10 heartbeat intervals: 0, 1000, ... 4000
