"""Entry-stamped mode: changing who stamps and who is a member (the rules 4 and 5 of :mod:`engine.core.stamper`).

Views are decided by a majority of voters (:mod:`engine.core.views`); this module decides when a
replica seeks one, what it proposes, and how the members follow a decided one.

4. A new view is sought (the lowest-ranked seeker first — the stamper and the lowest-indexed
   member, the stamper's term winning a tie — the others after ``rank`` heartbeats):
   by the stamper when it cannot reach a member (to leave it out) or a replica outside asks to join
   (``JoinStamping``) and is reachable; by a member when it cannot reach the stamper (to take over);
   by a replica outside when no stamper is reachable.  The proposal derives from the latest view
   accepted among a majority (views rule 2): its members that are still reachable, the candidate as
   stamper — only if the candidate is one of them, or if there was no view yet (the cluster's
   start), or if every member of it is dead (its node runs a newer incarnation of that replica; the
   new stamper then forgets what it holds pending, which those members may have stamped).
   Otherwise the candidate gives up.  A replica whose node's stored votes could not be read
   (views rule 1, ``LOST``) seeks no view: it cannot know which terms its node proposed before.
   A proposal records the view it derives from (``View.base``).
   A candidate *holds* the latest view if it is a member of it and either knows it or knows the
   view it derives from (then nothing of the latest was emitted: that needed the candidate's
   acknowledgement; for the stream's first view, base −1, knowing no view).  A member or stamper
   that does not hold the latest view never continues from it: unless its stamper is reachable,
   it leaves (rule 5) and seeks again from outside, forgetting what it has pending — views it
   missed may have stamped it.  During a partition only the side with a majority of voters
   stamps; the other side's events wait at its replicas (as raw pending) and are lost if they never
   reach the stamper's side — the availability given up for the guarantee.
5. The new stamper tells every member the view and where its stream continues (``ViewDecided``),
   re-sends what it holds above that point in the new term, and stamps what is pending.  A member
   that was in the stamper's previous view re-synchronises: what it holds below the start is
   committed (it emits it), what it holds above is dropped (its raw records pending again).  Any
   other member first settles its pending records with the segments the stamper emitted during the
   last peer time-out (the records it may have received that were stamped before it joined), then
   starts a new stream at the last punctuation the stamper emitted (its log's frontier).  Every
   member acknowledges the view.  A member left out of a view stops: if it emitted anything it
   starts a new incarnation (lifecycle rule 4) and asks to join.
6. At the start no view exists: each replica waits until every peer replica said it lives (a peer
   time-out at most), then the lowest-indexed seeks the first view, with every replica it heard
   from as a member (nothing was stamped yet, so all are in step).  A stamper whose link to a member
   comes back re-sends what that member has not acknowledged (and a member that had not yet
   acknowledged the view gets a new one).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

from replicast.engine.core.hosted import Hosted, Origin
from replicast.engine.core.intents import Intent, Rejoin
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.stamp_state import StampState
from replicast.engine.core.states import MemberSync, StamperEvent, StamperRole
from replicast.engine.core.views import Candidacy, Outcome, VoteMemory, Voter
from replicast.engine.messages import JoinStamping, StampAck, View, ViewDecided, ViewReply
from replicast.operators.base import NO_PUNCTUATION

if TYPE_CHECKING:
    from replicast.engine.core.events import NodeOptions

#: Terms are clock readings (µs) rounded up to a multiple of this, plus the candidate's replica
#: index (< 2**16 on the wire), plus STAMPER_PRIORITY if the candidate is the stamper.
TERM_STRIDE = 1 << 17
#: A stamper's term beats a member's of the same moment: when the link between them is cut both
#: seek a view at once, and the stamper's (leave the member out) is the one to win, not a take-over
#: that makes the old stamper start a new incarnation.  (Any winner is safe; this one is cheaper.)
STAMPER_PRIORITY = 1 << 16


class StampedReplicas(Protocol):
    """What a view change asks of the node's entry-stamped replicas: rules 1-3, kept by
    :class:`engine.core.stamper.Stamper` (which holds the :class:`ViewChanges`, not the reverse in
    anything but this protocol: a test builds view changes alone on a recording stand-in)."""

    def hosted(self, stream: str, index: int) -> Hosted | None:
        """The entry-stamped replica ``index`` of ``stream`` hosted here, if any."""

    def states(self, stream: str | None = None) -> Iterable[tuple[Hosted, StampState]]:
        """The entry-stamped replicas hosted here (of ``stream``), with their stamp state."""

    def ask_to_join(self, hosted: Hosted, nodes: set[str] | None = None) -> None:
        """Send its ``JoinStamping`` to its peers (on ``nodes`` only, if given)."""

    def live(self, hosted: Hosted, reason: str) -> None:
        """It is in a view: LIVE, its parked requests served."""

    def set_role(self, hosted: Hosted, event: StamperEvent) -> None:
        """Its ``StamperRole`` after ``event`` (the table in :mod:`engine.core.states`)."""

    def stamp(self, hosted: Hosted, records: list, punctuation: int | None, now: int) -> None:
        """Rule 2: stamp one segment (it is the view's stamper)."""

    def send_segment(self, hosted: Hosted, seq: int, members) -> None:
        """Rule 2: send held segment ``seq`` to ``members``."""

    def commit(self, hosted: Hosted, now: int) -> None:
        """Rule 2: emit what every member acknowledged."""

    def emit(self, hosted: Hosted, upto: int, now: int) -> None:
        """Rule 2: emit its held segments below ``upto``."""


class ViewChanges:
    """Rules 4-5 for the entry-stamped replicas of one node (their state is ``Hosted.stamp``)."""

    def __init__(self, stamper: StampedReplicas, options: "NodeOptions", outbox: Outbox, counters: dict[str, int],
                 incarnation: int, voter: "Voter"):
        """It reads the node's options and incarnation, sends through the outbox and acts on the
        replicas through ``stamper`` (:class:`StampedReplicas`: rules 1-3).  A replica that left a
        view having emitted must rejoin: that is an intent for the lifecycle
        (:class:`~engine.core.intents.Rejoin`), yielded by :meth:`on_decided` and :meth:`on_reply`
        for the node core to route."""
        self.stamper, self.options, self.out, self.counters = stamper, options, outbox, counters
        self.incarnation = incarnation
        #: This node's voter: the terms its node proposed before, and whether its votes were lost (views rules 1-2).
        self.voter = voter

    # -- a view decided elsewhere (rule 5) ----------------------------------------------------
    def on_decided(self, src: str, message: ViewDecided, now: int) -> Iterator[Intent]:
        """Rule 5; yields a rejoin (:mod:`engine.core.intents` rule 2: routed before it asks to join)."""
        hosted = self.stamper.hosted(message.stream, message.target) if message.target >= 0 else None
        if hosted is None:
            return
        state, view, me = hosted.stamp, message.view, (hosted.replica.index, hosted.epoch)
        if state.view is not None and view.term <= state.view.term or view.stamper == me[0]:
            return                                     # stale, or already known
        if state.peers.get(view.stamper) != src:       # peers come from the configuration only
            self.counters["stale_stamps"] += 1
            return
        carried = state.role is not StamperRole.OUTSIDE and state.view is not None \
            and message.base == state.view.term
        self.learn(state, view)
        if me not in view.members:
            yield from self.leave(hosted, now, f"left out of view {view.term} of {message.stream}")
            self.stamper.ask_to_join(hosted, {src})
            return
        if carried:                                    # rule 5: committed below the start, dropped above
            self.stamper.emit(hosted, message.start, now)
            for seq in [s for s in state.held if s >= state.emitted]:
                hosted.entry.unsettle(state.held.pop(seq)[0])
            state.next = state.emitted
        elif state.role is not StamperRole.OUTSIDE or hosted.log.frontier is not None or hosted.log.end:
            yield from self.leave(hosted, now, f"view {view.term} of {message.stream} does not continue its stream")
            self.stamper.ask_to_join(hosted, {src})
            return
        else:                                          # a new member: a new stream from the start
            state.held, state.next, state.emitted, state.history = {}, message.since, message.start, deque()
            state.sync = (message.start, message.frontier)
            hosted.log.frontier = message.frontier     # None: known from its first punctuation
            if message.frontier is not None:
                hosted.entry.punctuation = max(hosted.entry.punctuation, message.frontier)
            self.stamper.live(hosted, f"member of view {view.term}")
        self.stamper.set_role(hosted, StamperEvent.JOINED)
        self.out.send(src, StampAck(message.stream, view.stamper, me[0], view.term, state.next))

    def learn(self, state: StampState, view: View) -> None:
        state.view, state.seen_term = view, max(state.seen_term, view.term)
        for index, epoch in view.members:
            state.epochs[index] = max(state.epochs.get(index, epoch), epoch)

    def leave(self, hosted: Hosted, now: int, reason: str) -> Iterator[Intent]:
        """Rule 5: out of the view.  A replica that emitted starts a new incarnation (lifecycle rule 4):
        it yields the :class:`~engine.core.intents.Rejoin`."""
        state = hosted.stamp
        state.candidacy = None
        if hosted.log.frontier is not None or hosted.log.end:
            yield Rejoin(hosted, reason)       # the lifecycle's start(): OUTSIDE, asks to join
        else:
            if state.role is not StamperRole.OUTSIDE:
                self.stamper.set_role(hosted, StamperEvent.LEFT_OUT)
            state.held, state.acked, state.joiners = {}, {}, {}
            hosted.entry.forget()

    def on_join(self, src: str, message: JoinStamping, now: int) -> None:
        for hosted, state in self.stamper.states(message.stream):
            if message.index == hosted.replica.index or state.peers.get(message.index) != src:
                continue                               # peers come from the configuration only
            state.epochs[message.index] = max(state.epochs.get(message.index, message.epoch), message.epoch)
            if state.role is StamperRole.STAMPING and (message.index, message.epoch) not in state.view.members:
                state.joiners[message.index] = message.epoch
            self.review(hosted, now)

    # -- seeking a view (rule 4) --------------------------------------------------------------
    def reachable(self, hosted: Hosted, index: int, epoch: int | None = None) -> bool:
        state = hosted.stamp
        if index == hosted.replica.index:
            return epoch is None or epoch == hosted.epoch
        node = state.peers.get(index)
        return bool(node) and self.out.reachable(node) \
            and (epoch is None or state.epochs.get(index, epoch) == epoch)

    def _wants(self, hosted: Hosted) -> bool:
        state = hosted.stamp
        view = state.view
        if state.role is StamperRole.STAMPING:
            return any(not self.reachable(hosted, *m) for m in view.members) or MemberSync.LOST in state.told.values() \
                or any(self.reachable(hosted, i, e) for i, e in state.joiners.items())
        if view is None:
            return True
        stamper = next((m for m in view.members if m[0] == view.stamper), None)
        return stamper is None or not self.reachable(hosted, *stamper)

    def rank(self, hosted: Hosted) -> int:
        """Rule 4's order: the stamper and the lowest-indexed reachable member first (the stamper's
        term wins a tie: STAMPER_PRIORITY); outsiders last."""
        state, index = hosted.stamp, hosted.replica.index
        if state.role is StamperRole.STAMPING:
            return 0
        if state.role is StamperRole.MEMBER:
            return sum(1 for i, e in state.view.members if i < index and self.reachable(hosted, i, e))
        return index + (len(state.peers) if state.view is not None else 0)

    def review(self, hosted: Hosted, now: int, seek: bool = True) -> None:
        state = hosted.stamp
        if state.candidacy is not None:
            return
        if not self._wants(hosted) or self.voter.memory is VoteMemory.LOST:
            state.act_at = None                        # (LOST: its node may not know the terms it proposed)
            return
        delay = self.rank(hosted) * self.options.heartbeat_us
        if state.act_at is None:
            state.act_at = now + delay
        if state.view is None and state.role is StamperRole.OUTSIDE:
            # The start (rule 6): wait (a peer time-out at most) until every peer replica said it
            # lives, so the first view has them all and nothing is stamped by one replica alone;
            # then the lowest-indexed seeks first (the others' ballots would only pre-empt it).
            if all(i in state.epochs and self.reachable(hosted, i, state.epochs[i]) for i in state.peers):
                state.act_at = min(state.act_at, now + delay)
            else:
                state.act_at = max(state.act_at, state.started + self.options.peer_timeout_us + delay)
        if seek and now >= state.act_at:
            self._seek(hosted, now)

    def _seek(self, hosted: Hosted, now: int) -> None:
        state = hosted.stamp
        if not state.electorate:
            voters = set(self.options.voters) or {*state.peers.values(), *(r.node for r in hosted.routes.values())}
            state.electorate = tuple(sorted(n for n in voters if n))
        state.act_at = None
        # Above every term seen, the clock and every term this node proposed for the stream in any
        # life (views rule 2), and ≡ the replica index: two candidates never share one.
        stream = hosted.replica.name
        term = (max(state.seen_term, now, self.incarnation, self.voter.proposed(stream)) // TERM_STRIDE + 1) \
            * TERM_STRIDE + hosted.replica.index + (STAMPER_PRIORITY if state.role is StamperRole.STAMPING else 0)
        state.seen_term = term
        self.voter.propose(stream, term)               # stored before the ballots leave (views rule 2)
        state.candidacy = Candidacy(term, state.electorate, now + self.options.peer_timeout_us)
        self._ballot(hosted)

    def _ballot(self, hosted: Hosted) -> None:
        candidacy = hosted.stamp.candidacy
        message = candidacy.ballot(hosted.replica.name, hosted.replica.index)
        for node in candidacy.voters:
            self.out.send(node, message)

    def on_reply(self, src: str, message: ViewReply, now: int) -> Iterator[Intent]:
        """A voter's answer to this node's candidacy; yields a rejoin if the replica must leave."""
        hosted = self.stamper.hosted(message.stream, message.candidate)
        state = hosted.stamp if hosted is not None else None
        if state is None or state.candidacy is None:
            return
        candidacy = state.candidacy
        state.seen_term = max(state.seen_term, message.promised)
        outcome = candidacy.on_reply(src, message)
        if outcome is Outcome.REFUSED:
            state.candidacy = None
            state.act_at = now + (1 + self.rank(hosted)) * self.options.heartbeat_us
        elif outcome is Outcome.PROMISED:
            proposal = self._derive(hosted, candidacy.latest, candidacy.term)
            if proposal is None:
                state.candidacy = None
                latest = candidacy.latest
                if latest is not None and state.role is not StamperRole.OUTSIDE and not self._holds(hosted, latest) \
                        and not self._stamper_alive(hosted, latest):
                    yield from self.leave(hosted, now, f"a newer view of {hosted.replica.name} than it holds")
                return
            candidacy.propose(proposal)
            self._ballot(hosted)
        elif outcome is Outcome.DECIDED:
            self._take(hosted, candidacy, now)

    def _derive(self, hosted: Hosted, latest: View | None, term: int) -> View | None:
        """Rule 4's proposal from the latest view accepted among a majority, or None (give up)."""
        state, index = hosted.stamp, hosted.replica.index
        me = (index, hosted.epoch)
        if latest is None:                             # the start: nothing stamped yet, every replica in step
            peers = {(i, state.epochs[i]) for i in state.peers if i != index and i in state.epochs
                     and self.reachable(hosted, i, state.epochs[i])}
            return View(term, index, tuple(sorted(peers | {me})))
        if state.role is not StamperRole.OUTSIDE and not self._holds(hosted, latest):
            return None                                # it missed a view that may have emitted: leave first
        if me in latest.members:
            if latest.stamper != index and self._stamper_alive(hosted, latest):
                return None                            # its stamper is alive: nothing to take over
            members = {m for m in latest.members if self.reachable(hosted, *m)}
            if latest.stamper == index:
                taken = {i for i, _ in members}
                members |= {(i, e) for i, e in state.joiners.items() if i not in taken and self.reachable(hosted, i, e)}
            return View(term, index, tuple(sorted(members)), latest.term)
        if all(state.epochs.get(i, e) > e for i, e in latest.members):
            return View(term, index, (me,), latest.term)   # every member is dead: a fresh stream
        return None

    def _holds(self, hosted: Hosted, latest: View) -> bool:
        """Whether this replica holds every segment anyone emitted up to ``latest``: it is a member
        of ``latest``, or of the view ``latest`` derives from and never heard of ``latest`` (then
        nothing of ``latest`` was emitted: that needed its acknowledgement) — for the stream's first
        view, never having heard of any."""
        state, me = hosted.stamp, (hosted.replica.index, hosted.epoch)
        if me not in latest.members:
            return False
        if state.view is None:
            return latest.base == -1
        if me not in state.view.members:               # left out of the view it knows, or a new incarnation
            return False
        return latest.term == state.view.term or latest.base == state.view.term

    def _stamper_alive(self, hosted: Hosted, view: View) -> bool:
        stamper = next((m for m in view.members if m[0] == view.stamper), None)
        return stamper is not None and self.reachable(hosted, *stamper)

    # -- our view is decided (rule 5) ---------------------------------------------------------
    def _take(self, hosted: Hosted, candidacy: Candidacy, now: int) -> None:
        """Our view is decided: become its stamper and synchronise the members (rule 5)."""
        state, view, index = hosted.stamp, candidacy.proposal, hosted.replica.index
        previous = state.view if state.role is not StamperRole.OUTSIDE else None
        if state.role is StamperRole.OUTSIDE:
            if candidacy.latest is not None and not self._holds(hosted, candidacy.latest):
                hosted.entry.forget()                  # dead members may have stamped what is pending
            state.held, state.next, state.emitted, state.history = {}, 0, 0, deque()
            if hosted.log.frontier is None and candidacy.latest is None and hosted.origin is Origin.FIRST_START:
                hosted.log.frontier = NO_PUNCTUATION   # the cluster's start: the whole stream (lifecycle rule 5)
            state.sync = (0, hosted.log.frontier)      # else known from its first punctuation (None till then)
            self.stamper.live(hosted, f"stamper of view {view.term}")
        state.candidacy = None
        self.learn(state, view)
        state.joiners = {i: e for i, e in state.joiners.items() if (i, e) not in view.members}
        self.stamper.set_role(hosted, StamperEvent.ELECTED)
        state.acked, state.told = {}, {}
        for member in view.members:
            if member[0] == index:
                continue
            carried = previous is not None and member in previous.members
            start = state.emitted if carried else state.sync[0]
            since = start if carried or not state.history else min(start, state.history[0][0])
            state.acked[member[0]], state.told[member[0]] = start, MemberSync.TOLD
            self.out.send(state.peers[member[0]], self.decided(hosted, member[0], previous if carried else None,
                                                                 start, since))
            for seq in range(since, state.next):
                self.stamper.send_segment(hosted, seq, [member])
        members = {state.peers.get(i) for i, _ in view.members}
        for node in state.electorate:
            if node not in members:
                self.out.send(node, self.decided(hosted, -1, None))
        for other, node in state.peers.items():
            if other != index and not any(i == other for i, _ in view.members):
                self.out.send(node, self.decided(hosted, other, None))
        # What is pending, then a punctuation at once: receivers that followed an earlier incarnation
        # of a member trust its new stream only from its first punctuation (receiver rule 2).
        for records, punctuation in [*hosted.entry.take_over(now), *hosted.entry.punctuate(now)]:
            self.stamper.stamp(hosted, records, punctuation, now)
        self.stamper.commit(hosted, now)

    def decided(self, hosted: Hosted, target: int, carried: View | None, start: int | None = None,
                 since: int | None = None) -> ViewDecided:
        """``ViewDecided`` for ``target``; ``carried``: the previous view it continues (rule 5)."""
        state = hosted.stamp
        start = state.sync[0] if start is None else start
        return ViewDecided(hosted.replica.name, target, state.view, start, state.sync[1],
                           -1 if carried is None else carried.term, start if since is None else since)
