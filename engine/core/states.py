"""The states of replicas, routes and inbound stream replicas, as enums and transition tables (h11 style).

Rules of this module:

1. Every state a node core keeps about a replica or a stream replica is one of these enums; no
   one-way booleans.  A change of state is an *event* (an enum beside the state's: what happened)
   and goes through :func:`advance`, which looks ``(state, event)`` up in the state's table — as
   h11's ``_state.py`` does — and raises :class:`IllegalTransition` for any pair the table does not
   list: a bug in the core, never a peer's doing (peers' messages are checked before they cause a
   transition).  A self-transition is allowed only where its row is listed.
2. No table allows every event in every state (``tests/engine/test_states.py`` walks every row and
   checks that each table leaves pairs out).
3. The tables are the documentation: ``docs/lifecycle.md`` walks through them.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

#: Whichever state enum a table advances: advance() returns the same enum it is given.
_State = TypeVar("_State", bound=Enum)


class IllegalTransition(RuntimeError):
    """A transition the table does not allow (a bug in the node core)."""


class ReplicaState(Enum):
    """Where a hosted replica is in its life (DESIGN.md §6a)."""

    #: Deployed; asking upstream nodes to hold their logs, then a live peer for a snapshot.
    JOINING = "joining"
    #: No live peer: built from what upstream logs hold; outputs are complete above a horizon only.
    REBUILDING = "rebuilding"
    #: Exact: its state is what a replica that saw the whole input would hold.
    LIVE = "live"
    #: Removed by a control message; kept only until the core forgets it.
    REMOVED = "removed"


class RouteState(Enum):
    """The sender's side of one stream replica (a route from a hosted replica to a downstream replica)."""

    #: Not sending: the receiver has not said where to start (new, reconnected or joining).  The
    #: route pins the output log at its acknowledged offset.
    PENDING = "pending"
    #: Sending; the log is kept from the receiver's acknowledged offset.
    ACTIVE = "active"
    #: Sending, but the receiver lagged past the retention limit: the log no longer waits for it.
    CUT = "cut"
    #: Not sending and not retained for: a cut route whose connection went down.
    DETACHED = "detached"


class InboundState(Enum):
    """The receiver's side of one stream replica."""

    #: No position yet: asked the sender where its log starts.
    UNPOSITIONED = "unpositioned"
    #: The replica is joining: asked the sender to keep its log and send nothing yet.
    HOLDING = "holding"
    #: Receiving a known incarnation of the stream from a known offset.
    FOLLOWING = "following"
    #: Failover modes: a backup upstream replica this port does not follow; it sends nothing and keeps
    #: what a switch to it would need (engine.core.failover).
    STANDBY = "standby"
    #: The sender's node said it does not host the sending replica (a node restarted without a replica
    #: a coordinator had placed there): nothing will come; the port does not wait for it.  A stream
    #: head positions it again if the replica is deployed there after all (docs/lifecycle.md).
    VANISHED = "vanished"


class StamperRole(Enum):
    """An entry-stamped replica's part in its stream's view (:mod:`engine.core.stamper`)."""

    #: Not a member of the view: stamps nothing, emits nothing (its stream waits), asks to join.
    OUTSIDE = "outside"
    #: A member: holds what the stamper stamped, emits it once every member holds it.
    MEMBER = "member"
    #: The view's stamper.
    STAMPING = "stamping"


class MemberSync(Enum):
    """The stamper's knowledge of one other member of its view (:mod:`engine.core.stamper`)."""

    #: Told the view (``ViewDecided``), no acknowledgement yet.
    TOLD = "told"
    #: Acknowledged the view: when its link comes back it gets what it has not acknowledged again.
    CONFIRMED = "confirmed"
    #: Its link broke before it acknowledged: it may never have heard the view, so a new view
    #: (which tells every member again) is sought (view_changes rule 6).
    LOST = "lost"


