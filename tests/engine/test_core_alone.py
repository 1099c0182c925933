"""Each component of the node core built alone, from what it reads — tables, an outbox, counters,
option values and callbacks — without a NodeCore (docs/architecture.md, "The node core's modules").
Callbacks are recorded, not simulated: each test checks what the component asked for."""

from __future__ import annotations

import ast
import random
from collections import deque
from pathlib import Path

import pytest

from replicast.engine.core.control import Control
from replicast.engine.core.configure import configure_pinned
from replicast.engine.core.control_policy import ControlPolicy
from replicast.engine.core.coordination import Coordination, CoordinationSetup
from replicast.engine.core.copy_tail import CopyTail
from replicast.engine.core.events import ControlRefused, DeadLetter, NodeOptions, ReplicaChanged
from replicast.engine.core.failover import AllFeed, Failover
from replicast.engine.core.heard import Heard
from replicast.engine.core.hosted import Hosted, Inbound, Origin, ReplicaKind, Route, Start
from replicast.engine.core.intents import (AdoptFrontier, CheckHorizon, CheckPort, Connected, ConnectPeer,
                                           DisconnectPeer, Emit, ForgetReplica, HoldAcks,
                                           ForgetStamped, ReleaseHeld, RequestInputs, RequestStream, Retrim,
                                           ServeParked, StartReplica, StartStamping, StepJoin, TrackStamped)
from replicast.engine.core.lifecycle import NOT_LIVE, Lifecycle
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.pairs import Pairs, Unpaired
from replicast.engine.core.receiver import Receiver
from replicast.engine.core.sender import Sender
from replicast.engine.core.stamp_state import StampState
from replicast.engine.core.stamper import Stamper
from replicast.engine.core.stamping import Stamping
from replicast.engine.core.states import (Basis, IllegalTransition, InboundState, PairRole, RebuildPhase, ReplicaState,
                                          RouteState, StamperEvent, StamperRole)
from replicast.engine.core.stats import COUNTERS
from replicast.engine.core.view_changes import TERM_STRIDE, ViewChanges
from replicast.engine.core.views import Candidacy, Outcome, VoteMemory, Voter, Votes
from replicast.engine.entry import EntryMode, EntryPoint
from replicast.engine.messages import (Batch, ConnectStream, Determinant, DeterminantAck, DeployReplica,
                                       DisconnectStream, Hold, JoinStamping, NoSnapshot, NotHosted, RemoveReplica,
                                       Resume, Snapshot, SnapshotRefusal, SnapshotRequest, Standby, StreamHead, View,
                                       ViewBallot, ViewDecided, ViewReply)
from replicast.engine.query_file import load_query
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.replica import OperatorReplica
from replicast.placement.workload import from_query

ROOT = Path(__file__).resolve().parents[2]
QUERY = load_query(ROOT / "examples/fig1.toml")
OPTIONS = NodeOptions(heartbeat_us=100, peer_timeout_us=600, join_timeout_us=1_000)


def counters() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


def operator(name: str, index: int, peers=("n1", "n2"), epoch: int = 1) -> Hosted:
    logic = OperatorReplica(QUERY.new_operator(name), [0] * len(QUERY.inputs_of(name)), QUERY.order_sensitive(name))
    return Hosted(ReplicaId(name, index), ReplicaKind.OPERATOR, logic, None, peers, epoch)


def entry(name: str, index: int, peers=("n1", "n2"), epoch: int = 1) -> Hosted:
    return Hosted(ReplicaId(name, index), ReplicaKind.ENTRY, None, EntryPoint(QUERY.streams[name], "source"), peers, epoch)


def exhaust(intents):
    """What a component's intents generator returns, and the intents it yielded (as the core routes them)."""
    yielded = []
    while True:
        try:
            yielded.append(next(intents))
        except StopIteration as done:
            return done.value, yielded


class Calls(list):
    """A callback that records its arguments."""

    def __call__(self, *args, **kwargs):
        self.append(args)


# -- the failure detector ----------------------------------------------------------------------------

def test_heard_alone_suspects_only_after_the_time_out_and_never_itself():
    heard = Heard("n1", started=100, peer_timeout_us=600)
    assert not heard.suspected("n2", 700) and heard.suspected("n2", 701)      # never heard: since the start
    heard.note("n2", 650)
    assert not heard.suspected("n2", 1250) and heard.suspected("n2", 1251)
    assert heard.last_heard("n2", 0) == 650 and heard.last_heard("n3", -1) == -1
    assert not heard.suspected("n1", 10**9)


# -- the mode plug-ins ---------------------------------------------------------------------------------

def failover_alone():
    hosted = {ReplicaId("load_trend", 1): operator("load_trend", 1)}
    s0 = StreamReplica(ReplicaId("load", 0), ReplicaId("load_trend", 1), 0)
    s1 = StreamReplica(ReplicaId("load", 1), ReplicaId("load_trend", 1), 0)
    inbound = {s0: Inbound("n2"), s1: Inbound("n3")}
    out, heard = Outbox("n1", {"n2", "n3"}), Heard("n1", 0, 600)
    count = counters()
    return Failover(hosted, inbound, out, count, heard), hosted, inbound, out, heard, count, s0, s1


def test_failover_alone_follows_its_preference_and_switches_when_the_detector_fires():
    failover, hosted, inbound, out, heard, count, s0, s1 = failover_alone()
    target = hosted[ReplicaId("load_trend", 1)]
    assert failover.follows(s1, target) and not failover.follows(s0, target)     # replica 1 prefers upstream 1
    failover.stand_by(s0, inbound[s0], target)
    assert inbound[s0].state is InboundState.STANDBY and out.messages == [("n2", Standby(s0, NO_PUNCTUATION))]
    heard.note("n2", 1000)
    intents = list(failover.check(now=1000))       # n3 never heard from: suspected
    assert count["failovers"] == 1 and failover.follows(s0, target)
    assert intents == [RequestStream(s0, inbound[s0], target)] and inbound[s0].state is InboundState.UNPOSITIONED
    assert [type(e) for e in out.events] == [ReplicaChanged]


