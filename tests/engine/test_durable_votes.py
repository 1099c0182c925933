"""Durable votes and skewed clocks: the entry stamper's Paxos acceptors keep their promises across
restarts (engine/core/views.py rule 1; docs/modes.md, "Durable votes"), so no stream ever carries
two stampers' timestamps for one event, whatever the nodes' clocks read.

Each scenario runs the entry-stamped pipeline on the in-memory network with per-node clocks
(offset and drift, :mod:`simulator.clocks`), and watches every batch an entry replica sends: the
stream ``cpu`` itself, before any duplicate filter downstream drops a late copy."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, currently_in_test_context, given, note, settings, strategies as st

from replicast.engine.core.node import NodeCore
from replicast.engine.core.states import StamperRole
from replicast.engine.core.views import PersistVotes, StreamVotes, VoteMemory, Votes
from replicast.engine.messages import Batch, View, ViewBallot, ViewReply
from replicast.simulator.clocks import ClockSpec
from tests.engine.memnet import MemoryNetwork
from tests.engine.test_entry_stamping import OPTIONS, QUERY, close, publish, settle, stamps

ENTRIES = ("e1", "e2", "e3")
PLACE = {"cpu": list(ENTRIES), "pass": ["f1", "f2"], "out": ["app"]}
#: The entry replicas' nodes are the voters: they are the candidates too, and a majority is two.
VOTING = replace(OPTIONS, voters=ENTRIES)


def voter(votes: Votes, now: int = 5_000_000) -> NodeCore:
    core = NodeCore("v", QUERY, OPTIONS, now=now, votes=votes)
    core.on_peer_up("e1", now=now)
    return core


def replies(core: NodeCore) -> list[tuple[int, bool, int]]:
    return [(m.term, m.ok, m.promised) for _, m in core.messages_to_send() if isinstance(m, ViewReply)]


# -- the voter alone ----------------------------------------------------------------------------
def test_a_durable_voter_asks_to_store_each_promise_before_its_reply_and_nothing_for_a_refusal():
    core = voter(Votes(VoteMemory.DURABLE))
    core.receive("e1", ViewBallot("cpu", 0, 7_000_000), now=5_000_001)
    stored = core.votes_to_persist()
    assert stored == PersistVotes({"cpu": StreamVotes(7_000_000, None, 0)})
    assert replies(core) == [(7_000_000, True, 7_000_000)]
    view = View(7_000_000, 0, ((0, 1),))
    core.receive("e1", ViewBallot("cpu", 0, 7_000_000, view), now=5_000_002)
    assert core.votes_to_persist() == PersistVotes({"cpu": StreamVotes(7_000_000, view, 0)})
    core.receive("e1", ViewBallot("cpu", 0, 6_000_000), now=5_000_003)
    assert core.votes_to_persist() is None            # a refusal changes nothing
    assert replies(core) == [(7_000_000, True, 7_000_000), (6_000_000, False, 7_000_000)]


def test_a_restarted_durable_voter_keeps_its_promise_below_its_start_time():
    """The issue's case: a voter restarted with a clock behind the term it promised must not
    promise a lower term again.  A volatile voter's only floor is its start time."""
    stored = {"cpu": StreamVotes(9_000_000, View(9_000_000, 0, ((0, 1),)), 0)}
    durable = voter(Votes(VoteMemory.DURABLE, stored))
    durable.receive("e1", ViewBallot("cpu", 1, 8_000_001), now=5_000_001)
    assert replies(durable) == [(8_000_001, False, 9_000_000)]
    forgetful = voter(Votes())
    forgetful.receive("e1", ViewBallot("cpu", 1, 8_000_001), now=5_000_001)
    assert replies(forgetful) == [(8_000_001, True, 8_000_001)]


def test_a_voter_whose_votes_are_unreadable_answers_no_ballot():
    core = voter(Votes(VoteMemory.LOST))
    core.receive("e1", ViewBallot("cpu", 0, 7_000_000), now=5_000_001)
    assert replies(core) == [] and core.votes_to_persist() is None
    assert core.counters["unanswered_ballots"] == 1 and core.counters["refused_ballots"] == 0


def test_a_restarted_candidate_proposes_above_every_term_its_node_stored():
    """Terms are clock readings; a node restarted with its clock behind must not reuse a term it
    proposed before (two proposals under one term break Paxos): the stored ``proposed`` bounds it."""
    net = MemoryNetwork(QUERY, PLACE, seed=0, options=VOTING, now=1_000_000, clocks={"e1": ClockSpec(3_000_000)})
    settle(net)
    first = net.votes["e1"].streams["cpu"].proposed
    assert first > net.clock("e2")                    # e1's clock runs 3 s ahead
    net.clocks["e1"] = net.clocks["e2"]                # e1 comes back with a clock 3 s slower, alone
    for node in ENTRIES:
        net.kill(node)
    net.restart("e1")
    settle(net, 20)                                   # it seeks a view (and finds no majority)
    assert net.votes["e1"].streams["cpu"].proposed > first
    [hosted] = [h for h in net.cores["e1"].hosted.values() if h.stamp]
    assert hosted.stamp.seen_term > first