class JoinPhase(Enum):
    """One join from a live peer's snapshot (:mod:`engine.core.lifecycle` rule 1)."""

    #: Waiting for the nodes of its peers to be connected (or the join time-out).
    LINKING = "linking"
    #: Asking its peers, one at a time, for a snapshot.
    ASKING = "asking"


class Basis(Enum):
    """What a hosted replica's incarnation was built from (:mod:`engine.core.lifecycle` rules 2-4);
    :attr:`Hosted.basis_at <engine.core.hosted.Hosted>` holds the ports' punctuations it names."""

    #: Nothing restored: a first start, a claimed stream, a rebuild from upstream logs.
    SCRATCH = "scratch"
    #: A live peer's snapshot, restored at its ports' punctuations (rule 2).
    SNAPSHOT = "snapshot"
    #: A rebuild because the snapshot it restored could not advance (rule 4): a peer's snapshot no
    #: further than those punctuations on some port would end the same way (rule 3).
    DEAD_END = "dead end"


class RebuildPhase(Enum):
    """One rebuild without a live peer (:mod:`engine.core.lifecycle` rule 3); a rebuild starts at
    ADOPTING (a new one, not a transition), and only while the replica is ``REBUILDING`` it counts."""

    #: Some port has not adopted the first frontier it was offered: the horizon is not known yet.
    ADOPTING = "adopting"
    #: Every port adopted a frontier; the operator named the horizon its outputs are complete above.
    CATCHING_UP = "catching up"


class CandidacyPhase(Enum):
    """One attempt to get a view decided (:mod:`engine.core.views` rule 2)."""

    #: Phase 1: waiting for a majority of promises.
    PROMISING = "promising"
    #: Phase 2: waiting for a majority of acceptances of the proposal.
    ACCEPTING = "accepting"


class PairRole(Enum):
    """A replica's part in a process pair (mode ``synchronization``, engine.core.pairs)."""

    #: Sends its steps as determinants to its backup and holds outputs until acknowledged.
    PRIMARY = "primary"
    #: Takes its primary's steps instead of its own input (kept in a ledger).
    BACKUP = "backup"
    #: No partner to keep in step with: processes its own input, holds nothing.
    SOLO = "solo"


class PortVerdict(Enum):
    """Whether a port of a hosted replica can still advance (:mod:`engine.core.lifecycle` rule 4)."""

    #: A trusted input or one still to be positioned can advance it.
    OK = "ok"
    #: Only inputs whose node is down (or that vanished) could advance it: wait a join time-out.
    SILENT = "silent"
    #: Every input it can hear is complete only above where the port is: it must rejoin.
    STUCK = "stuck"


# -- events: what makes a state change ---------------------------------------------------------


class ReplicaEvent(Enum):
    """What moves a hosted replica (:mod:`engine.core.lifecycle`, :mod:`engine.core.stamper`)."""

    #: A live peer's snapshot was restored (lifecycle rule 2).
    RESTORED = "restored"
    #: No live peer answered; an operator or application rebuilds from upstream logs (rule 3).
    NO_PEER = "no peer"
    #: No live peer answered; an entry point claims its stream (rule 5).
    CLAIMED = "claimed"
    #: A rebuilding replica's frontier passed its horizon (rule 3).
    CAUGHT_UP = "caught up"
    #: Entry-stamped: it became a member or the stamper of its stream's view (stamper rule 5).
    IN_VIEW = "in view"
    #: A new incarnation starts (rule 4; stamper rule 5).
    REJOIN = "rejoin"
    #: A control message removed it.
    REMOVE = "remove"


class RouteEvent(Enum):
    """What moves a route (:mod:`engine.core.sender`)."""

    #: The receiver said where to start (a ``Resume``, or a parked one answered): sending.
    SERVE = "serve"
    #: The receiver joins: keep the log, send nothing (``Hold``).
    HOLD = "hold"
    #: The receiver keeps this route as a failover standby (``Standby``).
    STANDBY = "standby"
    #: The receiver's node went down.
    PEER_DOWN = "peer down"
    #: The receiver lagged past the retention limit.
    LAGGED = "lagged"
    #: The sending replica started a new incarnation.
    REJOIN = "rejoin"


