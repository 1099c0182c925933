"""Process pairs (mode ``synchronization``, the paper's baseline [9] in §VI-B): a primary sends its
backup the determinants of its input interleaving and holds its outputs until the backup
acknowledged them.

Rules of this module:

1. In mode ``synchronization`` every operator has at most two replicas (:func:`engine.core.modes.shape`),
   a pair, and each has a :class:`~engine.core.states.PairRole`.  At its node's first start replica
   0 is the PRIMARY and replica 1 the BACKUP.  A replica that joins from its partner's snapshot
   becomes its BACKUP and the donor its PRIMARY (a donating backup takes over first, rule 4); any
   other (re)start or rejoin is SOLO until such a join.  Entry points (one ordered input) and
   applications (not replicated) have no pairs.
2. A primary's operator takes each step — records of one port, then maybe its punctuation
   (:meth:`operators.replica.OperatorReplica.step`) — in the order its input arrived, as in
   replication, and each step is a numbered :class:`~engine.messages.Determinant` to the backup.
   Its output goes to its log but not out (:attr:`Hosted.gate <engine.core.hosted.Hosted>`) until
   the backup acknowledged the step that made it (:class:`~engine.messages.DeterminantAck`):
   "primaries must hold output tuples until backups acknowledge the receipt of determinants"
   (§VI-B).  Unacknowledged determinants are sent again when the link to the backup comes back.
3. A backup's operator takes its primary's steps, in order, instead of its own; its own input goes
   to a :class:`~engine.core.ledger.Ledger` that matches it against the determinants.  Its output
   goes out at once: it only repeats what the primary decided.
4. When the failure detector suspects the partner's node (nothing heard for ``peer_timeout``), a
   primary releases what it held and goes on SOLO; a backup *takes over*: its operator takes the
   own input no determinant carried and its own punctuations, and it goes on SOLO (the ledger drops
   the own records determinants already carried — also once it is a primary again: a backup that
   takes over to donate its snapshot to its restarted partner becomes that partner's primary at
   once, and its own late copies of records the old primary's determinants carried must not be
   processed a second time).  "After the failure, the latency dropped since
   [they] no more had synchronization partners" (§VI-B).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from replicast.engine.core.events import ProtocolError, ReplicaChanged
from replicast.engine.core.heard import Heard
from replicast.engine.core.hosted import Hosted, Origin, ReplicaKind
from replicast.engine.core.intents import NONE, CheckHorizon, Intent
from replicast.engine.core.ledger import Ledger
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.states import PairEvent, PairRole, ReplicaState, advance
from replicast.engine.messages import Determinant, DeterminantAck
from replicast.engine.wire import EncodedRecords, WireError
from replicast.operators.plan import ReplicaId
from replicast.operators.record import Record

if TYPE_CHECKING:
    from replicast.operators.query import Query
    from replicast.operators.replica import OperatorReplica

_TAKING = (ReplicaState.LIVE, ReplicaState.REBUILDING)


@dataclass
class Pair:
    """One hosted replica's side of its pair."""

    role: PairRole
    partner: ReplicaId
    node: str                                          # the partner's node
    seq: int = 0                                       # primary: steps sent; backup: steps taken
    #: primary: [seq, determinant, log end once its output is appended] not yet acknowledged
    unacked: deque = field(default_factory=deque)
    ledger: Ledger | None = None                       # backup, and after a take-over until settled


class Unpaired:
    """The modes without process pairs: the plug-in the node core holds instead of :class:`Pairs`,
    chosen once at construction.  No replica has a gate, so nothing is ever held."""

    def tap_into(self, replica: ReplicaId, logic: "OperatorReplica") -> None:
        pass                                           # operators step on their own (no determinants)

    def attach(self, hosted: Hosted) -> None:
        pass

    def forget(self, replica: ReplicaId) -> None:
        pass

    def alone(self, hosted: Hosted) -> None:
        pass

    def snapshot(self, donor: Hosted, now: int) -> None:
        return None

    def donated(self, donor: Hosted, joiner: ReplicaId) -> None:
        pass

    def restored(self, hosted: Hosted, donor: ReplicaId, state: dict[str, Any] | None) -> None:
        pass

    def on_peer_up(self, node: str) -> None:
        pass

    def check(self, now: int) -> None:
        pass

    def held(self, hosted: Hosted) -> int | None:
        return hosted.log.end                          # (no gate is ever set without pairs)

    def handlers(self) -> dict:
        return {}


