"""The states of replicas, routes and inbound stream replicas, as enums and transition tables (h11 style).

Rules of this module:

1. Every state a node core keeps about a replica or a stream replica is one of these enums; no
   one-way booleans.  A change of state goes through :func:`advance`, which looks the pair up in
   the table and raises :class:`IllegalTransition` for anything the table does not list — a bug in
   the core, never a peer's doing (peers' messages are checked before they cause a transition).
2. The tables are the documentation: ``docs/lifecycle.md`` walks through them.
"""

from __future__ import annotations

from enum import Enum


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


_REPLICA = {
    ReplicaState.JOINING: {ReplicaState.LIVE, ReplicaState.REBUILDING, ReplicaState.REMOVED},
    ReplicaState.REBUILDING: {ReplicaState.LIVE, ReplicaState.JOINING, ReplicaState.REMOVED},
    ReplicaState.LIVE: {ReplicaState.JOINING, ReplicaState.REMOVED},
    ReplicaState.REMOVED: set(),
}
_ROUTE = {
    RouteState.PENDING: {RouteState.ACTIVE, RouteState.DETACHED},
    RouteState.ACTIVE: {RouteState.PENDING, RouteState.CUT},
    RouteState.CUT: {RouteState.ACTIVE, RouteState.DETACHED, RouteState.PENDING},
    RouteState.DETACHED: {RouteState.ACTIVE, RouteState.PENDING},
}
_INBOUND = {
    InboundState.UNPOSITIONED: {InboundState.FOLLOWING, InboundState.HOLDING, InboundState.STANDBY,
                                InboundState.VANISHED},
    InboundState.HOLDING: {InboundState.FOLLOWING, InboundState.UNPOSITIONED, InboundState.STANDBY,
                           InboundState.VANISHED},
    InboundState.FOLLOWING: {InboundState.HOLDING, InboundState.UNPOSITIONED, InboundState.STANDBY,
                             InboundState.VANISHED},
    InboundState.STANDBY: {InboundState.UNPOSITIONED, InboundState.HOLDING, InboundState.FOLLOWING,
                           InboundState.VANISHED},
    InboundState.VANISHED: {InboundState.UNPOSITIONED, InboundState.HOLDING, InboundState.FOLLOWING,
                            InboundState.STANDBY},
}
_STAMPER = {
    StamperRole.OUTSIDE: {StamperRole.MEMBER, StamperRole.STAMPING},
    StamperRole.MEMBER: {StamperRole.STAMPING, StamperRole.OUTSIDE},
    StamperRole.STAMPING: {StamperRole.MEMBER, StamperRole.OUTSIDE},
}
#: A new view starts every member at TOLD again (a new table, not a transition).
_MEMBER = {
    MemberSync.TOLD: {MemberSync.CONFIRMED, MemberSync.LOST},
    MemberSync.CONFIRMED: set(),
    MemberSync.LOST: set(),
}
#: A candidacy that ends (decided, refused, timed out) is dropped; the next one starts at PROMISING.
_CANDIDACY = {
    CandidacyPhase.PROMISING: {CandidacyPhase.ACCEPTING},
    CandidacyPhase.ACCEPTING: set(),
}
#: A pair's roles change only by a join between the partners (the donor leads) or when the failure
#: detector suspects the partner (both go on alone).
_PAIR = {
    PairRole.PRIMARY: {PairRole.SOLO, PairRole.BACKUP},
    PairRole.BACKUP: {PairRole.SOLO},
    PairRole.SOLO: {PairRole.PRIMARY, PairRole.BACKUP},
}
_TABLES = {ReplicaState: _REPLICA, RouteState: _ROUTE, InboundState: _INBOUND, StamperRole: _STAMPER,
           MemberSync: _MEMBER, CandidacyPhase: _CANDIDACY, PairRole: _PAIR}


def advance(current: Enum, new: Enum) -> Enum:
    """``new`` if the table allows ``current → new`` (or they are equal), else :class:`IllegalTransition`."""
    if new is current or new in _TABLES[type(current)][current]:
        return new
    raise IllegalTransition(f"{type(current).__name__}: {current.value} -> {new.value} is not allowed")


def transitions(kind: type[Enum]) -> dict[Enum, set[Enum]]:
    """The table of ``kind`` (for documentation and tests)."""
    return {state: set(targets) for state, targets in _TABLES[kind].items()}
