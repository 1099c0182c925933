"""Entry-stamped mode: one stamper per stream, fenced by views, and nothing emitted before every member holds it.

A source event must get one timestamp, whatever fails (§II-B: entry points timestamp what they
receive; before views, with the link between two entry replicas cut, both stamped, and a take-over
re-stamped what the old stamper had sent downstream but not to its peer — docs/node.md,
"Entry-stamped mode").  Rules:

1. Roles (:class:`~engine.core.states.StamperRole`): a replica is OUTSIDE the stream's view (it
   stamps and emits nothing; its stream waits), a MEMBER, or the view's STAMPING replica.  Views
   are decided by a majority of voters (:mod:`engine.core.views`), so two replicas that cannot
   reach each other never both stamp: at most one of them can win a majority.
2. The stamper stamps source records and punctuates every ``punctuation_us``.  Each stamped segment
   gets the next sequence number, is held, and goes to every other member (``Stamped``).  Once
   every member has acknowledged it (``StampAck``) it is emitted, by the stamper at once and by the
   members when told (``Committed``).  So a segment anyone emitted is held by every member, and
   whoever stamps next has it: nothing is stamped twice.  The price: one round trip between the
   entry replicas before a record leaves (none with one member).
3. Members remember the raw records they received but have not seen stamped (``EntryPoint.pending``);
   a stamped copy settles one.  A new stamper stamps what is still pending (rule 5).
4. Who stamps changes only through a new view, decided by a majority of voters: see
   :mod:`engine.core.view_changes` (rules 4 and 5 there).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from replicast.engine.core.events import ProtocolError, ReplicaChanged
from replicast.engine.core.configure import peer_stream
from replicast.engine.core.hosted import Hosted
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.states import (MemberEvent, MemberSync, ReplicaEvent, ReplicaState, StamperEvent,
                                          StamperRole, advance)
from replicast.engine.core.view_changes import ViewChanges
from replicast.engine.core.views import Voter
from replicast.engine.messages import Committed, JoinStamping, StampAck, Stamped
from replicast.engine.wire import WireError
from replicast.operators.plan import ReplicaId

if TYPE_CHECKING:
    from replicast.engine.core.events import NodeOptions
    from replicast.operators.query import Query

#: A stamper that cannot commit stops stamping new records (they stay pending) past this many segments.
MAX_HELD = 100_000


class Stamper:
    """Entry-stamped replicas of one node: rules 1-3 here, view changes in :mod:`engine.core.view_changes`."""

    def __init__(self, query: "Query", options: "NodeOptions", hosted: dict[ReplicaId, Hosted], outbox: Outbox,
                 counters: dict[str, int], incarnation: int, *, emit: Callable[..., None],
                 serve_parked: Callable[[Hosted], None], voter: Voter):
        """It reads the query, the node's options, incarnation and hosted replicas, sends through the
        outbox, and hands the sender what to ``emit`` and whose parked requests to serve
        (callbacks); a view change's rejoin is an intent for the lifecycle
        (:mod:`engine.core.view_changes`, :mod:`engine.core.intents`)."""
        self.query, self.options, self.replicas, self.out, self.counters = query, options, hosted, outbox, counters
        self.emit_output, self.serve_parked = emit, serve_parked
        self.views = ViewChanges(self, options, outbox, counters, incarnation, voter)
        #: The hosted entry-stamped replicas, in the order of the hosted table (kept by :meth:`track`):
        #: the timer asks after them at every transmission, and most nodes host none.
        self.stamped: dict[ReplicaId, Hosted] = {}

    def track(self, hosted: Hosted) -> None:
        """``hosted`` was deployed (in place of any replica of its id); tracked if it stamps."""
        if hosted.stamp is not None:
            self.stamped[hosted.replica] = hosted
        else:
            self.stamped.pop(hosted.replica, None)

    def forget(self, replica: ReplicaId) -> None:
        self.stamped.pop(replica, None)

    @property
    def any(self) -> bool:
        """Whether some hosted replica stamps (then the core punctuates on its timer)."""
        return any(h.stamp.role is StamperRole.STAMPING for h in self.stamped.values())

    def states(self, stream: str | None = None):
        for hosted in list(self.stamped.values()):
            if stream is None or hosted.replica.name == stream:
                yield hosted, hosted.stamp

    def hosted(self, stream: str, index: int) -> Hosted | None:
        hosted = self.replicas.get(ReplicaId(stream, index))
        return hosted if hosted is not None and hosted.stamp is not None else None

    # -- start (a deployed or re-incarnated replica) ------------------------------------------
    def start(self, hosted: Hosted, now: int) -> None:
        """Outside the view, its stream waiting (log frontier unknown), asking its peers to join."""
        state = hosted.stamp
        state.role = advance(state.role, StamperEvent.STARTED)
        state.held, state.next, state.emitted = {}, 0, 0
        state.acked, state.history, state.joiners, state.candidacy = {}, deque(), {}, None
        state.epochs[hosted.replica.index] = hosted.epoch
        state.started = now
        hosted.entry.forget()
        state.act_at = now + self.views.rank(hosted) * self.options.heartbeat_us
        self.ask_to_join(hosted)

    def ask_to_join(self, hosted: Hosted, nodes=None) -> None:
        message = JoinStamping(hosted.replica.name, hosted.replica.index, hosted.epoch)
        for index, node in hosted.stamp.peers.items():
            if index != hosted.replica.index and (nodes is None or node in nodes):
                self.out.send(node, message)

    # -- the source and the stamper (rule 2) --------------------------------------------------
    def on_items(self, hosted: Hosted, items: list[Any], now: int) -> list:
        """A source payload's items: stamped by the stamper, remembered by the others; the rejects."""
        state = hosted.stamp
        stamping = state.role is StamperRole.STAMPING and len(state.held) < MAX_HELD
        segments, rejects = hosted.entry.on_items(items, now=now, stamping=stamping)
        for records, punctuation in segments:
            self.stamp(hosted, records, punctuation, now)
        if segments:
            self.commit(hosted, now)
        return rejects

    def punctuate(self, now: int) -> None:
        for hosted, state in self.states():
            if state.role is StamperRole.STAMPING and len(state.held) < MAX_HELD:
                for records, punctuation in hosted.entry.punctuate(now):
                    self.stamp(hosted, records, punctuation, now)
                self.commit(hosted, now)

    def stamp(self, hosted: Hosted, records: list, punctuation: int | None, now: int) -> None:
        state = hosted.stamp
        seq, state.next = state.next, state.next + 1
        state.held[seq] = (records, punctuation)
        self.send_segment(hosted, seq, [m for m in state.view.members if m[0] != hosted.replica.index])

    def send_segment(self, hosted: Hosted, seq: int, members) -> None:
        state, name = hosted.stamp, hosted.replica.name
        if seq in state.held:
            records, punctuation = state.held[seq]
        else:                                          # emitted: in the history (contiguous)
            _, records, punctuation, _ = state.history[seq - state.history[0][0]]
        for index, _ in members:
            self.out.send(state.peers[index], Stamped(name, index, state.view.term, seq, records, punctuation))

    def commit(self, hosted: Hosted, now: int) -> None:
        """The stamper emits what every member holds and tells them (rule 2)."""
        state = hosted.stamp
        if state.role is not StamperRole.STAMPING:
            return
        others = [index for index, _ in state.view.members if index != hosted.replica.index]
        upto = min([state.acked.get(index, state.emitted) for index in others] + [state.next])
        if upto > state.emitted:
            self.emit(hosted, upto, now)
            for index in others:
                self.out.send(state.peers[index], Committed(hosted.replica.name, index, state.view.term, upto))

    def emit(self, hosted: Hosted, upto: int, now: int) -> None:
        state = hosted.stamp
        history, keep = state.history, now - self.options.peer_timeout_us
        while state.emitted < upto and state.emitted in state.held:
            seq = state.emitted
            records, punctuation = state.held.pop(seq)
            self.emit_output(hosted, records, punctuation, now)
            history.append((seq, records, punctuation, now))
            if punctuation is not None:
                state.sync = (seq + 1, punctuation)
            state.emitted += 1
        while history and history[0][3] < keep and history[0][0] < state.sync[0]:
            history.popleft()

    # -- members (rules 2, 3) -----------------------------------------------------------------
    def _from_stamper(self, src: str, message: Stamped | Committed) -> Hosted | None:
        """The member ``message`` is for, if it comes from the stamper of that member's view (else
        counted as stale)."""
        hosted = self.hosted(message.stream, message.target)
        state = hosted.stamp if hosted is not None else None
        if state is None or state.role is not StamperRole.MEMBER or message.term != state.view.term \
                or src != state.peers.get(state.view.stamper):
            self.counters["stale_stamps"] += 1
            return None
        return hosted

    def on_stamped(self, src: str, message: Stamped, now: int) -> None:
        hosted = self._from_stamper(src, message)
        if hosted is None:
            return
        state = hosted.stamp
        if message.seq == state.next:
            try:
                records = [tuple(r) for r in message.records]
                width = len(self.query.schemas[message.stream]) + 1
                if any(len(r) != width for r in records):
                    raise WireError("wrong width")
            except WireError:
                self.counters["malformed_batches"] += 1
                self.out.event(ProtocolError(src, f"malformed stamped segment {message.seq} of {message.stream}"))
                return
            if message.seq >= state.emitted:
                state.held[message.seq] = (records, message.punctuation)
            state.next += 1                            # (below emitted: a new member only settles, rule 5)
            hosted.entry.settle(records)
            if message.punctuation is not None:
                hosted.entry.punctuation = max(hosted.entry.punctuation, message.punctuation)
        if message.seq <= state.next:
            self.out.send(src, StampAck(message.stream, state.view.stamper, hosted.replica.index, state.view.term,
                                         state.next))

    def on_ack(self, src: str, message: StampAck, now: int) -> None:
        hosted = self.hosted(message.stream, message.target)
        state = hosted.stamp if hosted is not None else None
        if state is None or state.role is not StamperRole.STAMPING or message.term != state.view.term \
                or src != state.peers.get(message.member) \
                or not any(index == message.member for index, _ in state.view.members):
            self.counters["stale_stamps"] += 1
            return
        state.acked[message.member] = max(state.acked.get(message.member, 0), min(message.seq, state.next))
        if state.told.get(message.member) is MemberSync.TOLD:      # (LOST stays LOST: a new view is due)
            state.told[message.member] = advance(MemberSync.TOLD, MemberEvent.ACKED)
        self.commit(hosted, now)

    def on_committed(self, src: str, message: Committed, now: int) -> None:
        hosted = self._from_stamper(src, message)
        if hosted is not None:
            self.emit(hosted, min(message.seq, hosted.stamp.next), now)

    # -- links, peers and time ----------------------------------------------------------------
    def on_peer_change(self, node: str, now: int) -> None:
        up = node in self.out.connected
        for hosted, state in self.states():
            if up and state.candidacy is not None and node in state.candidacy.voters:
                self.out.send(node, state.candidacy.ballot(hosted.replica.name, hosted.replica.index))
            if up and state.role is StamperRole.OUTSIDE:
                self.ask_to_join(hosted, {node})
            if up and state.role is StamperRole.STAMPING:
                self._resend(hosted, node)
                if node in state.electorate:
                    self.out.send(node, self.views.decided(hosted, -1, None))     # a restarted voter learns the view
                for index, peer in state.peers.items():                  # a replica left out learns it
                    if peer == node and not any(i == index for i, _ in state.view.members):
                        self.out.send(node, self.views.decided(hosted, index, None))
            self.views.review(hosted, now)

    def _resend(self, hosted: Hosted, node: str) -> None:
        """A member's link is back: what it may have lost in flight again (its acks say from where);
        a member that had not acknowledged the view yet gets it through a new view (rule 4)."""
        state = hosted.stamp
        for member in state.view.members:
            if member[0] == hosted.replica.index or state.peers.get(member[0]) != node:
                continue
            told = state.told.get(member[0], MemberSync.TOLD)
            if told is MemberSync.TOLD:
                state.told[member[0]] = advance(told, MemberEvent.LINK_LOST)
            if told is not MemberSync.CONFIRMED:
                continue
            for seq in range(state.acked.get(member[0], state.emitted), state.next):
                self.send_segment(hosted, seq, [member])
            self.out.send(node, Committed(hosted.replica.name, member[0], state.view.term, state.emitted))

    def peer_stream(self, stream) -> bool:
        """Whether ``stream`` runs between two replicas of an entry-stamped entry point
        (:func:`engine.core.configure.peer_stream`)."""
        return peer_stream(self.query, self.options.entry_modes, stream)

    def connect_peer(self, hosted: Hosted, index: int, node: str, now: int) -> None:
        """A peer replica is at ``node`` (a stream replica entry → entry, configure's).  Control
        messages only note it: the timer seeks a view, once the whole configuration is applied."""
        hosted.stamp.peers[index] = node
        self.views.review(hosted, now, seek=False)

    def disconnect_peer(self, hosted: Hosted, index: int, now: int) -> None:
        """Peer replica ``index`` was removed."""
        hosted.stamp.peers.pop(index, None)
        hosted.stamp.joiners.pop(index, None)
        self.views.review(hosted, now, seek=False)

    def on_timer(self, now: int) -> None:
        for hosted, state in self.states():
            if state.candidacy is not None and now >= state.candidacy.deadline:
                state.candidacy = None                 # unanswered: seek again after a back-off
                state.act_at = now + (1 + self.views.rank(hosted)) * self.options.heartbeat_us
            self.views.review(hosted, now)

    def next_deadline(self) -> int | None:
        times = [t for _, s in self.states()
                 for t in (s.candidacy.deadline if s.candidacy else None, s.act_at) if t is not None]
        return min(times, default=None)

    # -- helpers ------------------------------------------------------------------------------
    def set_role(self, hosted: Hosted, event: StamperEvent) -> None:
        hosted.stamp.role = advance(hosted.stamp.role, event)

    def live(self, hosted: Hosted, reason: str) -> None:
        old = hosted.state
        if old is not ReplicaState.LIVE:
            hosted.state = advance(old, ReplicaEvent.IN_VIEW)
            self.out.event(ReplicaChanged(hosted.replica, old.value, ReplicaState.LIVE.value, reason))
        self.serve_parked(hosted)