class Pairs:
    """The pairs of one node's hosted operator replicas.  It reads the query (input widths) and the
    hosted replicas, the failure detector, sends through the outbox, and hands the sender what to
    ``release`` and ``emit`` (callbacks: the sender only asks it a value back, :meth:`held`).  A
    rebuilding backup's horizon check is an intent for the lifecycle, returned by
    :meth:`on_determinant` (:mod:`engine.core.intents`)."""

    def __init__(self, query: "Query", hosted: dict[ReplicaId, Hosted], outbox: Outbox, counters: dict[str, int],
                 heard: Heard, release: Callable[[Hosted, int | None], None], emit: Callable[..., None]):
        self.query, self.hosted, self.out, self.counters, self.heard = query, hosted, outbox, counters, heard
        self.release, self.emit = release, emit
        self.pairs: dict[ReplicaId, Pair] = {}

    def handlers(self) -> dict:
        """The messages pairs exchange, for the node core's dispatch."""
        return {Determinant: self.on_determinant, DeterminantAck: self.on_ack}

    def tap_into(self, replica: ReplicaId, logic: "OperatorReplica") -> None:
        """Every step of ``replica``'s new operator input passes through :meth:`tap` (rule 2)."""
        logic.tap = partial(self.tap, replica)

    # -- rule 1: roles ----------------------------------------------------------------------------
    def attach(self, hosted: Hosted) -> None:
        """``hosted`` was deployed: pair it with its partner (the other replica of its operator)."""
        partners = [(i, node) for i, node in enumerate(hosted.peers) if node and i != hosted.replica.index]
        if hosted.kind is not ReplicaKind.OPERATOR or not partners:
            return
        index, node = partners[0]
        event = PairEvent.ALONE
        if hosted.origin is Origin.FIRST_START:
            event = PairEvent.PAIRED_FIRST if hosted.replica.index < index else PairEvent.PAIRED_SECOND
        pair = self.pairs[hosted.replica] = Pair(PairRole.SOLO, ReplicaId(hosted.replica.name, index), node)
        self._become(hosted, pair, event)

    def _become(self, hosted: Hosted, pair: Pair, event: PairEvent) -> None:
        pair.role = role = advance(pair.role, event)
        if role is PairRole.BACKUP:
            pair.ledger = Ledger(len(hosted.logic.filters))
        if role is PairRole.PRIMARY:
            hosted.gate = hosted.log.end if hosted.gate is None else hosted.gate
        else:
            pair.unacked.clear()
            self.release(hosted, None)

    def forget(self, replica: ReplicaId) -> None:
        self.pairs.pop(replica, None)

    def alone(self, hosted: Hosted) -> None:
        """``hosted`` rejoins (a new incarnation): it is no one's partner until a join says so."""
        pair = self.pairs.get(hosted.replica)
        if pair is not None:
            pair.ledger = None
            self._become(hosted, pair, PairEvent.ALONE)

    def snapshot(self, donor: Hosted, now: int) -> dict[str, Any] | None:
        """Before ``donor`` gives a snapshot to its partner: a backup takes over first (its state must be
        its own); returns what the joiner needs to follow it as its backup."""
        pair = self.pairs.get(donor.replica)
        if pair is None:
            return None
        if pair.role is PairRole.BACKUP:
            self._take_over(donor, pair, "its partner asks for a snapshot", now)
        return {"seq": pair.seq}

    def donated(self, donor: Hosted, joiner: ReplicaId) -> None:
        """``donor`` gave ``joiner`` (its partner) a snapshot: it is the joiner's primary from there.
        What it held is in the snapshot, so it goes out now."""
        pair = self.pairs.get(donor.replica)
        if pair is None or joiner != pair.partner:
            return
        pair.unacked.clear()
        self.release(donor, None)
        self._become(donor, pair, PairEvent.DONATED)

    def restored(self, hosted: Hosted, donor: ReplicaId, state: dict[str, Any] | None) -> None:
        """``hosted`` restored its partner's snapshot: it is its backup, after the snapshot's step."""
        pair = self.pairs.get(hosted.replica)
        if pair is None or state is None or donor != pair.partner:
            return
        pair.seq = state["seq"]
        self._become(hosted, pair, PairEvent.RESTORED)

    # -- rules 2, 3: steps ------------------------------------------------------------------------
    def tap(self, replica: ReplicaId, logic: "OperatorReplica", port: int, records: list[Record],
            p: int | None) -> tuple[list[Record], int | None]:
        """Every step of ``replica``'s operator input passes here (``OperatorReplica.tap``)."""
        pair = self.pairs.get(replica)
        if pair is None:
            return logic.step(port, records, p)
        role = pair.role
        if role is PairRole.BACKUP:
            pair.ledger.take_own(port, records, p)
            return [], None
        if pair.ledger is not None:                    # after a take-over, alone or already a primary again (rule 4)
            records = pair.ledger.after_take_over(port, records, p)
            if pair.ledger.settled():
                pair.ledger = None
        if role is PairRole.PRIMARY:
            pair.seq += 1
            message = Determinant(pair.partner, pair.seq, port, EncodedRecords(records), p)
            pair.unacked.append([pair.seq, message, self.hosted[replica].log.end])
            self.counters["determinants"] += 1
            self.out.send(pair.node, message)
        return logic.step(port, records, p)

    def held(self, hosted: Hosted) -> int | None:
        """The sender appended output behind ``hosted``'s gate: it waits for the latest step's ack
        (None), or — no step unacknowledged — the sender releases it up to the returned offset."""
        pair = self.pairs.get(hosted.replica)
        if pair is not None and pair.role is PairRole.PRIMARY and pair.unacked:
            pair.unacked[-1][2] = hosted.log.end
            return None
        return hosted.log.end

    def on_ack(self, src: str, ack: DeterminantAck, now: int) -> None:
        pair = self.pairs.get(ack.primary)
        if pair is None or pair.role is not PairRole.PRIMARY or src != pair.node:
            self.counters["stale_requests"] += 1
            return
        upto = None
        while pair.unacked and pair.unacked[0][0] <= ack.seq:
            upto = pair.unacked.popleft()[2]
        if upto is not None:
            self.release(self.hosted[ack.primary], upto)

    def on_determinant(self, src: str, message: Determinant, now: int) -> tuple[Intent, ...]:
        """Rule 3: a backup takes its primary's step; returns a rebuilding backup's horizon check."""
        hosted, pair = self.hosted.get(message.backup), self.pairs.get(message.backup)
        if hosted is None or pair is None or pair.role is not PairRole.BACKUP or src != pair.node \
                or hosted.state not in _TAKING:
            self.counters["stale_batches"] += 1        # not (or no longer) its backup, or joining
            return NONE
        if message.seq <= pair.seq:
            return NONE                                # sent again after a reconnect: taken already
        records = self._records(hosted, message)
        if message.seq != pair.seq + 1 or records is None:
            self.counters["protocol_errors"] += 1
            self.out.event(ProtocolError(src, f"determinant {message.seq} for {message.backup} after {pair.seq}, "
                                          f"{'malformed' if records is None else 'out of order'}"))
            return NONE
        out, forwarded = hosted.logic.step(message.port, records, message.punctuation)
        pair.ledger.take_theirs(message.port, records, message.punctuation)
        pair.seq = message.seq
        self.out.send(src, DeterminantAck(pair.partner, message.seq))
        self.emit(hosted, out, forwarded, now)
        if forwarded is not None and hosted.state is ReplicaState.REBUILDING:
            return (CheckHorizon(hosted),)
        return NONE

    def _records(self, hosted: Hosted, message: Determinant) -> list[Record] | None:
        """The determinant's records, if they fit the port (else None: malformed)."""
        query, logic = self.query, hosted.logic
        if not 0 <= message.port < len(logic.filters):
            return None
        width = len(query.schemas[query.inputs_of(hosted.replica.name)[message.port]]) + 1
        try:
            records = list(message.records)
        except WireError:
            return None
        return records if all(len(r) == width for r in records) else None

    def on_peer_up(self, node: str) -> None:
        """Rule 2: the link to a backup came back: what it did not acknowledge goes again."""
        for pair in self.pairs.values():
            if pair.role is PairRole.PRIMARY and pair.node == node:
                for _, message, _ in pair.unacked:
                    self.out.send(node, message)

    # -- rule 4: the failure detector -------------------------------------------------------------
    def check(self, now: int) -> None:
        """At heartbeat rounds: a pair whose partner's node is suspected goes on alone."""
        for replica, pair in list(self.pairs.items()):
            if pair.role is PairRole.SOLO or not self.heard.suspected(pair.node, now):
                continue
            hosted = self.hosted[replica]
            seconds = (now - self.heard.last_heard(pair.node, now)) / 1e6
            reason = f"nothing heard from {pair.partner}'s node {pair.node} for {seconds:.1f} s"
            if pair.role is PairRole.BACKUP:
                self._take_over(hosted, pair, reason, now)
            else:
                self.out.event(ReplicaChanged(replica, "live", "live", f"primary goes on alone: {reason}"))
                self._become(hosted, pair, PairEvent.ALONE)

    def _take_over(self, hosted: Hosted, pair: Pair, reason: str, now: int) -> None:
        logic = hosted.logic
        self.counters["takeovers"] += 1
        self.out.event(ReplicaChanged(hosted.replica, "live", "live", f"backup takes over: {reason}"))
        self._become(hosted, pair, PairEvent.ALONE)
        for port in range(len(logic.filters)):
            records, p = pair.ledger.take_over(port)
            if records or p is not None:
                self.emit(hosted, *logic.step(port, records, p), now)
        if pair.ledger.settled():
            pair.ledger = None