class InboundEvent(Enum):
    """What moves an inbound stream replica (:mod:`engine.core.receiver`, lifecycle, failover)."""

    #: The replica is joining: ask the sender to hold its log.
    HOLD = "hold"
    #: The sender's node came back while holding: ask again.
    PEER_UP = "peer up"
    #: The sender's node said it does not host the sending replica (receiver rule 6).
    NOT_HOSTED = "not hosted"
    #: A stream head (or a joined replica continuing one we hold) positions it (receiver rule 2).
    HEAD = "head"
    #: A restored snapshot gave its position (lifecycle rule 2).
    POSITIONED = "positioned"
    #: A restored snapshot had no position for it: ask for a head.
    UNPOSITIONED = "unpositioned"
    #: The replica rebuilds with no live peer: a held stream is asked for again (lifecycle rule 3).
    REBUILD = "rebuild"
    #: The replica starts a new incarnation (lifecycle rule 4).
    REJOIN = "rejoin"
    #: Failover: the port does not follow it; it stands by (failover rule 2).
    STAND_BY = "stand by"
    #: Failover: the port follows it now (a switch, or the followed one was disconnected).
    FOLLOW = "follow"


class JoinEvent(Enum):
    """What moves a join (:mod:`engine.core.lifecycle` rule 1)."""

    #: The nodes of its peers are connected, or the join time-out passed.
    LINKED = "linked"


class StamperEvent(Enum):
    """What moves an entry-stamped replica's role (:mod:`engine.core.view_changes`)."""

    #: A new incarnation starts outside every view (stamper rule 1).
    STARTED = "started"
    #: A view that lists it as a member (not its stamper) was decided.
    JOINED = "joined"
    #: A view left it out, or did not continue its stream.
    LEFT_OUT = "left out"
    #: Its own candidacy's view was decided: it stamps.
    ELECTED = "elected"


class MemberEvent(Enum):
    """What the stamper learns about one member (:mod:`engine.core.stamper`)."""

    #: The member acknowledged the view.
    ACKED = "acked"
    #: The member's link broke before it acknowledged.
    LINK_LOST = "link lost"


class BasisEvent(Enum):
    """What changes what an incarnation is built from (:mod:`engine.core.lifecycle`)."""

    #: A live peer's snapshot was restored (rule 2).
    RESTORED = "restored"
    #: A rejoin from a restored snapshot before any port moved past it (rule 4's ``again``): rebuild.
    STUCK_AGAIN = "stuck again"
    #: Any other rejoin: the new incarnation starts from nothing (rule 4).
    REJOIN = "rejoin"


class RebuildEvent(Enum):
    """What moves a rebuild (:mod:`engine.core.lifecycle` rule 3)."""

    #: The last port adopted its frontier: the horizon is known.
    ADOPTED = "adopted"


class CandidacyEvent(Enum):
    """What moves a candidacy (:mod:`engine.core.views` rule 2)."""

    #: A majority promised: propose.
    PROMISED = "promised"


class PairEvent(Enum):
    """What moves a process pair's role (:mod:`engine.core.pairs` rule 1)."""

    #: Both partners started together: the lower index leads.
    PAIRED_FIRST = "paired first"
    #: Both partners started together: the higher index follows.
    PAIRED_SECOND = "paired second"
    #: No partner to keep in step with (it started alone, rejoins, or suspects the partner).
    ALONE = "alone"
    #: It gave its partner a snapshot: it leads.
    DONATED = "donated"
    #: It restored its partner's snapshot: it follows.
    RESTORED = "restored"


# -- the tables: (state, event) -> state ---------------------------------------------------------

