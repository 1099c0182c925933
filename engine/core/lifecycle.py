"""Replica lifecycle: joining from a live peer's snapshot, rebuilding without one, rejoining (DESIGN.md §6a).

Rules of this module (``docs/lifecycle.md`` has the walk-through):

1. A replica deployed mid-stream — a restart, a revival, a new replica — starts ``JOINING``.  It asks
   every upstream node to hold its log and send nothing yet (:class:`~engine.messages.Hold`), and,
   once the nodes of its peers are connected (or the join time-out passed), asks a peer replica of
   the same operator for a snapshot.  The peer keeps its snapshot's input positions retained
   upstream until the joiner resumes from them: it pins the logs of its own node's upstream
   replicas for the joiner there, and holds its acknowledgements to other nodes at those positions
   for a join time-out (:meth:`Lifecycle.keep_positions`) — so the joiner needs no round trip
   before asking.
2. A :class:`~engine.messages.Snapshot` is consistent at one point (Falkirk Wheel: restore at a
   frontier, then re-execute what follows): the donor's operator state, every port's duplicate-filter
   memory and punctuation, sorter contents, its position on each inbound stream replica, and its
   retained output log.  The joiner restores it, resumes every inbound stream from the donor's
   position, and starts a new incarnation whose stream begins with the donor's retained output (its
   *lineage*): every receiver that acknowledged the donor's log up to where it is retained lacks
   nothing, so the joiner's punctuations count there at once and it can be the only survivor of its
   operator right away.
3. With no live peer the replica rebuilds (``REBUILDING``, event + counter): it resumes every inbound
   stream from wherever the upstream log starts, each port adopts the first frontier it is offered,
   and the operator says above which horizon its outputs are complete, suppressing what it cannot
   vouch for (:meth:`operators.base.Operator.rebuild`).  Its stream's frontier is that horizon.  At
   a cluster's start every log is whole, the frontiers are −∞, and rebuilding is simply starting.
   It is ``LIVE`` once its frontier passes the horizon.  One that lost input asks its peers again
   every join time-out (and when a peer's node comes back) and rejoins from the first live one;
   one that rebuilt because its peers were rebuilding too is reported (``peers_rebuilding``).  One
   that rebuilt because the snapshot it restored could not advance (rule 4) does not ask if it has
   a horizon (it is LIVE there on its own), and otherwise (a count window) skips an answer no
   further than that snapshot on some port (``snapshots_skipped``): it would end the same way.
4. A replica whose port can no longer advance — every input it can hear is complete only above where
   the port is — rejoins: a new incarnation, from a snapshot if a peer is live, else rebuilt.  This
   is checked at every event that changes a port's inputs: a stream head, a disconnected input
   (control rule 6), an input whose node says it does not host it (receiver rule 6: ``VANISHED``,
   waited for like an input whose node is down), a join time-out after an input's node goes down
   (and, in the failover modes, when a port has nothing left to switch to: failover rule 4).  A
   standby counts by what its head said when the port followed it.
5. Entry points have no input to resume: while joining, one keeps what its source sends.  With a
   live peer it takes the peer's retained log (lineage, as in rule 2) and then emits what it kept,
   less what that log carries — every record at or below the peer's punctuation, and the copied
   records themselves (sources publish every record before any punctuation above its timestamp,
   §IV-A, as the sources here do), matched in order against what it takes even after the join: its
   source can deliver a record the copy carries only then (:mod:`engine.core.stamping` rule 3).
   Conversely the copy must reach what its own source delivers: a restarted or added entry point
   asks once its source delivered something (or after a join time-out), and asks again a heartbeat
   later while the donor is behind — while the first item it holds is neither in the copy nor at or
   below the donor's punctuation (:meth:`Lifecycle._donor_behind`).  With no live peer, an entry
   point of its node's first start claims the whole stream (frontier −∞: the cluster is starting);
   any other — a restart, one added mid-stream — knows its stream only from the first punctuation it
   emits (its frontier then).  In entry-stamped mode an entry point waits to be a member of its
   stream's view (:mod:`engine.core.stamper`), which says where its stream starts.
6. An application sink joins like an operator replica — from a live sink replica's snapshot, else
   it rebuilds — and says so with :class:`~engine.core.events.SinkRestarted`: what the snapshot
   shows it delivered above its punctuation (its filter's passed counts less its sorter's
   contents), or nothing when it rebuilds, so a driver's output ids continue (docs/consume.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from replicast.engine.core.events import ReplicaChanged, SinkRestarted
from replicast.engine.entry import EntryMode
from replicast.engine.core.hosted import Hosted, Inbound, Origin, ReplicaKind
from replicast.engine.core.intents import (Emit, HoldAcks, Intent, ReleaseHeld, RequestInputs, Retrim, ServeParked,
                                           StartStamping)
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.output_log import OutputLog
from replicast.engine.core.states import (Basis, BasisEvent, InboundEvent, InboundState, JoinEvent, JoinPhase,
                                          PortVerdict, RebuildEvent, RebuildPhase, ReplicaEvent, ReplicaState,
                                          RouteEvent, RouteState, advance)
from replicast.engine.messages import Mark, NoSnapshot, Snapshot, SnapshotRefusal, SnapshotRequest
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED

#: Inbound states whose stream head is known (a standby keeps what its head said when it was followed).
_KNOWN = (InboundState.FOLLOWING, InboundState.STANDBY)

#: What a donor that is not live answers a snapshot request (rule 2): its state, typed.
NOT_LIVE = {ReplicaState.JOINING: SnapshotRefusal.JOINING, ReplicaState.REBUILDING: SnapshotRefusal.REBUILDING,
            ReplicaState.REMOVED: SnapshotRefusal.REMOVED}

if TYPE_CHECKING:
    from replicast.engine.core.events import NodeOptions
    from replicast.engine.core.failover import AllFeed, Failover
    from replicast.engine.core.pairs import Pairs, Unpaired
    from replicast.operators.replica import OperatorReplica


@dataclass
class Joining:
    """Progress of one join (rule 1)."""

    deadline: int
    donors: list[tuple[ReplicaId, str]]             # peers still to ask, in index order
    phase: JoinPhase = JoinPhase.LINKING
    asked: tuple[ReplicaId, str] | None = None
    not_before: int = 0                             # ask again no sooner (rule 5: its donor was behind)
    source_wait: int = 0                            # an entry point: ask no sooner unless it holds something (rule 5)
    behind_since: int | None = None                 # when a donor was first found behind
    rebuilding: list[ReplicaId] = field(default_factory=list)   # peers that refused: they rebuild (rule 3)


class Lifecycle:
    """Replica states of one node's hosted replicas.  It reads the node's options, the hosted
    replicas and the inbound table, sends through the outbox, calls the mode's plug-ins (failover,
    pairs) and makes a new incarnation's epoch and operator input (``new_epoch``, ``new_logic``).
    What a join or rebuild needs from the other components it returns as intents the node core
    routes (:mod:`engine.core.intents`): the sender's logs (:class:`~engine.core.intents.Retrim`,
    :class:`~engine.core.intents.ServeParked`, :class:`~engine.core.intents.Emit`), the receiver's
    requests and acknowledgement holds (:class:`~engine.core.intents.RequestInputs`,
    :class:`~engine.core.intents.HoldAcks`), an entry-stamped start
    (:class:`~engine.core.intents.StartStamping`) and an entry point's held source items
    (:class:`~engine.core.intents.ReleaseHeld`).  Its methods that do so are generators the caller
    must exhaust (intents rule 2).  Nothing calls it back either: the receiver's and the plug-ins'
    port checks, horizons and adopted frontiers come as intents the node core routes to
    :meth:`check_port`, :meth:`check_horizon` and :meth:`adopt`."""

    def __init__(self, options: "NodeOptions", hosted: dict[ReplicaId, Hosted],
                 inbound: dict[StreamReplica, Inbound], outbox: Outbox, counters: dict[str, int], *,
                 failover: "Failover | AllFeed", pairs: "Pairs | Unpaired",
                 new_epoch: Callable[[int, int | None], int],
                 new_logic: "Callable[[ReplicaId], OperatorReplica | None]"):
        self.options, self.hosted, self.inbound, self.out, self.counters = options, hosted, inbound, outbox, counters
        self.failover, self.pairs = failover, pairs
        self.new_epoch, self.new_logic = new_epoch, new_logic
        self.joining: set[ReplicaId] = set()          # hosted replicas in JOINING (timers are theirs)
        self.checks: dict[ReplicaId, int] = {}        # replica -> when to check its ports (rule 4)
        self.probes: dict[ReplicaId, int] = {}        # rebuilding replica -> when to ask its peers again (rule 3)
        self.beside: dict[ReplicaId, list[ReplicaId]] = {}   # rebuilding replica -> its peers that rebuild too

    # -- starting ---------------------------------------------------------------------------------
    def start(self, hosted: Hosted, now: int) -> Iterator[Intent]:
        """A replica was just deployed (or rejoins): join (rule 1) or, without peers, rebuild (rule 3)."""
        if hosted.stamp is not None:                  # entry-stamped: its view says when (engine.core.stamper)
            yield StartStamping(hosted)
            return
        donors = [(ReplicaId(hosted.replica.name, i), node) for i, node in enumerate(hosted.peers)
                  if i != hosted.replica.index and node]
        if not donors:
            yield from self.rebuild(hosted, now, "it has no peer replicas")
            return
        timeout = self.options.join_timeout_us
        hosted.joining = Joining(now + timeout, donors)
        if hosted.kind is ReplicaKind.ENTRY and hosted.entry.mode is EntryMode.SOURCE and hosted.origin is not Origin.FIRST_START:
            hosted.joining.source_wait = now + timeout    # rule 5: until its source delivers something
        self.joining.add(hosted.replica)
        yield RequestInputs(hosted)
        yield from self.step(hosted, now)

    def step(self, hosted: Hosted, now: int) -> Iterator[Intent]:
        """Move a join forward as far as what has been heard allows."""
        join = hosted.joining
        if hosted.state is not ReplicaState.JOINING or join is None:
            return
        if join.phase is JoinPhase.LINKING:
            if any(not self.out.reachable(node) for _, node in join.donors) \
                    and now < join.deadline:
                return
            join.phase = advance(join.phase, JoinEvent.LINKED)
        if join.asked is None and (now < join.not_before or now < join.source_wait and not hosted.held):
            return
        while join.asked is None:
            reachable = [d for d in join.donors if self.out.reachable(d[1])]
            if not reachable:
                if now < join.deadline and join.donors:
                    return                            # a peer's node may still connect
                yield from self.rebuild(hosted, now, self._no_peer(hosted, join))
                return
            join.asked = reachable[0]
            join.donors.remove(join.asked)
            join.deadline = now + self.options.join_timeout_us
            self.out.send(join.asked[1], SnapshotRequest(hosted.replica, join.asked[0]))
        if now >= join.deadline:                      # the asked peer did not answer in time
            join.asked = None
            yield from self.step(hosted, now)

    def on_peer_change(self, node: str, now: int) -> Iterator[Intent]:
        if node in self.out.connected:
            for replica in self.probes:               # a peer's node is back: it may be live (rule 3)
                self.probes[replica] = min(self.probes[replica], now)
        for hosted in list(self.hosted.values()):
            join = hosted.joining
            if join is None or hosted.state is not ReplicaState.JOINING:
                continue
            if node not in self.out.connected and join.asked is not None and join.asked[1] == node:
                join.asked = None                     # it went down: no snapshot will come from it
            yield from self.step(hosted, now)

    def next_deadline(self) -> int | None:
        if not self.joining and not self.checks and not self.probes:
            return None
        hosted = self.hosted
        return min([*(hosted[r].joining.deadline for r in self.joining), *self.checks.values(),
                    *self.probes.values()])

    def on_timer(self, now: int) -> Iterator[Intent]:
        hosted = self.hosted
        for replica in list(self.joining):
            if replica in self.joining and now >= hosted[replica].joining.deadline:
                yield from self.step(hosted[replica], now)
        if self.checks:
            yield from self._run_checks(now)
        if self.probes:
            self._probe(now)

    def forget(self, replica: ReplicaId) -> None:
        """``replica`` was removed."""
        self.joining.discard(replica)
        self.checks.pop(replica, None)
        self.probes.pop(replica, None)
        self.beside.pop(replica, None)

    # -- snapshots (rule 2) -----------------------------------------------------------------------
    def on_snapshot_request(self, src: str, message: SnapshotRequest, now: int) -> Iterator[Intent]:
        donor = self.hosted.get(message.donor)
        if donor is None or donor.state is not ReplicaState.LIVE or self.stuck(donor):
            reason = SnapshotRefusal.NOT_HOSTED if donor is None else NOT_LIVE.get(donor.state, SnapshotRefusal.STUCK)
            self.out.send(src, NoSnapshot(message.joiner, message.donor, reason))
            return
        self.counters["snapshots_given"] += 1
        pair = self.pairs.snapshot(donor, now)        # a backup takes over first
        state = self.snapshot(donor)
        if pair is not None:
            state["pair"] = pair
        self.out.send(src, Snapshot(message.joiner, message.donor, state))
        self.pairs.donated(donor, message.joiner)     # what it held goes out: before the marks
        yield from self.keep_positions(donor, message.joiner, now)
        # The joiner's stream will continue ours from here: receivers note their counts (receiver rule 5).
        for stream, route in donor.routes.items():
            if route.state in (RouteState.ACTIVE, RouteState.CUT):
                self.out.send(route.node, Mark(stream, donor.epoch, donor.log.end))

    def keep_positions(self, donor: Hosted, joiner: ReplicaId, now: int) -> Iterator[Intent]:
        """Rule 1: what the joiner will resume from (the donor's input positions now) stays retained
        upstream — pinned in the logs of this node's upstream replicas for the joiner's stream
        replicas, and not acknowledged past to other nodes for a join time-out."""
        until = now + self.options.join_timeout_us
        for stream, inbound in self.inbound.items():
            if stream.target != donor.replica or inbound.state is not InboundState.FOLLOWING:
                continue
            upstream = self.hosted.get(stream.source)
            if upstream is not None:
                route = upstream.routes.get(StreamReplica(stream.source, joiner, stream.port))
                if route is not None and route.acked > inbound.next >= upstream.log.base:
                    route.acked = inbound.next
                    yield Retrim(upstream)
            else:
                yield HoldAcks(stream, inbound.next, until)

    def snapshot(self, donor: Hosted) -> dict[str, Any]:
        """``donor``'s state at this instant (rule 2), as plain data."""
        if donor.kind is ReplicaKind.ENTRY:
            return {"kind": ReplicaKind.ENTRY.value, "epoch": donor.epoch, "log": donor.log.snapshot(),
                    "punctuation": donor.entry.punctuation}
        positions = [[s.source.name, s.source.index, s.port, i.epoch, i.next, i.index]
                     for s, i in self.inbound.items()
                     if s.target == donor.replica and i.state is InboundState.FOLLOWING]
        return {"kind": donor.kind.value, "epoch": donor.epoch, "logic": donor.logic.snapshot(), "positions": positions,
                "log": donor.log.snapshot()}

    def on_snapshot(self, src: str, message: Snapshot, now: int) -> Iterator[Intent]:
        hosted = self.hosted.get(message.joiner)
        if hosted is not None and hosted.state is ReplicaState.REBUILDING and hosted.replica in self.probes:
            if self._dead_end(hosted, message):
                self.counters["snapshots_skipped"] += 1
                return
            yield from self.rejoin(hosted, now, f"{message.donor} is live: rejoins from it")   # rule 3
            return
        join = hosted.joining if hosted is not None else None
        if hosted is None or hosted.state is not ReplicaState.JOINING or join is None or join.asked is None \
                or join.asked[0] != message.donor:
            return                                    # stale: removed, or asked another since
        state = message.state
        if hosted.kind is ReplicaKind.ENTRY:          # rule 5: the donor's retained log, then its own
            log = OutputLog.restore(state["log"], message.donor, state["epoch"])
            copied = [r for batch in log.since(0) for r in batch[1]]
            covered = state["punctuation"]
            if self._donor_behind(hosted, covered, copied, now):
                return
            hosted.log = log
            hosted.entry.punctuation = max(hosted.entry.punctuation, covered)
            if hosted.entry.mode is EntryMode.SOURCE:         # its source may still deliver what the donor took
                hosted.entry.carried_until = covered
            hosted.basis = advance(hosted.basis, BasisEvent.RESTORED)
        else:
            hosted.logic.restore(state["logic"])
            hosted.basis = advance(hosted.basis, BasisEvent.RESTORED)
            hosted.basis_at = tuple(f.max_punctuation for f in hosted.logic.filters)
            if hosted.kind is ReplicaKind.APPLICATION:    # its output ids continue the donor's counts
                p = hosted.basis_at[0]
                self.out.event(SinkRestarted(hosted.replica.name, None if p == NO_PUNCTUATION else p,
                                         hosted.logic.given()))
            hosted.log = OutputLog.restore(state["log"], message.donor, state["epoch"])
            positions = {(name, index, port): (epoch, offset, i) for name, index, port, epoch, offset, i
                         in state["positions"]}
            for stream, inbound in self.inbound.items():
                if stream.target != hosted.replica:
                    continue
                position = positions.get((stream.source.name, stream.source.index, stream.port))
                if position is None:
                    inbound.state = advance(inbound.state, InboundEvent.UNPOSITIONED)
                    inbound.epoch, inbound.index = None, None
                else:
                    inbound.epoch, inbound.next, inbound.index = position
                    inbound.state = advance(inbound.state, InboundEvent.POSITIONED)
        self.counters["snapshots_taken"] += 1
        self.failover.restored(hosted)
        self.pairs.restored(hosted, message.donor, state.get("pair"))
        self._change(hosted, ReplicaEvent.RESTORED, f"restored from {message.donor}'s snapshot")
        yield RequestInputs(hosted)
        yield ServeParked(hosted)
        if hosted.kind is ReplicaKind.ENTRY:
            yield ReleaseHeld(hosted, covered, copied)

    @staticmethod
    def _dead_end(hosted: Hosted, message: Snapshot) -> bool:
        """Rule 3: a peer's answer to a rebuilding replica's probe is no way back if it is no further,
        on any port, than the snapshot this replica restored last and could not advance from (rule 4,
        :meth:`rejoin`'s ``again``): restoring it again ends the same way — a rejoin, the same
        snapshot, a rebuild, a probe at once — and the loop would ship the peer's whole state every
        round trip.  Once the peer has moved past that point on every port, it is tried again."""
        if hosted.basis is not Basis.DEAD_END or message.state.get("kind") == ReplicaKind.ENTRY:
            return False
        point = [f["max_punctuation"] for f in message.state["logic"]["filters"]]
        return any(p <= q for p, q in zip(point, hosted.basis_at))

    def _donor_behind(self, hosted: Hosted, covered: int, copied: list, now: int) -> bool:
        """Rule 5: a source-stamped entry point continues its donor's copy with what its own
        subscription delivers, so the two must overlap.  If the first item it holds is above the
        donor's punctuation and not in the copy, the donor had not yet taken it: what the source
        published between the donor's snapshot and this replica's subscription would be in neither.
        Then ask the same donor again a heartbeat later (it receives the same items in the same
        order, so it catches up), for at most a join time-out.  (It asks only once it holds
        something, or after a join time-out: :meth:`start`, :meth:`step`.)"""
        join, options = hosted.joining, self.options
        first = next(((records[0] if records else None, p) for records, p in hosted.held
                      if records or p is not None), None)
        if hosted.entry.mode is not EntryMode.SOURCE or first is None:
            return False
        record, punctuation = first
        if record is not None and (record[0] <= covered or record in copied):
            return False
        if record is None and punctuation <= covered:
            return False
        if join.behind_since is None:
            join.behind_since = now
        if now - join.behind_since >= options.join_timeout_us:
            return False                              # it stays behind: take what it has (as before rule 5's check)
        self.counters["donors_behind"] += 1
        join.donors.insert(0, join.asked)
        join.asked = None
        join.not_before = join.deadline = now + options.heartbeat_us
        return True

    def on_no_snapshot(self, src: str, message: NoSnapshot, now: int) -> Iterator[Intent]:
        hosted = self.hosted.get(message.joiner)
        join = hosted.joining if hosted is not None else None
        if join is not None and join.asked is not None and join.asked[0] == message.donor:
            join.asked = None
            if message.reason is SnapshotRefusal.REBUILDING:
                join.rebuilding.append(message.donor)
            yield from self.step(hosted, now)

    def _no_peer(self, hosted: Hosted, join: Joining) -> str:
        """Why ``hosted`` rebuilds (rule 3); notes the peers that answered they rebuild themselves
        (reported once the rebuild turns out to have lost input: :meth:`adopt`)."""
        if not join.rebuilding:
            self.beside.pop(hosted.replica, None)
            return "no live peer replica answered"
        self.beside[hosted.replica] = list(join.rebuilding)
        return f"no live peer replica answered ({', '.join(map(str, join.rebuilding))} rebuilding too)"

    # -- rebuilding without a peer (rule 3) -------------------------------------------------------
    def rebuild(self, hosted: Hosted, now: int, reason: str) -> Iterator[Intent]:
        """Rule 3 (what was lost, if anything, is said once the ports' frontiers are known: :meth:`adopt`)."""
        hosted.joining = None
        for stream, inbound in self.inbound.items():
            if stream.target == hosted.replica and inbound.state is InboundState.HOLDING:
                inbound.state = advance(inbound.state, InboundEvent.REBUILD)
        if hosted.kind is ReplicaKind.ENTRY:          # rule 5
            # A first start's entry point has the whole stream; any other knows it from its first punctuation.
            hosted.log.frontier = NO_PUNCTUATION if hosted.origin is Origin.FIRST_START else None
            self._change(hosted, ReplicaEvent.CLAIMED, reason)
            yield ServeParked(hosted)
            yield ReleaseHeld(hosted, NO_PUNCTUATION, None)
        else:
            hosted.adopted, hosted.rebuild = {}, RebuildPhase.ADOPTING     # a new rebuild (states: _REBUILD)
            self._change(hosted, ReplicaEvent.NO_PEER, reason)
            if hosted.kind is ReplicaKind.APPLICATION:    # it delivers all it adopts: ids count afresh
                self.out.event(SinkRestarted(hosted.replica.name, None, {}))
        yield RequestInputs(hosted)

    def adopt(self, hosted: Hosted, port: int, frontier: int, now: int) -> Iterator[Intent]:
        """Port ``port`` of a rebuilding replica starts above ``frontier`` (rule 3)."""
        logic = hosted.logic
        hosted.adopted[port] = frontier
        logic.filters[port].adopt(frontier)
        yield Emit(hosted, logic.operator.adopt(port, frontier), None)
        if len(hosted.adopted) < len(logic.filters):
            return
        frontiers = [hosted.adopted[p] for p in range(len(logic.filters))]
        if max(frontiers) == NO_PUNCTUATION:
            horizon = NO_PUNCTUATION                  # nothing was lost: a plain start
        else:
            horizon = min(CLOSED, logic.operator.rebuild(frontiers))
            self.counters["rebuilt_without_peer"] += 1
            beside = self.beside.pop(hosted.replica, None)
            if beside:                                # rule 3: said apart — no replica of the operator is exact
                self.counters["peers_rebuilding"] += 1
            self.out.event(ReplicaChanged(hosted.replica, "rebuilding", "rebuilding",
                                           f"input at or below {frontiers} is lost: outputs are complete above "
                                           f"{horizon} only" + (f"; its peers {', '.join(map(str, beside))} rebuild "
                                                                f"too: no replica of {hosted.replica.name} is exact"
                                                                if beside else "")))
        hosted.horizon = horizon
        hosted.rebuild = advance(hosted.rebuild, RebuildEvent.ADOPTED)
        # A rebuild after a snapshot that could not advance (rule 4's ``again``) becomes LIVE at its
        # horizon on its own: its inputs start above what its peers hold, and asking them only
        # rejoins and rebuilds again.  Only one that never reaches a horizon (a count window) asks.
        settles = hosted.basis is Basis.DEAD_END and horizon < CLOSED
        if horizon != NO_PUNCTUATION and not settles and any(node for i, node in enumerate(hosted.peers)
                                                             if i != hosted.replica.index):
            self.probes[hosted.replica] = now          # it lost input: ask its peers until one is live
        hosted.log.frontier = horizon if hosted.log.frontier is None else max(hosted.log.frontier, horizon)
        yield ServeParked(hosted)
        self.check_horizon(hosted, now)

    def check_horizon(self, hosted: Hosted, now: int) -> None:
        if hosted.state is ReplicaState.REBUILDING and hosted.rebuild is RebuildPhase.CATCHING_UP \
                and hosted.logic.operator.frontier >= hosted.horizon:
            reason = "started" if hosted.horizon == NO_PUNCTUATION else f"complete past horizon {hosted.horizon}"
            self._change(hosted, ReplicaEvent.CAUGHT_UP, reason)

    def _probe(self, now: int) -> None:
        """Rule 3: a rebuilding replica that lost input asks its peers for a snapshot every join
        time-out (and when a peer's node comes back); the first live one's answer makes it rejoin
        — from that peer, exact again (a count-window aggregate would otherwise stay silent for good)."""
        for replica in [r for r, at in self.probes.items() if at <= now]:
            hosted = self.hosted.get(replica)
            if hosted is None or hosted.state is not ReplicaState.REBUILDING:
                del self.probes[replica]
                continue
            self.probes[replica] = now + self.options.join_timeout_us
            for i, node in enumerate(hosted.peers):
                if i != replica.index and node and self.out.reachable(node):
                    self.out.send(node, SnapshotRequest(replica, ReplicaId(replica.name, i)))

    # -- rejoining (rule 4) -----------------------------------------------------------------------
    def check_port(self, hosted: Hosted, port: int, now: int, *, links_lost: bool = False) -> Iterator[Intent]:
        """Rejoin if nothing can advance ``port`` any more: after a stream head (``links_lost``
        False: an input whose node is down may come back — checked again a join time-out later),
        or a join time-out after an input's node went down (``links_lost``: only inputs on reachable
        nodes count, and only if some input is waiting for the port to reach its base — plain
        silence is waited out)."""
        verdict = self.port_verdict(hosted, port, links_lost=links_lost)
        if verdict is PortVerdict.SILENT:
            self.checks.setdefault(hosted.replica, now + self.options.join_timeout_us)
        elif verdict is PortVerdict.STUCK and hosted.kind is ReplicaKind.APPLICATION:
            yield from self._adopt_in_place(hosted, port, now)
        elif verdict is PortVerdict.STUCK:
            yield from self.rejoin(hosted, now, f"port {port}: every input it can still hear is complete only above where "
                                     f"the port is")

    def _adopt_in_place(self, hosted: Hosted, port: int, now: int) -> Iterator[Intent]:
        """An application (no stream of its own to keep promises on) keeps
        what it delivered and moves its port up to the lowest base of its inputs: what lies between
        is lost (more than kmax − 1 failures upstream), nothing is delivered twice."""
        dedup = hosted.logic.filters[port]
        bases = [dedup.base(inbound.index) for stream, inbound in self.inbound.items()
                 if stream.target == hosted.replica and stream.port == port and inbound.index is not None
                 and dedup.waiting(inbound.index)]
        frontier = min(b for b in bases if b is not None) if any(b is not None for b in bases) else None
        if frontier is None:
            return                                    # only "from its first punctuation": wait for it
        self.counters["rebuilt_without_peer"] += 1
        self.out.event(ReplicaChanged(hosted.replica, hosted.state.value, hosted.state.value,
                                       f"port {port}: input at or below {frontier} is lost"))
        yield Emit(hosted, *hosted.logic.skip_to(port, frontier))

    def port_verdict(self, hosted: Hosted, port: int, *, links_lost: bool = True) -> PortVerdict:
        """Whether ``port`` can advance: OK, SILENT (only inputs whose node is down could) or STUCK."""
        dedup = hosted.logic.filters[port]
        waiting = silent = False
        for stream, inbound in self.inbound.items():
            if stream.target != hosted.replica or stream.port != port:
                continue
            if inbound.state is InboundState.VANISHED:
                silent = True                         # its node may yet deploy it (receiver rule 6)
                continue
            reachable = self.out.reachable(inbound.node)
            if inbound.state in _KNOWN and inbound.index is not None and dedup.waiting(inbound.index):
                waiting = True                        # (a standby we followed stays what its head said: failover rule 4)
            elif reachable:
                return PortVerdict.OK                 # a trusted input, or one still to be positioned
            elif inbound.state is InboundState.FOLLOWING:
                silent = True                         # trusted, but its node is down: it may come back
        if links_lost:
            return PortVerdict.STUCK if waiting else PortVerdict.OK
        return PortVerdict.SILENT if silent else PortVerdict.STUCK

    def stuck(self, hosted: Hosted) -> bool:
        """Some port of ``hosted`` cannot advance with what it can hear (it must not donate its state)."""
        return hosted.logic is not None and any(self.port_verdict(hosted, port) is PortVerdict.STUCK
                                                for port in range(len(hosted.logic.filters)))

    def after_peer_down(self, node: str, now: int) -> None:
        """An input's node went down: check the ports it fed once the join time-out has passed."""
        deadline = now + self.options.join_timeout_us
        for stream, inbound in self.inbound.items():
            if inbound.node == node:
                self.checks.setdefault(stream.target, deadline)

    def _run_checks(self, now: int) -> Iterator[Intent]:
        due = [r for r, at in self.checks.items() if at <= now]
        for replica in due:
            del self.checks[replica]
            hosted = self.hosted.get(replica)
            if hosted is None or hosted.logic is None or hosted.state not in (ReplicaState.LIVE,
                                                                              ReplicaState.REBUILDING):
                continue
            for port in range(len(hosted.logic.filters)):
                if hosted.state is not ReplicaState.JOINING:
                    yield from self.check_port(hosted, port, now, links_lost=True)

    def rejoin(self, hosted: Hosted, now: int, reason: str) -> Iterator[Intent]:
        """Start a new incarnation of ``hosted`` from scratch (rule 4)."""
        self.counters["rejoins"] += 1
        self.pairs.alone(hosted)                      # what it held goes out; no partner until a join says so
        # Stuck again before any port moved since a snapshot: the donor was stuck as this replica
        # is (it had not heard yet), and asking peers again could go round for ever between two
        # such replicas (each giving the other its state).  Rebuild instead.
        again = hosted.basis is Basis.SNAPSHOT and hosted.logic is not None and \
            hosted.basis_at == tuple(f.max_punctuation for f in hosted.logic.filters)
        hosted.basis = advance(hosted.basis, BasisEvent.STUCK_AGAIN if again else BasisEvent.REJOIN)
        if not again:
            hosted.basis_at = ()
        hosted.epoch = self.new_epoch(now, hosted.epoch)
        hosted.logic = self.new_logic(hosted.replica)
        hosted.log = OutputLog(frontier=None)
        hosted.parked = {}
        for stream, route in hosted.routes.items():
            route.state, route.acked = advance(route.state, RouteEvent.REJOIN), 0
            if self.out.reachable(route.node):
                hosted.parked[stream] = (None, 0)     # announce the new incarnation once placed
        yield Retrim(hosted)
        for stream, inbound in self.inbound.items():
            if stream.target == hosted.replica:
                inbound.state = advance(inbound.state, InboundEvent.REJOIN)
                inbound.epoch, inbound.index, inbound.next = None, None, 0
        self._change(hosted, ReplicaEvent.REJOIN, reason)
        if again:
            yield from self.rebuild(hosted, now, "the snapshot it restored could not advance either")
        else:
            yield from self.start(hosted, now)

    # -- helpers ----------------------------------------------------------------------------------
    def _change(self, hosted: Hosted, event: ReplicaEvent, reason: str) -> None:
        old = hosted.state
        hosted.state = new = advance(old, event)
        if new is not ReplicaState.JOINING:
            self.joining.discard(hosted.replica)
            hosted.joining = None
        if new is not ReplicaState.REBUILDING:
            self.probes.pop(hosted.replica, None)
        if new is not old:
            self.out.event(ReplicaChanged(hosted.replica, old.value, new.value, reason))