def test_all_feed_alone_follows_everything_and_has_no_standbys():
    feed = AllFeed()
    s0 = StreamReplica(ReplicaId("load", 0), ReplicaId("load_trend", 1), 0)
    assert feed.follows(s0, operator("load_trend", 1))
    with pytest.raises(AssertionError):
        feed.stand_by(s0, Inbound("n2"), operator("load_trend", 1))


def test_pairs_alone_hold_output_until_the_backup_acknowledges():
    primary = operator("load_trend", 0)
    primary.origin = Origin.FIRST_START
    hosted = {primary.replica: primary}
    out, releases = Outbox("n1", {"n2"}), Calls()
    count = counters()
    pairs = Pairs(QUERY, hosted, out, count, Heard("n1", 0, 600), releases, Calls())
    pairs.attach(primary)
    assert pairs.pairs[primary.replica].role is PairRole.PRIMARY and primary.gate == 0
    assert set(pairs.handlers()) == {Determinant, DeterminantAck}
    pairs.tap_into(primary.replica, primary.logic)
    primary.logic.tap(primary.logic, 0, [(5, "s", 0.5)], None)
    (node, determinant), = out.messages
    assert node == "n2" and determinant.seq == 1 and count["determinants"] == 1
    assert pairs.held(primary) is None               # an intent: nothing goes out yet
    pairs.on_ack("n2", DeterminantAck(primary.replica, 1), now=0)
    assert releases == [(primary, 0)]


def test_unpaired_alone_holds_nothing():
    hosted = entry("cpu_a", 0)
    plug = Unpaired()
    assert plug.handlers() == {} and plug.held(hosted) == hosted.log.end and plug.snapshot(hosted, 0) is None


# -- sending and receiving ------------------------------------------------------------------------------

def test_sender_alone_answers_a_resume_and_sends_what_is_emitted():
    source = entry("cpu_a", 0)
    source.state, source.log.frontier = ReplicaState.LIVE, NO_PUNCTUATION
    stream = StreamReplica(source.replica, ReplicaId("load", 0), 0)
    source.routes[stream] = Route("n2", 0)
    out = Outbox("n1", {"n2"})
    sender = Sender({source.replica: source}, out, counters(), {}, retention_items=10, join_timeout_us=1_000,
                    standbys=False, pairs=Unpaired())
    sender.on_resume("n2", Resume(stream, None, 0), now=0)
    assert source.routes[stream].state is RouteState.ACTIVE
    assert out.messages == [("n2", StreamHead(stream, 1, 0, NO_PUNCTUATION, None))]
    sender.emit(source, [(5, "s", 0.5)], 5, now=5)
    assert isinstance(out.messages[-1][1], Batch) and out.messages[-1][1].offset == 0


def test_sender_alone_answers_a_stranger_with_not_hosted_and_counts_it():
    out, count = Outbox("n1", {"n2"}), counters()
    sender = Sender({}, out, count, {}, retention_items=10, join_timeout_us=1_000, standbys=False, pairs=Unpaired())
    stream = StreamReplica(ReplicaId("cpu_a", 0), ReplicaId("load", 0), 0)
    sender.on_resume("n2", Resume(stream, None, 0), now=0)
    assert count["stale_requests"] == 1 and type(out.messages[0][1]).__name__ == "NotHosted"


def test_receiver_alone_holds_while_joining_then_follows_a_head_and_acknowledges():
    target = operator("load", 0)
    stream = StreamReplica(ReplicaId("cpu_a", 0), target.replica, 0)
    inbound = {stream: Inbound("n2")}
    out, acks, emits = Outbox("n1", {"n2"}), Calls(), Calls()
    receiver = Receiver(QUERY.schemas, {target.replica: target}, inbound, out, counters(), AllFeed(),
                        ack=acks, emit=emits)
    receiver.request(stream, inbound[stream], target)
    assert inbound[stream].state is InboundState.HOLDING and out.messages == [("n2", Hold(stream))]
    target.state = ReplicaState.LIVE
    receiver.on_peer_up("n2")                          # asks again, now for the stream itself
    assert out.messages[-1] == ("n2", Resume(stream, None, 0))
    checks = list(receiver.on_head("n2", StreamHead(stream, 7, 0, NO_PUNCTUATION, None), now=1))
    assert inbound[stream].state is InboundState.FOLLOWING and checks == [CheckPort(target, 0)]
    assert receiver.on_batch("n2", Batch(stream, 7, 0, [(5, "s", 0.5)], 10), now=2) == ()   # live: no horizon
    assert acks == [("n2", stream, 7, 2, 2)] and emits and inbound[stream].next == 2


def test_receiver_alone_has_a_rebuilding_port_adopt_its_frontier_before_the_stream_is_positioned():
    """What it asks of the lifecycle comes back as intents, each routed before the receiver goes
    on (engine.core.intents rule 2): the adopted frontier while the stream replica is not yet
    positioned, then the port check, then — a punctuation moved the frontier — the horizon check."""
    target = operator("load_trend", 0)                               # one input port
    target.state = ReplicaState.REBUILDING
    stream = StreamReplica(ReplicaId("load", 0), target.replica, 0)
    inbound = {stream: Inbound("n2")}
    receiver = Receiver(QUERY.schemas, {target.replica: target}, inbound, Outbox("n1", {"n2"}), counters(),
                        AllFeed(), ack=Calls(), emit=Calls())
    head = receiver.on_head("n2", StreamHead(stream, 7, 0, 42, None), now=1)
    assert next(head) == AdoptFrontier(target, 0, 42)
    assert inbound[stream].state is InboundState.UNPOSITIONED         # the lifecycle adopts first …
    target.logic.filters[0].adopt(42)                                 # … as its adopt() would
    assert list(head) == [CheckPort(target, 0)] and inbound[stream].state is InboundState.FOLLOWING
    assert receiver.on_batch("n2", Batch(stream, 7, 0, [], 50), now=2) == (CheckHorizon(target),)


