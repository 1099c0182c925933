"""One entry-stamped replica's state of its stream (``Hosted.stamp``): plain data, changed by
:mod:`engine.core.stamper` (rules 1-3) and :mod:`engine.core.view_changes` (rules 4-5), read by both —
its own module so that neither holds the other to name it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from replicast.engine.core.states import MemberSync, StamperRole
from replicast.engine.core.views import Candidacy
from replicast.engine.messages import View
from replicast.operators.base import NO_PUNCTUATION


@dataclass
class StampState:
    """One entry-stamped replica's view of its stream (``Hosted.stamp``)."""

    peers: dict[int, str]                       # replica index -> node
    epochs: dict[int, int]                      # replica index -> the newest incarnation heard of
    role: StamperRole = StamperRole.OUTSIDE
    view: View | None = None                    # the latest decided view known
    held: dict[int, tuple[list, int | None]] = field(default_factory=dict)   # seq -> segment, not emitted
    next: int = 0                               # the next sequence number
    emitted: int = 0                            # segments below are emitted
    acked: dict[int, int] = field(default_factory=dict)      # stamper: member index -> its StampAck
    told: dict[int, MemberSync] = field(default_factory=dict)   # stamper: member index -> what it knows
    #: The first segment after the last emitted punctuation, and that punctuation (None: none yet,
    #: and the stream's frontier is not known before one).
    sync: tuple[int, int | None] = (0, NO_PUNCTUATION)
    #: (seq, records, punctuation, when) emitted lately: since the last punctuation, and for
    #: ``peer_timeout_us`` — what a new member settles its pending records with (rule 5).
    history: deque = field(default_factory=deque)
    joiners: dict[int, int] = field(default_factory=dict)    # stamper: index -> epoch of replicas asking in
    candidacy: Candidacy | None = None
    act_at: int | None = None                   # when to seek a new view (rule 4's back-off)
    started: int = 0                            # when this incarnation started
    seen_term: int = 0
    electorate: tuple[str, ...] = ()
