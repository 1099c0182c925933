"""Entry-stamped mode at the stream's start and across a whole-cluster restart (docs/node.md,
"Entry-stamped mode"; lifecycle rule 5: only a first start's entry point claims its whole stream).

Both tests fail on the code before these rules: the first lost every event published before the
first view when its stamper died unheard; the second delivered a window count of 10 where 20
events were stamped in that window."""

from __future__ import annotations

import pytest

from replicast.engine.core.states import CandidacyPhase, StamperRole
from replicast.engine.messages import ViewDecided
from replicast.engine.query_file import parse_query
from replicast.engine.wire import decode
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_entry_stamping import (OPTIONS, PLACE, QUERY, close, delivered, network, publish, settle,
                                             stamper_of)


def role(net: MemoryNetwork, node: str) -> StamperRole:
    [hosted] = [h for h in net.cores[node].hosted.values() if h.stamp is not None]
    return hosted.stamp.role


@pytest.mark.parametrize("seed", range(3))
def test_the_first_stamper_dying_before_its_peer_hears_the_view_loses_no_pending_event(seed):
    """Events published before the first view are pending at both entry replicas.  The first view
    is decided, but its stamper dies before its peer hears of it.  The peer takes over from that
    view: it must stamp its pending events, because nothing of that view was emitted without its
    acknowledgement (it used to forget them as possibly stamped by a dead member)."""
    net = MemoryNetwork(QUERY, PLACE, seed=seed, options=OPTIONS, now=1_000_000)
    for i in range(5):
        for node in PLACE["cpu"]:
            net.publish(node, "cpu", [{"server": "s", "load": float(i)}])
    between = {("e1", "e2"), ("e2", "e1")}
    first = None
    while first is None:                          # every message flows but a ViewDecided between the two
        busy = [link for link, queue in net.links.items() if queue
                and not (link in between and isinstance(decode(queue[0][4:]), ViewDecided))]
        if busy:
            net.deliver_one(*net.rng.choice(busy))
        else:
            net.tick(1_000)
        first = next((n for n in PLACE["cpu"] if role(net, n) is StamperRole.STAMPING), None)
    [other] = [n for n in PLACE["cpu"] if n != first]
    assert role(net, other) is StamperRole.OUTSIDE
    net.kill(first)
    settle(net, 20)
    assert role(net, other) is StamperRole.STAMPING
    publish(net, 5, 5, {"cpu": [other]})
    close(net)
    assert sorted(delivered(net).items()) == [(("s", float(i)), 1) for i in range(10)]


WINDOWED = parse_query("""
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[operators]]
name = "per_window"
kind = "aggregate"
input = "cpu"
group_by = ["server"]
window = { kind = "time", size_ms = 50, slide_ms = 50 }
compute = { n = "count()" }

[[applications]]
name = "out"
input = "per_window"
""")


def test_after_a_whole_cluster_restart_no_window_is_counted_from_half_its_events():
    """Every node restarts mid-window.  No voter remembers a view, so the restarted entry replicas
    start the first view again — but not the stream: they know it only from their first
    punctuation, so the rebuilt aggregates do not take the window they lost half of as complete
    (the new stamper used to claim the whole stream, and the window came out with n = 10 of 20)."""
    place = {"cpu": ["e1", "e2"], "per_window": ["a1", "a2"], "out": ["app"]}
    net = MemoryNetwork(WINDOWED, place, seed=0, options=OPTIONS, now=1_000_000)
    settle(net)
    net.tick(50_000 - net.now % 50_000 + 1_000)   # 1 ms into a window
    net.run()
    cut = net.now - net.now % 50_000
    publish(net, 0, 10, place)                    # 10 events in [cut, cut + 50 ms)
    assert net.delivered["out"] == []
    for node in sorted(net.cores):
        net.kill(node)
    for node in sorted(net.cores):
        net.restart(node)
    settle(net, 10)
    publish(net, 10, 10, place)                   # 10 more in the same window
    net.tick(50_000)
    publish(net, 20, 10, place)                   # and 10 in a later one, after the restart
    settle(net, 200)
    windows = {ts: n for ts, _, n in net.delivered["out"]}
    assert cut + 50_000 not in windows, f"the window the restart cut was counted: {windows}"
    assert sorted(windows.values()) == [10], windows   # the later window, whole


def candidacy_phase(net: MemoryNetwork, node: str):
    [hosted] = [h for h in net.cores[node].hosted.values() if h.stamp is not None]
    return hosted.stamp.candidacy.phase if hosted.stamp.candidacy is not None else None


@pytest.mark.parametrize("seed", range(4))
def test_a_member_cut_off_while_its_view_is_decided_is_told_again(seed):
    """The stamper's link to a member breaks while a view that keeps the member is being accepted:
    the view is decided, its ``ViewDecided`` to the member is lost (MemberSync LOST).  When the link
    comes back the stamper must seek a new view, which tells the member again — the member does
    not ask to join (it is in the view), segments of a view it never heard are stale to it, and the
    stamper would wait for its acknowledgement for ever: nothing would be delivered again."""
    net = network(seed)
    stamper = stamper_of(net)
    [member] = [n for n in PLACE["cpu"] if n != stamper]
    publish(net, 0, 3)
    net.cut_link(stamper, member)                  # the stamper seeks a new view at once …
    net.restore_link(stamper, member)              # … and proposes one that keeps the member
    while candidacy_phase(net, stamper) is not CandidacyPhase.ACCEPTING:
        assert net.step(), "the stamper never proposed a view"
    away = [stamper, "f1", "f2"]                   # the member is left too few voters to take over
    for node in away:
        net.cut_link(member, node)                 # the view is decided while the member is away
    net.run()
    assert candidacy_phase(net, stamper) is None and role(net, stamper) is StamperRole.STAMPING
    for node in away:
        net.restore_link(member, node)
    settle(net, 20)
    publish(net, 3, 5)
    close(net)
    assert sorted(delivered(net).items()) == [(("s", float(i)), 1) for i in range(8)]
    assert role(net, member) is StamperRole.MEMBER and stamper_of(net) == stamper


@pytest.mark.parametrize("seed", range(4))
def test_a_cut_between_stamper_and_member_leaves_the_member_out(seed):
    """Both ends of a cut between the entry replicas seek a view at once and both can reach a
    majority; the stamper's term wins the tie (STAMPER_PRIORITY), so the stamper carries on and the
    member is left out — not a take-over that makes the old stamper start a new incarnation."""
    net = network(seed)
    stamper = stamper_of(net)
    [member] = [n for n in PLACE["cpu"] if n != stamper]
    net.cut_link(stamper, member)
    net.run()
    settle(net, 3)
    assert stamper_of(net, among=[stamper, member]) == stamper
    assert net.cores[stamper].counters["rejoins"] == 0