def test_receiver_alone_has_a_vanished_streams_port_choose_again_then_checks_it():
    failover, hosted, inbound, out, heard, count, s0, s1 = failover_alone()
    target = hosted[ReplicaId("load_trend", 1)]
    target.state = ReplicaState.LIVE
    receiver = Receiver(QUERY.schemas, hosted, inbound, out, count, failover, ack=Calls(), emit=Calls())
    receiver.request(s0, inbound[s0], target)                   # not preferred: stands by
    receiver.request(s1, inbound[s1], target)
    assert inbound[s0].state is InboundState.STANDBY
    intents = list(receiver.on_not_hosted("n3", NotHosted(s1), now=5))
    # The failover plug-in's choice first (its preference again: a later head may position it, receiver
    # rule 6), then the port check that lets the replica rejoin if nothing else can advance the port.
    assert intents == [RequestStream(s1, inbound[s1], target), CheckPort(target, 0)]
    assert inbound[s1].state is InboundState.VANISHED and count["vanished_streams"] == 1


def test_failover_alone_asks_to_check_a_port_whose_stream_is_complete_above_it_and_has_no_other():
    failover, hosted, inbound, out, heard, count, s0, s1 = failover_alone()
    target = hosted[ReplicaId("load_trend", 1)]
    target.state = ReplicaState.LIVE
    out.connected.discard("n2")                                 # the other upstream is unreachable
    assert failover.follows(s1, target)
    dedup = target.logic.filters[0]
    inbound[s1].state, inbound[s1].index = InboundState.FOLLOWING, dedup.add_replica(100)   # complete above 100
    heard.note("n3", 1000)
    assert list(failover.check(now=1000)) == [CheckPort(target, 0)] and count["failovers"] == 0


def test_the_node_core_routes_every_kind_of_intent():
    from typing import get_args

    from replicast.engine.core.intents import Intent
    from replicast.engine.core.node import NodeCore
    core = NodeCore("n1", QUERY, OPTIONS, now=0)
    assert set(core._routes) == set(get_args(Intent))         # noqa: SLF001


# -- the lifecycle --------------------------------------------------------------------------------------

def lifecycle_alone(hosted, inbound, out, count, new_logic=lambda r: None) -> Lifecycle:
    """A lifecycle with no other component: what it asks of them comes back as intents."""
    return Lifecycle(OPTIONS, hosted, inbound, out, count, failover=AllFeed(), pairs=Unpaired(),
                     new_epoch=lambda now, previous=None: now, new_logic=new_logic)


def test_lifecycle_alone_rebuilds_a_replica_without_peers_and_asks_for_its_inputs():
    target = operator("load", 0, peers=("n1",))
    hosted = {target.replica: target}
    stream = StreamReplica(ReplicaId("cpu_a", 0), target.replica, 0)
    inbound = {stream: Inbound("n2")}
    out, count = Outbox("n1", {"n2"}), counters()
    lifecycle = lifecycle_alone(hosted, inbound, out, count)
    _, intents = exhaust(lifecycle.start(target, now=0))
    assert target.state is ReplicaState.REBUILDING
    assert [e.new for e in out.events if isinstance(e, ReplicaChanged)] == ["rebuilding"]
    assert intents == [RequestInputs(target)] and out.messages == []      # the receiver asks, once routed


def test_lifecycle_alone_refuses_a_snapshot_with_a_typed_reason_and_notes_a_rebuilding_donor():
    """Lifecycle rule 2-3: a donor that is not live answers why as a ``SnapshotRefusal``; the
    joiner notes the donor that said it rebuilds (reported with its own rebuild), and only that one."""
    rebuilding, joiner = operator("load", 0, peers=("n1",)), operator("load", 1, peers=("n1", "n2", "n3"))
    hosted = {rebuilding.replica: rebuilding, joiner.replica: joiner}
    out, count = Outbox("n1", {"n2"}), counters()
    lifecycle = lifecycle_alone(hosted, {}, out, count)
    exhaust(lifecycle.start(rebuilding, now=0))
    assert rebuilding.state is ReplicaState.REBUILDING
    out.messages.clear()
    exhaust(lifecycle.on_snapshot_request("n2", SnapshotRequest(joiner.replica, rebuilding.replica), now=1))
    exhaust(lifecycle.on_snapshot_request("n2", SnapshotRequest(joiner.replica, ReplicaId("load", 2)), now=1))
    assert out.messages == [("n2", NoSnapshot(joiner.replica, rebuilding.replica, SnapshotRefusal.REBUILDING)),
                            ("n2", NoSnapshot(joiner.replica, ReplicaId("load", 2), SnapshotRefusal.NOT_HOSTED))]
    assert set(NOT_LIVE) == set(ReplicaState) - {ReplicaState.LIVE}     # every state that is not live has a reason

    exhaust(lifecycle.start(joiner, now=2))
    noted = []
    for refusal in SnapshotRefusal:                         # a donor left to ask keeps it joining
        join = joiner.joining
        join.asked, join.donors, join.rebuilding = (rebuilding.replica, "n1"), [(ReplicaId("load", 2), "n2")], []
        exhaust(lifecycle.on_no_snapshot("n1", NoSnapshot(joiner.replica, rebuilding.replica, refusal), now=3))
        noted += [refusal] * len(joiner.joining.rebuilding)
    assert noted == [SnapshotRefusal.REBUILDING]


def test_lifecycle_alone_asks_a_peer_for_a_snapshot_once_its_node_is_connected():
    target = operator("load", 1)
    hosted = {target.replica: target}
    out, count = Outbox("n2", set()), counters()
    lifecycle = lifecycle_alone(hosted, {}, out, count)
    _, intents = exhaust(lifecycle.start(target, now=0))
    assert target.state is ReplicaState.JOINING and out.messages == []          # its peer's node is not up
    assert intents == [RequestInputs(target)]                                    # the receiver holds its inputs
    out.connected.add("n1")
    assert exhaust(lifecycle.on_peer_change("n1", now=10)) == (None, [])
    (node, request), = out.messages
    assert node == "n1" and request.donor == ReplicaId("load", 0)


