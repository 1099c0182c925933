"""The state tables of engine/core/states.py: every row walked, every unlisted pair refused (h11 style)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from replicast.engine.core.states import (EVENTS, Basis, BasisEvent, CandidacyPhase, IllegalTransition, InboundEvent,
                                          InboundState, JoinEvent, JoinPhase, MemberSync, PairRole, RebuildEvent,
                                          RebuildPhase, ReplicaEvent, ReplicaState, RouteEvent, RouteState,
                                          StamperEvent, StamperRole, advance, transitions)

#: The kinds the node core keeps (issue's list: replica, inbound stream replica, join, stamper, candidacy
#: — and the routes, bases, rebuilds, members and pairs that have tables too).
KINDS = [ReplicaState, RouteState, InboundState, JoinPhase, Basis, RebuildPhase, StamperRole, MemberSync,
         CandidacyPhase, PairRole]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_row_and_every_unlisted_pair(kind):
    table = transitions(kind)
    events = EVENTS[kind]
    assert table, f"{kind.__name__} has no table"
    for state, event in itertools.product(kind, events):
        if (state, event) in table:
            assert advance(state, event) is table[state, event]
        else:
            with pytest.raises(IllegalTransition, match=kind.__name__):
                advance(state, event)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_no_table_allows_everything(kind):
    table = transitions(kind)
    pairs = set(itertools.product(kind, EVENTS[kind]))
    assert set(table) < pairs, f"{kind.__name__}'s table lists every (state, event) pair"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_event_is_used_and_every_state_reached_or_initial(kind):
    table = transitions(kind)
    assert {event for _, event in table} == set(EVENTS[kind]), "an event no row uses"
    for state, event in table:
        assert isinstance(state, kind) and isinstance(event, EVENTS[kind]) and isinstance(table[state, event], kind)


def test_an_event_of_another_table_is_refused():
    """A (state, event) pair from two tables is a bug, not a transition."""
    with pytest.raises(IllegalTransition):
        advance(InboundState.HOLDING, ReplicaEvent.REJOIN)


def test_tables_say_what_the_core_relies_on():
    """Rows the node core's rules name (docs/lifecycle.md)."""
    with pytest.raises(IllegalTransition):
        advance(ReplicaState.REMOVED, ReplicaEvent.REJOIN)             # removed is final
    with pytest.raises(IllegalTransition):
        advance(InboundState.HOLDING, InboundEvent.HEAD)               # joining: positions come from the snapshot
    with pytest.raises(IllegalTransition):
        advance(InboundState.STANDBY, InboundEvent.HEAD)               # a Resume overtaken by a switch
    assert advance(RouteState.CUT, RouteEvent.STANDBY) is RouteState.DETACHED     # a cut standby retains nothing
    assert advance(JoinPhase.LINKING, JoinEvent.LINKED) is JoinPhase.ASKING
    with pytest.raises(IllegalTransition):
        advance(JoinPhase.ASKING, JoinEvent.LINKED)
    with pytest.raises(IllegalTransition):
        advance(StamperRole.OUTSIDE, StamperEvent.LEFT_OUT)
    # What an incarnation is built from (lifecycle rules 2-4): only a restored snapshot is a dead end,
    # and a snapshot is restored only by a join from scratch (a rejoin starts one).
    assert advance(Basis.SNAPSHOT, BasisEvent.STUCK_AGAIN) is Basis.DEAD_END
    assert all(advance(basis, BasisEvent.REJOIN) is Basis.SCRATCH for basis in Basis)
    for basis in (Basis.SCRATCH, Basis.DEAD_END):
        with pytest.raises(IllegalTransition):
            advance(basis, BasisEvent.STUCK_AGAIN)
    for basis in (Basis.SNAPSHOT, Basis.DEAD_END):
        with pytest.raises(IllegalTransition):
            advance(basis, BasisEvent.RESTORED)
    # A rebuild's horizon is named once (lifecycle rule 3): its last port adopts once.
    assert advance(RebuildPhase.ADOPTING, RebuildEvent.ADOPTED) is RebuildPhase.CATCHING_UP
    with pytest.raises(IllegalTransition):
        advance(RebuildPhase.CATCHING_UP, RebuildEvent.ADOPTED)


def markdown() -> str:
    """The tables as docs/lifecycle.md shows them: per kind, events down, states across."""
    parts = []
    for kind in [ReplicaState, InboundState, RouteState, JoinPhase, Basis, RebuildPhase, StamperRole, CandidacyPhase,
                 MemberSync, PairRole]:
        table = transitions(kind)
        states = list(kind)
        head = f"| `{kind.__name__}` ↓ event, state → | " + " | ".join(s.name for s in states) + " |"
        rule = "|---|" + "---|" * len(states)
        rows = [f"| {event.name} | " + " | ".join(table[s, event].name if (s, event) in table else "—"
                                                   for s in states) + " |" for event in EVENTS[kind]]
        parts.append("\n".join([head, rule, *rows]))
    return "\n\n".join(parts) + "\n"


def test_docs_show_the_tables_as_they_are():
    page = (Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md").read_text()
    assert markdown() in page, "docs/lifecycle.md's tables differ from engine/core/states.py: print markdown()"