# -- scenarios on the in-memory network ---------------------------------------------------------
class Watch:
    """Every timestamp each event got on the entry point's stream, as sent by any entry replica."""

    def __init__(self, net: MemoryNetwork):
        self.stamps: dict[tuple, set[int]] = {}
        net.on_send = self.on_send

    def on_send(self, src: str, dst: str, message) -> None:
        if type(message) is Batch and message.stream.source.name == "cpu":
            for record in message.records:
                self.stamps.setdefault(tuple(record[1:]), set()).add(record[0])

    def twice(self) -> dict[tuple, set[int]]:
        return {event: ts for event, ts in self.stamps.items() if len(ts) > 1}


def split_brain(durable: bool) -> tuple[Watch, MemoryNetwork]:
    """The stamper e1 (clock 2 s ahead, so its view's term is too) is cut from the other entry
    replicas; both restart with clocks behind that term and find a view of their own."""
    net = MemoryNetwork(QUERY, PLACE, seed=0, options=VOTING, now=1_000_000,
                        clocks={"e1": ClockSpec(2_000_000)}, durable_votes=durable)
    watch = Watch(net)
    settle(net)
    publish(net, 0, 4, PLACE)
    net.cut_link("e1", "e2")
    net.cut_link("e1", "e3")
    for node in ("e2", "e3"):
        net.kill(node)
        net.restart(node)
    settle(net, 10)
    publish(net, 4, 6, PLACE)
    settle(net, 10)
    for pair in list(net.cut):
        net.restore_link(*sorted(pair))
    settle(net, 30)
    publish(net, 10, 4, PLACE)
    close(net)
    return watch, net


def test_voters_that_forget_give_one_event_two_timestamps_under_skewed_clocks():
    """Why votes are durable: restarted voters that forgot their promise to e1's 2-s-ahead term
    promise e2's lower one, and two views stamp at once (the forgotten promise was their only
    guard beyond their start time).  e2's copies are late downstream (its clock is behind), so
    only the stream shows it — the property below watches the stream."""
    watch, _ = split_brain(durable=False)
    assert watch.twice(), "the scenario no longer shows what forgetting votes does"


def test_voters_that_remember_never_give_an_event_two_timestamps_under_skewed_clocks():
    watch, net = split_brain(durable=True)
    assert not watch.twice()
    got = Counter(record[1:] for record in net.delivered["out"])
    assert all(got[("s", float(i))] == 1 for i in range(14))


# -- the property -------------------------------------------------------------------------------
NODES = (*ENTRIES, "f1", "f2")
clocks = st.fixed_dictionaries({node: st.builds(ClockSpec, st.integers(-2_000_000, 2_000_000),
                                                st.integers(-300, 300)) for node in NODES})
#: Voters and candidates (the entry replicas' nodes) are restarted and isolated most often: a safety
#: failure needs a stamper cut off from its peers while both restart (the scenario above).
actions = st.one_of(
    st.tuples(st.just("isolate"), st.sampled_from(ENTRIES)),       # cut from the other entry replicas
    st.tuples(st.just("restart"), st.sampled_from(ENTRIES)),        # a live node is killed first
    st.tuples(st.just("restart"), st.sampled_from(ENTRIES)),
    st.tuples(st.just("restart"), st.sampled_from(("f1", "f2"))),
    st.tuples(st.just("crash"), st.sampled_from(NODES)),
    st.tuples(st.just("cut"), st.sampled_from(NODES), st.sampled_from((*NODES, "app"))),
    st.tuples(st.just("heal")),
    st.tuples(st.just("wait"), st.integers(1, 8)),
)