_R, _RE = ReplicaState, ReplicaEvent
_REPLICA = {
    (_R.JOINING, _RE.RESTORED): _R.LIVE,
    (_R.JOINING, _RE.NO_PEER): _R.REBUILDING,
    (_R.JOINING, _RE.CLAIMED): _R.LIVE,
    (_R.JOINING, _RE.IN_VIEW): _R.LIVE,
    (_R.REBUILDING, _RE.CAUGHT_UP): _R.LIVE,
    (_R.JOINING, _RE.REJOIN): _R.JOINING,           # a rejoin restarts a join under way
    (_R.REBUILDING, _RE.REJOIN): _R.JOINING,
    (_R.LIVE, _RE.REJOIN): _R.JOINING,
    (_R.JOINING, _RE.REMOVE): _R.REMOVED,
    (_R.REBUILDING, _RE.REMOVE): _R.REMOVED,
    (_R.LIVE, _RE.REMOVE): _R.REMOVED,
}
_T, _TE = RouteState, RouteEvent
_ROUTE = {
    **{(state, _TE.SERVE): _T.ACTIVE for state in RouteState},
    **{(state, _TE.HOLD): _T.PENDING for state in RouteState},
    (_T.PENDING, _TE.STANDBY): _T.PENDING,
    (_T.ACTIVE, _TE.STANDBY): _T.PENDING,
    (_T.CUT, _TE.STANDBY): _T.DETACHED,            # retained for nothing: a switch to it resumes from the log
    (_T.DETACHED, _TE.STANDBY): _T.PENDING,
    (_T.ACTIVE, _TE.PEER_DOWN): _T.PENDING,
    (_T.CUT, _TE.PEER_DOWN): _T.DETACHED,
    (_T.ACTIVE, _TE.LAGGED): _T.CUT,
    (_T.PENDING, _TE.LAGGED): _T.DETACHED,
    **{(state, _TE.REJOIN): _T.PENDING for state in RouteState},
}
_I, _IE = InboundState, InboundEvent
_INBOUND = {
    **{(state, _IE.HOLD): _I.HOLDING for state in InboundState if state is not _I.HOLDING},
    (_I.HOLDING, _IE.PEER_UP): _I.UNPOSITIONED,
    **{(state, _IE.NOT_HOSTED): _I.VANISHED for state in InboundState if state is not _I.VANISHED},
    # Heads are not taken while joining (positions come from the snapshot) or standing by.
    (_I.UNPOSITIONED, _IE.HEAD): _I.FOLLOWING,
    (_I.FOLLOWING, _IE.HEAD): _I.FOLLOWING,
    (_I.VANISHED, _IE.HEAD): _I.FOLLOWING,
    **{(state, _IE.POSITIONED): _I.FOLLOWING for state in InboundState},
    **{(state, _IE.UNPOSITIONED): _I.UNPOSITIONED for state in InboundState},
    (_I.HOLDING, _IE.REBUILD): _I.UNPOSITIONED,
    **{(state, _IE.REJOIN): _I.UNPOSITIONED for state in InboundState},
    **{(state, _IE.STAND_BY): _I.STANDBY for state in InboundState},
    **{(state, _IE.FOLLOW): _I.UNPOSITIONED for state in InboundState},
}
_JOIN = {
    (JoinPhase.LINKING, JoinEvent.LINKED): JoinPhase.ASKING,
}
_S, _SE = StamperRole, StamperEvent
_STAMPER = {
    **{(state, _SE.STARTED): _S.OUTSIDE for state in StamperRole},
    (_S.OUTSIDE, _SE.JOINED): _S.MEMBER,
    (_S.MEMBER, _SE.JOINED): _S.MEMBER,             # a later view that carries its stream on
    (_S.STAMPING, _SE.JOINED): _S.MEMBER,
    (_S.MEMBER, _SE.LEFT_OUT): _S.OUTSIDE,
    (_S.STAMPING, _SE.LEFT_OUT): _S.OUTSIDE,
    (_S.OUTSIDE, _SE.ELECTED): _S.STAMPING,
    (_S.MEMBER, _SE.ELECTED): _S.STAMPING,
    (_S.STAMPING, _SE.ELECTED): _S.STAMPING,        # a new view of its own (a member was lost)
}
#: A new view starts every member at TOLD again (a new table, not a transition).
_MEMBER = {
    (MemberSync.TOLD, MemberEvent.ACKED): MemberSync.CONFIRMED,
    (MemberSync.TOLD, MemberEvent.LINK_LOST): MemberSync.LOST,
}
#: Only a replica joining from scratch restores a snapshot (a rejoin starts every join from scratch);
#: only a restored snapshot can be a dead end.
_B, _BE = Basis, BasisEvent
_BASIS = {
    (_B.SCRATCH, _BE.RESTORED): _B.SNAPSHOT,
    (_B.SNAPSHOT, _BE.STUCK_AGAIN): _B.DEAD_END,
    **{(state, _BE.REJOIN): _B.SCRATCH for state in Basis},
}
_REBUILD = {
    (RebuildPhase.ADOPTING, RebuildEvent.ADOPTED): RebuildPhase.CATCHING_UP,
}
#: A candidacy that ends (decided, refused, timed out) is dropped; the next one starts at PROMISING.
_CANDIDACY = {
    (CandidacyPhase.PROMISING, CandidacyEvent.PROMISED): CandidacyPhase.ACCEPTING,
}
#: A pair's roles change only by a join between the partners (the donor leads) or when the failure
#: detector suspects the partner (both go on alone).  A pair is made SOLO, then paired.
_P, _PE = PairRole, PairEvent
_PAIR = {
    (_P.SOLO, _PE.PAIRED_FIRST): _P.PRIMARY,
    (_P.SOLO, _PE.PAIRED_SECOND): _P.BACKUP,
    (_P.SOLO, _PE.ALONE): _P.SOLO,
    (_P.PRIMARY, _PE.ALONE): _P.SOLO,
    (_P.BACKUP, _PE.ALONE): _P.SOLO,
    (_P.SOLO, _PE.DONATED): _P.PRIMARY,
    (_P.PRIMARY, _PE.DONATED): _P.PRIMARY,
    (_P.SOLO, _PE.RESTORED): _P.BACKUP,
    (_P.PRIMARY, _PE.RESTORED): _P.BACKUP,
    (_P.BACKUP, _PE.RESTORED): _P.BACKUP,
}
_TABLES = {ReplicaState: _REPLICA, RouteState: _ROUTE, InboundState: _INBOUND, JoinPhase: _JOIN,
           Basis: _BASIS, RebuildPhase: _REBUILD, StamperRole: _STAMPER, MemberSync: _MEMBER,
           CandidacyPhase: _CANDIDACY, PairRole: _PAIR}
#: Each table's event enum.
EVENTS = {ReplicaState: ReplicaEvent, RouteState: RouteEvent, InboundState: InboundEvent, JoinPhase: JoinEvent,
          Basis: BasisEvent, RebuildPhase: RebuildEvent, StamperRole: StamperEvent, MemberSync: MemberEvent,
          CandidacyPhase: CandidacyEvent, PairRole: PairEvent}


def advance(current: _State, event: Enum) -> _State:
    """The state ``event`` moves ``current`` to, if the table lists ``(current, event)``; else
    :class:`IllegalTransition`."""
    new = _TABLES[type(current)].get((current, event))
    if new is None:
        raise IllegalTransition(f"{type(current).__name__}: {event.value!r} in state {current.value!r} is not allowed")
    return new  # type: ignore[return-value]   (each table maps a state enum to itself)


def transitions(kind: type[Enum]) -> dict[tuple[Enum, Enum], Enum]:
    """The table of ``kind``, ``(state, event) -> state`` (for documentation and tests)."""
    return dict(_TABLES[kind])