def test_lifecycle_alone_names_what_an_incarnation_is_built_from_and_where_a_rebuild_is():
    """Lifecycle rules 2-4 as states (engine/core/states.py, ``Basis`` and ``RebuildPhase``): a join
    restores a snapshot (SNAPSHOT, at its ports' punctuations); stuck again before any port moved
    past it, the rejoin rebuilds (DEAD_END, same punctuations), ADOPTING until its port adopts a
    frontier, then CATCHING_UP to the horizon; any other rejoin starts from SCRATCH."""
    target, donor = operator("load_trend", 1), operator("load_trend", 0)
    donor.logic.filters[0].adopt(30)                          # the donor's port stands at 30
    hosted = {target.replica: target}
    out, count = Outbox("n2", {"n1"}), counters()
    lifecycle = lifecycle_alone(hosted, {}, out, count, new_logic=lambda r: operator(r.name, r.index).logic)
    exhaust(lifecycle.start(target, now=0))
    assert target.basis is Basis.SCRATCH and target.basis_at == ()
    state = lifecycle.snapshot(donor)
    _, intents = exhaust(lifecycle.on_snapshot("n1", Snapshot(target.replica, donor.replica, state), now=5))
    assert target.state is ReplicaState.LIVE and target.basis is Basis.SNAPSHOT and target.basis_at == (30,)
    assert intents == [RequestInputs(target), ServeParked(target)]     # resume its inputs, answer what waited
    _, intents = exhaust(lifecycle.rejoin(target, now=10, reason="its port cannot advance"))
    assert target.basis is Basis.DEAD_END and target.basis_at == (30,)
    assert target.state is ReplicaState.REBUILDING and target.rebuild is RebuildPhase.ADOPTING
    assert intents == [Retrim(target), RequestInputs(target)]           # its log restarts; it rebuilds
    _, intents = exhaust(lifecycle.adopt(target, 0, 40, now=11))
    assert target.rebuild is RebuildPhase.CATCHING_UP and target.horizon > NO_PUNCTUATION
    assert [type(i) for i in intents] == [Emit, ServeParked] and intents[0].hosted is target
    with pytest.raises(IllegalTransition):                    # one horizon per rebuild
        exhaust(lifecycle.adopt(target, 0, 50, now=12))
    exhaust(lifecycle.rejoin(target, now=20, reason="again"))          # not from a snapshot: from scratch
    assert target.basis is Basis.SCRATCH and target.basis_at == ()


def test_lifecycle_alone_returns_what_an_entry_point_and_a_donor_ask_of_the_others():
    """Lifecycle rules 1 and 5 as intents, in the order of their effects: an entry-stamped entry point
    starts through the stamper; a source-stamped one without peers claims its stream (serve what
    waited, release what it held, ask for inputs); a donor holds its acknowledgements upstream at
    the positions it gives away."""
    stamped, claimed = entry("cpu_a", 0, peers=("n1",)), entry("cpu_b", 0, peers=("n1",))
    stamped.stamp = StampState({0: "n1"}, {})
    donor = operator("load", 0)
    donor.state = ReplicaState.LIVE
    stream = StreamReplica(ReplicaId("cpu_a", 1), donor.replica, 0)        # its upstream is on n3
    inbound = {stream: Inbound("n3")}
    inbound[stream].state, inbound[stream].next = InboundState.FOLLOWING, 7
    hosted = {h.replica: h for h in (stamped, claimed, donor)}
    out, count = Outbox("n1", {"n2", "n3"}), counters()
    lifecycle = lifecycle_alone(hosted, inbound, out, count)
    assert exhaust(lifecycle.start(stamped, now=0)) == (None, [StartStamping(stamped)])
    assert exhaust(lifecycle.start(claimed, now=0)) == (None, [ServeParked(claimed),
                                                               ReleaseHeld(claimed, NO_PUNCTUATION, None),
                                                               RequestInputs(claimed)])
    assert claimed.state is ReplicaState.LIVE and out.messages == []
    _, intents = exhaust(lifecycle.on_snapshot_request("n2", SnapshotRequest(ReplicaId("load", 1), donor.replica),
                                                       now=10))
    assert intents == [HoldAcks(stream, 7, 10 + OPTIONS.join_timeout_us)]
    assert [type(m) for _, m in out.messages] == [Snapshot]


# -- control ----------------------------------------------------------------------------------------------

def test_control_policy_alone_takes_the_node_itself_and_the_coordinator_only():
    stream = StreamReplica(ReplicaId("cpu_a", 0), ReplicaId("load", 0), 0)
    inbound = {stream: Inbound("n2")}
    policy = ControlPolicy("n1", {}, inbound, lambda s: False)
    deploy = DeployReplica(ReplicaId("load", 0), ("n1",))
    assert policy.refusal("n1", deploy) is None
    assert "no coordinator" in policy.refusal("n3", deploy)
    policy.coordinator = "n3"
    assert policy.refusal("n3", deploy) is None
    assert policy.refusal("n2", DisconnectStream(stream)) is None          # its other end
    assert "whose other end is n2" in policy.refusal("n4", DisconnectStream(stream))


def test_control_alone_refuses_what_it_cannot_apply_and_touches_nothing_else():
    out, count = Outbox("n1", set()), counters()
    # The collaborators a refusal never reaches are left out (None): a refusal touches nothing else.
    control = Control(QUERY, OPTIONS, {}, {}, out, count, start=Start.FRESH, new_epoch=lambda now: now,
                      failover=AllFeed(), pairs=Unpaired())
    assert exhaust(control.deploy("n1", DeployReplica(ReplicaId("nope", 0), ("n1",)), now=0)) == (None, [])
    assert exhaust(control.remove("n1", RemoveReplica(ReplicaId("load", 0)), now=0)) == (None, [])
    assert control.guarded(control.deploy)("n9", DeployReplica(ReplicaId("load", 0), ("n1",)), 0) is None
    assert count["refused_control"] == 3 and [type(e) for e in out.events] == [ControlRefused] * 3
    assert out.events[-1].reason.startswith("DeployReplica from n9")    # each refusal is its event, one line


