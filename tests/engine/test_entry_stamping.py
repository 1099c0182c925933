"""Entry-stamped mode never gives one source event two timestamps (docs/node.md,
"Entry-stamped mode").

Each test publishes distinct events (``load`` = a counter) to every entry replica, as MQTT does,
and checks that the application receives each event exactly once, with one timestamp."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from replicast.engine.core.states import StamperRole
from replicast.engine.entry import EntryPoint
from replicast.engine.node import NodeOptions
from replicast.engine.query_file import load_query
from tests.engine.memnet import MemoryNetwork

QUERY = load_query(Path(__file__).resolve().parents[2] / "examples/entry-stamped-query.toml")
PLACE = {"cpu": ["e1", "e2"], "pass": ["f1", "f2"], "out": ["app"]}
OPTIONS = NodeOptions(punctuation_us=1_000, heartbeat_us=1_000, peer_timeout_us=5_000,
                      entry_modes={"cpu": "entry"})


def network(seed: int, place=PLACE, options=OPTIONS) -> MemoryNetwork:
    net = MemoryNetwork(QUERY, place, seed=seed, options=options, now=1_000_000)
    settle(net)
    return net


def settle(net: MemoryNetwork, ticks: int = 5) -> None:
    for _ in range(ticks):
        net.tick(1_000)
        net.run()


def publish(net: MemoryNetwork, first: int, n: int, place=PLACE) -> None:
    """Events ``first … first + n - 1`` to every live entry replica, with network steps between."""
    for i in range(first, first + n):
        for node in place["cpu"]:
            if node and node not in net.dead:           # (None: a removed replica)
                net.publish(node, "cpu", [{"server": "s", "load": float(i)}])
        net.tick(300)
        net.run(10)


def delivered(net: MemoryNetwork) -> Counter:
    """How many times each event reached the application (by its fields; the ts is the stamp)."""
    return Counter(record[1:] for record in net.delivered["out"])


def stamps(net: MemoryNetwork) -> dict:
    out: dict = {}
    for record in net.delivered["out"]:
        out.setdefault(record[1:], set()).add(record[0])
    return out


def stamper_of(net: MemoryNetwork, place=PLACE, among=None) -> str:
    """The node (of ``among``) whose entry replica stamps now (there is exactly one)."""
    [node] = [n for n in place["cpu"] if n and n not in net.dead and (among is None or n in among)
              for h in net.cores[n].hosted.values()
              if h.stamp is not None and h.stamp.role is StamperRole.STAMPING]
    return node


def close(net: MemoryNetwork) -> None:
    """Let every punctuation through, so the application holds everything that was stamped."""
    settle(net, 20)


@pytest.mark.parametrize("seed", range(8))
def test_a_cut_between_the_entry_replicas_stamps_each_event_once(seed):
    """The issue's split brain: only the link between the two entry replicas is cut; both used to
    stamp, and every event published during the cut was delivered twice (20 published, 39 delivered)."""
    net = network(seed)
    publish(net, 0, 10)
    net.cut_link("e1", "e2")
    publish(net, 10, 10)
    settle(net)
    publish(net, 20, 10)
    net.restore_link("e1", "e2")
    publish(net, 30, 10)
    close(net)
    got = delivered(net)
    assert set(got.values()) == {1}, {k: v for k, v in got.items() if v != 1}
    assert len(got) == 40
    assert all(len(ts) == 1 for ts in stamps(net).values())


@pytest.mark.parametrize("seed", range(8))
def test_an_event_stamped_just_before_the_stamper_dies_is_stamped_once(seed):
    """The take-over window: the stamper's output reached downstream but not its peer before it
    died; the peer, taking over, used to stamp the event a second time."""
    net = network(seed)
    publish(net, 0, 5)
    stamper = stamper_of(net)
    for node in PLACE["cpu"]:
        net.publish(node, "cpu", [{"server": "s", "load": 99.0}])
    # Deliver everything the stamper sends downstream, nothing it sends its peer; then it dies.
    while any(net.links[(stamper, f)] for f in ("f1", "f2")):
        for f in ("f1", "f2"):
            while net.links[(stamper, f)]:
                net.deliver_one(stamper, f)
    net.kill(stamper)
    settle(net)
    publish(net, 100, 5)
    close(net)
    got = delivered(net)
    assert set(got.values()) == {1}, {k: v for k, v in got.items() if v != 1}
    assert len(got) == 11


def test_a_stamper_without_a_majority_stamps_nothing_new_and_a_majority_takes_over():
    """A stamper cut from everyone but its source: the others elect a new stamper; when the link
    comes back the old one has delivered nothing twice."""
    net = network(1)
    publish(net, 0, 5)
    stamper = stamper_of(net)
    others = [n for n in net.names if n != stamper]
    for other in others:
        net.cut_link(stamper, other)
    publish(net, 5, 10)
    settle(net)
    stamper_of(net, among=others)                   # the majority's side has one (the old one cannot commit)
    for other in others:
        net.restore_link(stamper, other)
    publish(net, 15, 5)
    close(net)
    got = delivered(net)
    assert set(got.values()) == {1} and len(got) == 20


def test_pending_keeps_no_settled_events():
    """A follower's memory of raw events not yet seen stamped: 5,000 events stamped and seen must
    leave nothing behind (it kept 5,000 zero-count keys)."""
    entry = EntryPoint(QUERY.streams["cpu"], "entry")
    for i in range(5_000):
        segments, rejects = entry.on_items([{"server": "s", "load": float(i)}], now=10 + i, stamping=False)
        assert not segments and not rejects
    stamper = EntryPoint(QUERY.streams["cpu"], "entry")
    stamped = [r for i in range(5_000) for records, _ in
               stamper.on_items([{"server": "s", "load": float(i)}], now=10 + i, stamping=True)[0] for r in records]
    entry.settle(stamped)
    assert len(entry.pending) == 0
    # a stamped copy that overtakes its raw event is remembered until the raw one comes
    entry.settle([(20_000, "s", -1.0)])
    assert dict(entry.pending) == {("s", -1.0): -1}
    entry.on_items([{"server": "s", "load": -1.0}], now=20_001, stamping=False)
    assert len(entry.pending) == 0


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("STAMP_SEEDS", 30))))
def test_random_cuts_crashes_and_restarts_never_stamp_an_event_twice(seed):
    """Random link cuts, crashes and restarts among three entry replicas and the filter replicas,
    events published throughout; then everything heals.  No event is delivered twice or with two
    timestamps, and once healed the stream flows again (events published then all arrive)."""
    chaos(seed, OPTIONS)


#: Seeds of the failover-family modes: the first few, and those that stalled before failover rule 4
#: (29, 31: every replica's port stuck; each takes ~60 ms, so all three modes add about 2 s).
MODE_SEEDS = (*range(8), 29, 31)


@pytest.mark.parametrize("mode", ["failover", "deterministic", "synchronization"])
@pytest.mark.parametrize("seed", MODE_SEEDS)
def test_random_cuts_crashes_and_restarts_in_the_failover_modes(mode, seed):
    """The same schedules in the modes where each port follows one upstream replica (failover rule
    4): a followed entry replica that left its view starts again at the stamper's last punctuation,
    and its punctuations wait for the port to reach it — which the standbys, sending nothing, never
    did.  Ports' punctuations stalled for good (here seeds 2, 3, 5, 6, 7, 29, 31 in all three modes), and in
    ``deterministic`` mode, which releases records only at punctuations, the healed stream never
    reached the application (seeds 2, 3, 6, 29, 31, 36)."""
    from dataclasses import replace
    from replicast.engine.core.modes import Mode
    chaos(seed, replace(OPTIONS, mode=Mode(mode)))


def chaos(seed: int, options: NodeOptions) -> None:
    import random
    rng = random.Random(seed)
    place = {"cpu": ["e1", "e2", "e3"], "pass": ["f1", "f2"], "out": ["app"]}
    net = network(seed, place, options)
    nodes = ["e1", "e2", "e3", "f1", "f2"]
    published = 0
    for _ in range(10):
        action = rng.choice(["cut", "cut", "restore", "crash", "restart", "none"])
        a, b = rng.sample(nodes[:3] if rng.random() < 0.5 else nodes + ["app"], 2)   # entry pairs often
        if action == "cut" and a not in net.dead and b not in net.dead:
            net.cut_link(a, b)
        elif action == "restore" and frozenset((a, b)) in net.cut:
            net.restore_link(a, b)
        elif action == "crash" and a != "app" and a not in net.dead:
            net.kill(a)
        elif action == "restart" and net.dead:
            net.restart(rng.choice(sorted(net.dead)))
        publish(net, published, 4, place)
        published += 4
        settle(net, rng.randint(1, 8))
    for pair in list(net.cut):
        net.restore_link(*sorted(pair))
    for node in sorted(net.dead):
        net.restart(node)
    settle(net, 30)
    publish(net, 1_000, 10, place)
    close(net)
    got = delivered(net)
    assert all(len(ts) == 1 for ts in stamps(net).values()), {k: v for k, v in stamps(net).items() if len(v) > 1}
    # Same-stamp copies only from an application sink that rebuilt (docs/lifecycle.md, "Application sinks").
    assert not {k: v for k, v in got.items() if v > 1} or net.cores["app"].counters["rejoins"]
    assert all(got[("s", float(i))] == 1 for i in range(1_000, 1_010)), "the healed stream does not flow"
    # ... and so do punctuations: every replica's ports pass the healed events (logs trim, sorts release).
    last = max(next(iter(ts)) for key, ts in stamps(net).items() if key[1] >= 1_000)
    ports = {node: [f.max_punctuation for h in net.cores[node].hosted.values() if h.logic for f in h.logic.filters]
             for node in ("f1", "f2", "app")}
    assert all(p >= last for node_ports in ports.values() for p in node_ports), (last, ports)


def test_a_member_that_missed_a_view_does_not_stamp_what_that_view_emitted():
    """The stamper dies; of its two members, one (``lone``) is cut from the other and from enough
    voters that it cannot win a view, so the other takes over alone and emits events ``lone`` also
    holds as raw, pending.  The new stamper dies too; once everything heals, ``lone`` — still a
    member of the first view — used to take over with a fresh stream and stamp those events again
    (found by the random test at seeds 162 and 385): it must first leave, forgetting what it has
    pending, as a replica outside does."""
    place = {"cpu": ["e1", "e2", "e3"], "pass": ["f1", "f2"], "out": ["app"]}
    net = network(0, place)
    publish(net, 0, 4, place)
    first = stamper_of(net, place)
    lone, other = [n for n in place["cpu"] if n != first]
    net.cut_link(lone, other)
    net.cut_link(lone, "app")                       # lone reaches 3 of the 6 voters: no majority
    net.kill(first)
    settle(net, 10)
    assert stamper_of(net, place, among=[other]) == other
    publish(net, 4, 8, place)                         # stamped by `other` alone, pending at `lone`
    settle(net)
    net.kill(other)
    net.restore_link(lone, other)
    net.restore_link(lone, "app")
    net.restart(first)
    net.restart(other)
    settle(net, 30)
    publish(net, 12, 4, place)
    close(net)
    assert all(len(ts) == 1 for ts in stamps(net).values()), {k: v for k, v in stamps(net).items() if len(v) > 1}
    got = delivered(net)
    assert set(got.values()) == {1} and all(("s", float(i)) in got for i in range(12, 16))


def test_a_restarted_stamper_rejoins_as_a_member_and_nothing_is_stamped_twice():
    net = network(4)
    stamper = stamper_of(net)
    publish(net, 0, 10)
    net.kill(stamper)
    publish(net, 10, 10)
    settle(net)
    net.restart(stamper)
    settle(net, 10)
    publish(net, 20, 10)
    close(net)
    got = delivered(net)
    assert set(got.values()) == {1} and len(got) == 30
    roles = sorted(h.stamp.role.value for n in PLACE["cpu"] for h in net.cores[n].hosted.values() if h.stamp)
    assert roles == ["member", "stamping"]            # the restarted replica was admitted again


def test_an_entry_replica_added_mid_stream_is_admitted_and_one_removed_is_left_out():
    place = {"cpu": ["e1", "e2"], "pass": ["f1", "f2"], "out": ["app"]}
    net = MemoryNetwork(QUERY, place, seed=2, options=OPTIONS, now=1_000_000, spare=("e3",))
    settle(net)
    publish(net, 0, 5, net.placement)
    net.add_replica("cpu", "e3")
    settle(net, 10)
    publish(net, 5, 5, net.placement)
    [added] = [h for h in net.cores["e3"].hosted.values() if h.stamp]
    assert added.stamp.role.value == "member" and len(added.stamp.view.members) == 3
    stamper = next(h for n in ("e1", "e2") for h in net.cores[n].hosted.values()
                   if h.stamp and h.stamp.role.value == "stamping")
    net.remove_replica(stamper.replica)              # the stamper itself goes
    settle(net, 10)
    publish(net, 10, 5, net.placement)
    close(net)
    got = delivered(net)
    assert set(got.values()) == {1} and len(got) == 15
    views = {h.stamp.view for n in net.placement["cpu"] if n for h in net.cores[n].hosted.values() if h.stamp}
    assert len(views) == 1 and len(next(iter(views)).members) == 2


def test_a_restarted_voter_promises_only_terms_above_its_start():
    """Votes are not kept across restarts: terms are clock readings, and a restarted voter promises
    only terms above its incarnation, which every term it may have promised before is below."""
    from replicast.engine.core.node import NodeCore
    from replicast.engine.messages import ViewBallot, ViewReply
    voter = NodeCore("v", QUERY, OPTIONS, now=5_000_000)
    voter.on_peer_up("e1", now=5_000_000)
    voter.receive("e1", ViewBallot("cpu", 0, 4_999_999), now=5_000_001)
    voter.receive("e1", ViewBallot("cpu", 0, 5_000_001), now=5_000_001)
    replies = [m for _, m in voter.messages_to_send() if isinstance(m, ViewReply)]
    assert [(r.term, r.ok) for r in replies] == [(4_999_999, False), (5_000_001, True)]
    assert replies[0].promised == 5_000_000           # the candidate retries above it
    assert voter.counters["refused_ballots"] == 1