def run_schedule(durable: bool, seed: int, specs: dict, schedule: list, seen: Counter) -> None:
    net = MemoryNetwork(QUERY, PLACE, seed=seed, options=VOTING, now=5_000_000, clocks=specs,
                        durable_votes=durable)
    watch, terms = Watch(net), set()

    def note_views() -> None:
        terms.update(h.stamp.view.term for n in ENTRIES if n not in net.dead
                     for h in net.cores[n].hosted.values() if h.stamp and h.stamp.view)

    settle(net)
    published = 0
    for action in schedule:
        kind = action[0]
        if kind == "isolate":
            for other in ENTRIES:
                if other != action[1] and frozenset((action[1], other)) not in net.cut:
                    net.cut_link(action[1], other)
        elif kind == "cut" and action[1] != action[2] and frozenset(action[1:]) not in net.cut:
            net.cut_link(action[1], action[2])
        elif kind == "heal":
            for pair in list(net.cut):
                net.restore_link(*sorted(pair))
        elif kind == "crash" and action[1] not in net.dead:
            net.kill(action[1])
        elif kind == "restart":
            if action[1] not in net.dead:
                net.kill(action[1])
            net.restart(action[1])
        publish(net, published, 2, PLACE)
        published += 2
        settle(net, action[1] if kind == "wait" else 2)
        note_views()
    for pair in list(net.cut):
        net.restore_link(*sorted(pair))
    for node in sorted(net.dead):
        net.restart(node)
    settle(net, 30)
    publish(net, 1_000, 4, PLACE)
    close(net)
    note_views()
    seen["runs"] += 1
    seen["view changes"] += len(terms) - 1
    seen["restarts"] += net.restarts
    seen["runs with a restart and a view change"] += bool(net.restarts and len(terms) > 1)
    if currently_in_test_context():
        note(f"views {sorted(terms)}, restarts {net.restarts}")
    assert not watch.twice(), f"events carried with two timestamps: {watch.twice()}"
    assert all(len(ts) == 1 for ts in stamps(net).values())


def schedules(durable: bool, examples: int, seen: Counter):
    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(seed=st.integers(0, 1_000), specs=clocks, schedule=st.lists(actions, min_size=3, max_size=12))
    def check(seed, specs, schedule):
        run_schedule(durable, seed, specs, schedule, seen)
    return check


def test_skewed_clocks_and_restarted_voters_never_give_an_event_two_timestamps():
    """Random clock offsets (±2 s) and drifts (±300 ppm) per node; random cuts (an entry replica
    isolated from its peers, or any link), crashes and restarts of voters and candidates, events
    published throughout; then everything heals.  No event is ever carried with two timestamps,
    and the runs did exercise view changes and restarts."""
    seen: Counter = Counter()
    schedules(True, int(os.environ.get("VOTES_EXAMPLES", 60)), seen)()
    runs = seen["runs"]
    assert seen["restarts"] >= runs and seen["view changes"] >= runs, seen
    assert seen["runs with a restart and a view change"] >= runs // 2, seen


#: A schedule the property's search found with volatile votes (its 1,008th example when the test
#: runs alone, 66 s; where it lands depends on what ran before it in the process, so the search
#: itself is not the control): two events carried with two timestamps.
FOUND_BY_THE_SEARCH = (0, {"e2": ClockSpec(-120, -139), "e1": ClockSpec(-36077, -133), "e3": ClockSpec(-12140, 22),
                           "f2": ClockSpec(286846, -54), "f1": ClockSpec(-426, 97)},
                       [("isolate", "e2"), ("heal",), ("isolate", "e3"), ("restart", "f2"), ("crash", "e1"),
                        ("restart", "f1"), ("wait", 2), ("restart", "e2"), ("isolate", "e2"), ("heal",), ("heal",),
                        ("restart", "f1")])


def test_the_property_fails_when_voters_forget_and_holds_when_they_remember():
    """The property can fail: on a schedule its search found, volatile votes (a restarted voter
    promises anything above its start time) carry an event with two timestamps; the same schedule
    with durable votes does not."""
    with pytest.raises(AssertionError, match="two timestamps"):
        run_schedule(False, *FOUND_BY_THE_SEARCH, Counter())
    run_schedule(True, *FOUND_BY_THE_SEARCH, Counter())


def test_a_node_whose_votes_are_unreadable_never_seeks_a_view():
    """It cannot know which terms it proposed before: its entry replica joins views others decide
    but never stamps, even when the stamper dies."""
    place = {"cpu": ["e1", "e2"], "pass": ["f1"], "out": ["app"]}
    net = MemoryNetwork(QUERY, place, seed=1, options=replace(OPTIONS, voters=("e1", "e2", "f1")), now=1_000_000)
    settle(net)
    net.kill("e1")
    net.votes["e1"] = Votes(VoteMemory.LOST)
    net.restart("e1")
    settle(net, 20)
    roles = {n: h.stamp.role for n in ("e1", "e2") for h in net.cores[n].hosted.values() if h.stamp}
    assert roles == {"e1": StamperRole.MEMBER, "e2": StamperRole.STAMPING}
    net.kill("e2")
    settle(net, 30)
    [hosted] = [h for h in net.cores["e1"].hosted.values() if h.stamp]
    assert hosted.stamp.role is not StamperRole.STAMPING and hosted.stamp.candidacy is None
    assert net.cores["e1"].counters["unanswered_ballots"] >= 1