@pytest.mark.parametrize("start, src, origin", [(Start.FRESH, "n1", Origin.FIRST_START),
                                                 (Start.RESTARTED, "n1", Origin.LATER),
                                                 (Start.FRESH, "n3", Origin.LATER)])
def test_control_alone_deploys_a_first_starts_own_replicas_as_first_start_only(start, src, origin):
    """How the node's process began (``Start``, from the driver) decides what its own configuration
    deploys: a fresh start's entry points claim their whole stream (lifecycle rule 5), a restarted
    node's do not, nor does anything a coordinator deploys."""
    out, count = Outbox("n1", set()), counters()
    control = Control(QUERY, OPTIONS, {}, {}, out, count, start=start, new_epoch=lambda now: now,
                      failover=AllFeed(), pairs=Unpaired())
    _, intents = exhaust(control.deploy(src, DeployReplica(ReplicaId("cpu_a", 0), ("n1",)), now=0))   # (past control rule 5)
    (hosted,) = {i.hosted for i in intents}
    assert intents == [TrackStamped(hosted), StartReplica(hosted)]     # the stamper and lifecycle, once routed
    assert hosted.origin is origin and count["refused_control"] == 0


def test_control_alone_deploys_each_replica_with_its_kind_which_reads_as_its_name():
    """``Hosted.kind`` is a :class:`ReplicaKind`, fixed at deployment by the query's part it comes
    from; string-valued, so logs, snapshots and metrics labels read as they did."""
    out, count, started = Outbox("n1", set()), counters(), []
    control = Control(QUERY, OPTIONS, {}, {}, out, count, start=Start.FRESH, new_epoch=lambda now: now,
                      failover=AllFeed(), pairs=Unpaired())
    for name in ("cpu_a", "load", "alerts"):
        _, intents = exhaust(control.deploy("n1", DeployReplica(ReplicaId(name, 0), ("n1",)), now=0))
        started += [i.hosted for i in intents if isinstance(i, StartReplica)]
    kinds = [ReplicaKind.ENTRY, ReplicaKind.OPERATOR, ReplicaKind.APPLICATION]
    assert len(started) == 3 and all(h.kind is kind for h, kind in zip(started, kinds))   # the members, not equal text
    assert [f"{h.kind}" for h in started] == ["entry", "operator", "application"] == [str(h.kind) for h in started]


def test_control_alone_returns_the_lifecycles_part_of_a_removal_and_a_disconnection():
    """Control rules 3 and 6: removing a replica asks the lifecycle to forget it before the other
    ends are told; disconnecting a live replica's input asks for its port to be checked — as intents,
    the control holds no lifecycle."""
    target = operator("load", 0, peers=("n1",))
    target.state = ReplicaState.LIVE
    stream = StreamReplica(ReplicaId("cpu_a", 0), target.replica, 0)
    hosted, inbound = {target.replica: target}, {stream: Inbound("n2")}
    out, count = Outbox("n1", {"n2"}), counters()
    control = Control(QUERY, OPTIONS, hosted, inbound, out, count, start=Start.FRESH, new_epoch=lambda now: now,
                      failover=AllFeed(), pairs=Unpaired())
    assert exhaust(control.disconnect("n1", DisconnectStream(stream), now=0)) == (None, [CheckPort(target, 0)])
    assert stream not in inbound
    inbound[stream] = Inbound("n2")
    removal = control.remove("n1", RemoveReplica(target.replica), now=1)
    assert next(removal) == ForgetReplica(target.replica) and out.messages == []     # before any other end hears
    assert next(removal) == ForgetStamped(target.replica)
    assert exhaust(removal) == (None, []) and out.messages == [("n2", DisconnectStream(stream))]


def test_control_alone_returns_what_a_connection_asks_of_the_sender_the_receiver_and_the_stamper():
    """Control rules 2 and 7: a stream replica connected from here retains its log and answers an early
    request (sender); one connected to here is requested (receiver), and again while its sender's
    answer is still awaited; entry → entry in entry-stamped mode only tells the stamper where a peer is."""
    source, target = entry("cpu_a", 0, peers=("n1",)), operator("load", 0, peers=("n1",))
    stamped = entry("cpu_b", 0, peers=("n1", "n2"))
    stamped.stamp = StampState({0: "n1"}, {})
    hosted, inbound = {h.replica: h for h in (source, target, stamped)}, {}
    out, count = Outbox("n1", {"n2"}), counters()
    control = Control(QUERY, NodeOptions(entry_modes={"cpu_b": "entry"}), hosted, inbound, out, count,
                      start=Start.FRESH, new_epoch=lambda now: now, failover=AllFeed(), pairs=Unpaired())
    outward = StreamReplica(source.replica, ReplicaId("load", 1), 0)
    _, intents = exhaust(control.connect("n1", ConnectStream(outward, "n1", "n2"), now=0))
    route = source.routes[outward]
    assert intents == [Retrim(source), Connected(outward, route)] and route.node == "n2"
    inward = StreamReplica(ReplicaId("cpu_a", 1), target.replica, 0)
    _, intents = exhaust(control.connect("n1", ConnectStream(inward, "n2", "n1"), now=0))
    assert intents == [RequestStream(inward, inbound[inward], target)]
    inbound[inward].state = InboundState.UNPOSITIONED                      # rule 7: asked again
    assert exhaust(control.connect("n1", ConnectStream(inward, "n2", "n1"), now=1))[1] == intents
    peer = StreamReplica(ReplicaId("cpu_b", 1), stamped.replica, 0)
    assert exhaust(control.connect("n1", ConnectStream(peer, "n2", "n1"), now=2)) == (None,
                                                                                 [ConnectPeer(stamped, 1, "n2")])
    assert exhaust(control.disconnect("n1", DisconnectStream(peer), now=3)) == (None, [DisconnectPeer(stamped, 1)])
    assert count["refused_control"] == 0 and out.messages == []


@pytest.mark.parametrize("component", [Lifecycle, Control])
def test_the_lifecycle_and_the_control_are_handed_no_sibling_component(component):
    """Deliver 3 (docs/architecture.md, intents): what they ask of the sender, the receiver, the
    stamper, the stamping or the lifecycle comes back as intents, so none of those is handed to them."""
    import inspect
    given = set(inspect.signature(component).parameters)
    assert given.isdisjoint({"sender", "receiver", "stamper", "stamping", "lifecycle", "request_inputs",
                             "hold_acks", "stamper_start", "release_held"})


def test_node_options_hold_entry_modes_as_the_enum_and_refuse_any_other_text():
    """Who stamps a stream is an :class:`EntryMode` inside the core; the text of a configuration is
    taken at the boundary (``NodeOptions``, ``configure``) and anything else is refused by name."""
    options = NodeOptions(entry_modes={"cpu_a": "entry", "cpu_b": EntryMode.SOURCE})
    assert options.entry_modes == {"cpu_a": EntryMode.ENTRY, "cpu_b": EntryMode.SOURCE}
    assert all(type(mode) is EntryMode for mode in options.entry_modes.values())   # members, not equal text
    with pytest.raises(ValueError, match=r"entry_modes\['cpu_a'\]: 'stamped' is not one of source, entry"):
        NodeOptions(entry_modes={"cpu_a": "stamped"})
    placement = {"cpu_a": ["n1", "n2"], "cpu_b": ["n1", "n2"], "alerts": ["n1"]}
    peers = [m.stream for m in configure_pinned(QUERY, placement, "n1", {"cpu_a": "entry", "cpu_b": "source"})
             if isinstance(m, ConnectStream)]
    assert {s.source.name for s in peers} == {"cpu_a"} and len(peers) == 2       # entry → entry, both ways


# -- view changes (entry-stamped mode) ---------------------------------------------------------------------

class StampedStandIn:
    """The :class:`StampedReplicas` a :class:`ViewChanges` acts through, over a table of hosted
    replicas: lookups answered, every other call recorded by name."""

    def __init__(self, *hosted: Hosted):
        self.table, self.calls = {h.replica: h for h in hosted}, []

    def hosted(self, stream, index):
        return self.table.get(ReplicaId(stream, index))

    def states(self, stream=None):
        return [(h, h.stamp) for h in self.table.values() if stream in (None, h.replica.name)]

    def __getattr__(self, name):
        if name not in {"ask_to_join", "live", "set_role", "stamp", "send_segment", "commit", "emit"}:
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append((name, *args))


def stamped_entry(index: int, peers: dict[int, str]) -> Hosted:
    hosted = Hosted(ReplicaId("cpu_a", index), ReplicaKind.ENTRY, None, EntryPoint(QUERY.streams["cpu_a"], "entry"),
                    tuple(peers.values()), 1)
    hosted.stamp = StampState(dict(peers), dict.fromkeys(peers, 1))
    return hosted


@pytest.mark.parametrize("memory", [VoteMemory.VOLATILE, VoteMemory.LOST])
def test_view_changes_alone_seek_the_first_view_and_take_it_once_a_majority_accepted(memory):
    """view_changes rules 4-6 on a stand-in for the stamper: at the start, every peer heard, the
    lowest-indexed replica seeks the first view with every replica as member — its term stored with
    the votes before the ballots leave (views rule 2) — proposes once a majority promised, and once a
    majority accepted becomes the stamper: LIVE, ELECTED, each member and the other voters told, a
    punctuation stamped and committed.  A node whose votes were lost seeks nothing."""
    options = NodeOptions(heartbeat_us=100, peer_timeout_us=600, voters=("n1", "n2", "n3"))
    out, count = Outbox("n1", {"n2", "n3"}), counters()
    hosted = stamped_entry(0, {0: "n1", 1: "n2"})
    replicas = StampedStandIn(hosted)
    views = ViewChanges(replicas, options, out, count, 0, Voter({"cpu_a"}, 0, count, out, Votes(memory)))
    views.review(hosted, now=0)
    if memory is VoteMemory.LOST:
        assert out.messages == [] and not out.local and hosted.stamp.act_at is None and replicas.calls == []
        return
    term = TERM_STRIDE                                # above the clock (0), replica index 0, not a stamper yet
    ballot = ViewBallot("cpu_a", 0, term)
    assert out.local == deque([("n1", ballot)]) and out.messages == [("n2", ballot), ("n3", ballot)]
    assert views.voter.proposed("cpu_a") == term
    out.messages.clear()

    for voter in ("n2", "n3"):
        assert list(views.on_reply(voter, ViewReply("cpu_a", 0, term, 1, True, term, None), now=1)) == []
    view = View(term, 0, ((0, 1), (1, 1)))
    assert [m for _, m in out.messages] == [ViewBallot("cpu_a", 0, term, view)] * 2
    out.messages.clear()
    for voter in ("n2", "n3"):
        assert list(views.on_reply(voter, ViewReply("cpu_a", 0, term, 2, True, term, view), now=3)) == []

    assert hosted.stamp.view == view and hosted.stamp.candidacy is None
    assert replicas.calls == [("live", hosted, f"stamper of view {term}"), ("set_role", hosted, StamperEvent.ELECTED),
                              ("stamp", hosted, [], 2, 3), ("commit", hosted, 3)]
    assert out.messages == [("n2", ViewDecided("cpu_a", 1, view, 0, None, -1, 0)),     # the member: from the start
                            ("n3", ViewDecided("cpu_a", -1, view, 0, None, -1, 0))]    # a voter only: learns it


def test_view_changes_do_not_import_the_stamper_that_holds_them_even_for_typing():
    """The stamper holds its view changes; they reach it through :class:`StampedReplicas` only."""
    tree = ast.parse((ROOT / "engine/core/view_changes.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "replicast.engine.core.stamper" not in imported and "replicast.engine.core.stamp_state" in imported


# -- sources and stamping -----------------------------------------------------------------------------------

def test_stamping_alone_dead_letters_an_unknown_stream_and_emits_a_live_entry_points_records():
    source = entry("cpu_a", 0)
    source.state, source.log.frontier = ReplicaState.LIVE, NO_PUNCTUATION
    out, count, emits = Outbox("n1", set()), counters(), Calls()
    seals = Calls()
    stamping = Stamping(QUERY.streams, {source.replica: source}, out, count, emit=emits, stamp=Calls(), seal=seals)
    assert exhaust(stamping.on_source("nope", b"{}", now=0)) == (False, [])
    assert count["unknown_streams"] == 1 and isinstance(out.events[0], DeadLetter)
    assert exhaust(stamping.on_source("cpu_a", b'{"ts": 5, "server": "s", "load": 0.5}', now=10)) == (True, [])
    (hosted, records, punctuation, now), = emits
    assert hosted is source and [r[1:] for r in records] == [("s", 0.5)] and now == 10
    assert len(seals) == 1 and seals[0][0] is source            # its seals follow its records (none here)


def test_stamping_alone_asks_the_lifecycle_to_move_a_join_on_once_a_joining_entry_point_holds_something():
    joiner = entry("cpu_a", 1)                                   # JOINING: it holds what its source sends
    out, count, emits = Outbox("n2", set()), counters(), Calls()
    stamping = Stamping(QUERY.streams, {joiner.replica: joiner}, out, count, emit=emits, stamp=Calls(), seal=Calls())
    payload = b'{"ts": 5, "server": "s", "load": 0.5}'
    assert exhaust(stamping.on_source("cpu_a", payload, now=10)) == (True, [StepJoin(joiner)])
    assert exhaust(stamping.on_source("cpu_a", payload, now=11)) == (True, [])     # only its first item
    assert emits == [] and len(joiner.held) == 2


def test_stamper_alone_knows_its_peer_streams_and_counts_stale_acks():
    options = NodeOptions(entry_modes={"cpu_a": "entry"})
    out, count = Outbox("n1", set()), counters()
    from replicast.engine.core.views import Voter
    stamper = Stamper(QUERY, options, {}, out, count, 1, emit=Calls(), serve_parked=Calls(),
                      voter=Voter(set(QUERY.streams), 1, count, out))
    assert stamper.peer_stream(StreamReplica(ReplicaId("cpu_a", 0), ReplicaId("cpu_a", 1), 0))
    assert not stamper.peer_stream(StreamReplica(ReplicaId("cpu_b", 0), ReplicaId("cpu_b", 1), 0))
    from replicast.engine.messages import StampAck
    stamper.on_ack("n2", StampAck("cpu_a", 0, 1, 5, 3), now=0)
    assert count["stale_stamps"] == 1 and not stamper.any


def test_stamper_alone_starts_a_replica_outside_its_view_asking_its_peers_and_remembers_what_its_source_sends():
    """Stamper rules 1-2: a started entry-stamped replica is outside the view, its stream waiting; it
    asks every peer to join it, and stamps nothing until a view makes it the stamper — what its
    source sends is remembered (no emission, nothing sent), not rejected."""
    options = NodeOptions(heartbeat_us=100, entry_modes={"cpu_a": "entry"})
    out, count, emitted = Outbox("n1", {"n2", "n3"}), counters(), Calls()
    target = entry("cpu_a", 0, peers=("n1", "n2", "n3"), epoch=5)
    target.entry = EntryPoint(QUERY.streams["cpu_a"], EntryMode.ENTRY)
    target.stamp = StampState({0: "n1", 1: "n2", 2: "n3"}, {})
    stamper = Stamper(QUERY, options, {target.replica: target}, out, count, 1, emit=emitted, serve_parked=Calls(),
                      voter=Voter(set(QUERY.streams), 1, count, out))
    stamper.track(target)
    stamper.start(target, now=1_000)
    assert target.stamp.role is StamperRole.OUTSIDE and not stamper.any
    assert out.messages == [("n2", JoinStamping("cpu_a", 0, 5)), ("n3", JoinStamping("cpu_a", 0, 5))]
    out.messages.clear()
    assert stamper.on_items(target, [{"server": "s", "load": 0.5}], now=2_000) == []
    assert emitted == [] and out.messages == [] and target.stamp.next == 0    # not stamped: remembered
    assert target.entry.pending == {("s", 0.5): 1}
    stamper.forget(target.replica)
    assert list(stamper.states()) == []


def test_candidacy_alone_needs_a_majority_in_each_phase_and_proposes_the_latest_accepted_view():
    """views rule 2 (Paxos, §IV-A's stamper choice): answers of another term, another phase or a
    stranger are ignored; one refusal ends the candidacy; a majority of promises brings the latest
    accepted view; a majority of accepts decides the proposal."""
    candidacy = Candidacy(term=7, voters=("n1", "n2", "n3"), deadline=100)
    old, newer = View(3, 1, ((1, 1),)), View(5, 2, ((2, 1),))
    assert candidacy.ballot("cpu_a", 0) == ViewBallot("cpu_a", 0, 7, None)
    reply = lambda term, phase, ok=True, accepted=None: ViewReply("cpu_a", 0, term, phase, ok, term, accepted)
    assert candidacy.on_reply("n1", reply(6, 1)) is Outcome.WAITING          # another term
    assert candidacy.on_reply("n9", reply(7, 1)) is Outcome.WAITING          # not a voter
    assert candidacy.on_reply("n1", reply(7, 2)) is Outcome.WAITING          # not this phase
    assert candidacy.on_reply("n1", reply(7, 1, accepted=newer)) is Outcome.WAITING
    assert candidacy.on_reply("n1", reply(7, 1, accepted=newer)) is Outcome.WAITING   # the same voter again
    assert candidacy.on_reply("n2", reply(7, 1, accepted=old)) is Outcome.PROMISED
    assert candidacy.latest == newer                                         # the latest accepted, not the last
    proposal = View(7, 0, ((0, 1), (2, 1)), base=newer.term)
    candidacy.propose(proposal)
    assert candidacy.ballot("cpu_a", 0) == ViewBallot("cpu_a", 0, 7, proposal)
    assert candidacy.on_reply("n3", reply(7, 1)) is Outcome.WAITING          # a late promise
    assert candidacy.on_reply("n3", reply(7, 2)) is Outcome.WAITING
    assert candidacy.on_reply("n2", reply(7, 2, ok=False)) is Outcome.REFUSED
    assert candidacy.on_reply("n1", reply(7, 2)) is Outcome.DECIDED


def test_copy_tail_alone_matches_a_sources_records_in_order_and_is_done_once_past_the_copy():
    """copy_tail rules 1-2: the copy's records are met in order (one met later means those before
    it never came); a record the copy does not carry, or a clear, ends it for good."""
    a, b, c = (10, "a"), (20, "b"), (30, "c")
    assert CopyTail.none().done and CopyTail.none().last_ts == NO_PUNCTUATION
    tail = CopyTail([a, b, b, c])
    assert tail.last_ts == 30 and not tail.done
    assert tail.carries(b) and not tail.done                 # a never came: skipped
    assert tail.carries(b) and tail.carries(c) and tail.done
    tail = CopyTail([a, b])
    assert not tail.carries((15, "x")) and tail.done         # not in the copy: past it
    assert not tail.carries(b)                               # done is final
    tail = CopyTail([a, b])
    tail.clear()
    assert tail.done and not tail.carries(a)


def test_key_seal_relay_alone_drops_seals_of_a_stream_it_does_not_follow():
    from replicast.engine.core.key_seals import KeySealRelay
    from replicast.engine.messages import KeySeals
    target = operator("load", 0)
    stream = StreamReplica(ReplicaId("cpu_a", 0), target.replica, 0)
    emits = Calls()
    relay = KeySealRelay({target.replica: target}, {stream: Inbound("n2")}, Outbox("n1", {"n2"}), counters(),
                         emit=emits)
    relay.on_seals("n2", KeySeals(stream, 7, 0, ((("s",), 5),)), now=0)      # not positioned: stale
    assert relay.stale == 1 and relay.received == 0 and emits == []
    source = entry("cpu_a", 0)
    relay.emit(source, [])                                                    # nothing to seal: nothing sent
    assert relay.out.messages == []


# -- coordination -----------------------------------------------------------------------------------------

def test_coordination_alone_elects_itself_without_peers_and_reports_to_itself():
    servers = ("n1", "n2")
    setup = CoordinationSetup(servers, from_query(QUERY, {name: 0 for name in (*QUERY.streams, *QUERY.applications)}),
                              random.Random(1))
    out, told, reports = Outbox("n1", set()), Calls(), Calls()

    def report(now, load, capacity):
        reports.append(now)
        from replicast.placement.reports import ServerReport
        return ServerReport("n1")

    coordination = Coordination(out, setup, 0, server_report=report, set_coordinator=told)
    assert told == [("n1",)] or told == [("n2",)]                  # n2 presumed up until the settle time
    coordination.on_timer(setup.config.settle_us)
    assert told[-1] == ("n1",) and coordination.statistics()["coordinating"]
    assert reports                                                   # it reported (to itself)


def test_uncoordinated_alone_counts_stray_reports_and_asks_for_nothing():
    from replicast.engine.core.uncoordinated import Uncoordinated
    from replicast.engine.messages import Report
    from replicast.placement.reports import ServerReport
    count = counters()
    plug = Uncoordinated(count)
    plug.elect(0)
    plug.set_load(0.5, 2.0)                                          # a driver measures it whatever the plug-in
    plug.on_timer(10**9)
    plug.on_report("n2", Report(ServerReport("n2")), now=0)
    assert count["stray_reports"] == 1 and plug.next_timer() is None and plug.placement_statistics() == {}
    from replicast.engine.core.node import NodeCore
    core = NodeCore("n1", QUERY, OPTIONS, now=0)                      # no coordination setup: Uncoordinated
    core.receive("n2", Report(ServerReport("n2")), now=1)
    core.set_load(0.5)
    stats = core.statistics()
    assert stats["stray_reports"] == 1 and "placement" not in stats and isinstance(core.coordination, Uncoordinated)


def test_stamping_alone_meets_a_donors_copy_then_is_past_it():
    """Stamping rule 3 (engine/core/copy_tail.py): a joined entry point's own records that its
    donor's copy carries are dropped, in order; the first it does not carry ends the copy, and the
    tail is empty (done) from then on — never None."""
    joined = entry("cpu_a", 1)
    assert joined.copy_tail.done                                 # nothing to meet before a join
    out, emits = Outbox("n2", set()), Calls()
    stamping = Stamping(QUERY.streams, {joined.replica: joined}, out, counters(), emit=emits, stamp=Calls(),
                        seal=Calls())
    a, b = (5, "s", 0.5), (6, "s", 0.7)
    stamping.release_held(joined, 0, covered=4, copied=[a, b])  # the copy: a and b, above the donor's 4
    joined.state = ReplicaState.LIVE
    assert not joined.copy_tail.done
    exhaust(stamping.on_source("cpu_a", b'{"ts": 5, "server": "s", "load": 0.5}', now=10))
    assert not joined.copy_tail.done and [r for _, records, _, _ in emits for r in records] == []
    exhaust(stamping.on_source("cpu_a", b'{"ts": 7, "server": "s", "load": 0.9}', now=11))   # not in the copy
    assert joined.copy_tail.done and [r[0] for _, records, _, _ in emits for r in records] == [7]

