"""engine/node.py's crash-only wrapper on a real NodeCore: the first exception out of the core —
inside an operator on a source message or a peer's frame, or an IllegalTransition on the timer — moves it to ERROR,
is handed to ``on_error`` once, and every later input and drained output is refused; bad input
from outside is refused by the core without an exception and leaves it RUNNING."""

from __future__ import annotations

import json

import pytest

from replicast.engine.messages import Batch, Heartbeat, StreamHead
from replicast.engine.node import (CORE_TRANSITIONS, CoreFailed, CoreState, CoreStep, GuardedCore, IllegalTransition,
                                   NodeCore, ReplicaState, configure, next_core_state)
from replicast.engine.core.states import advance
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.engine.query_file import parse_query
from tests.integration.crash_operator import crash_query



def guarded(tmp_path, errors: list, entry_on: str = "a") -> GuardedCore:
    query = parse_query(crash_query(3, tmp_path / "marker"), "query.toml")
    core = GuardedCore(NodeCore("a", query, now=1), on_error=errors.append)
    core.apply(configure(query, {"cpu": [entry_on], "relay": ["a"], "out": ["a"]}, "a"), now=1)
    return core


def record(ts: int) -> bytes:
    return json.dumps({"ts": ts, "server": "s", "load": 0.5}).encode()


def every_call(core: GuardedCore) -> dict:
    return {"receive": lambda: core.receive("b", Heartbeat(sent_us=5), now=10), "apply": lambda: core.apply([], now=10),
            "on_source": lambda: core.on_source("cpu", record(10), now=10),
            "on_peer_up": lambda: core.on_peer_up("b", now=10), "on_peer_down": lambda: core.on_peer_down("b", now=10),
            "handle_timer": lambda: core.handle_timer(now=10), "set_coordinator": lambda: core.set_coordinator(None),
            "set_load": lambda: core.set_load(0.5), "messages_to_send": core.messages_to_send,
            "events": core.events, "next_timer": core.next_timer}


def test_an_exception_in_an_operator_stops_the_core_for_good(tmp_path):
    errors = []
    core = guarded(tmp_path, errors)
    for ts in (1, 2):
        core.on_source("cpu", record(ts), now=ts)
    assert [e.records for e in core.events() if type(e).__name__ == "Delivered" and e.records]
    with pytest.raises(CoreFailed, match="InjectedBug") as raised:
        core.on_source("cpu", record(3), now=3)
    assert type(raised.value.__cause__).__name__ == "InjectedBug"
    assert core.state is CoreState.ERROR and core.failure is raised.value.__cause__
    assert errors == [raised.value.__cause__]
    for name, call in every_call(core).items():
        with pytest.raises(CoreFailed, match="state error"):
            call()
    assert len(errors) == 1                                    # reported once, refused after
    assert core.statistics() and not core.ready()              # reads stay allowed (rule 3)


def test_an_exception_while_taking_a_peers_frame_stops_it_too(tmp_path):
    errors = []
    core = guarded(tmp_path, errors, entry_on="b")             # the entry point is b's: records come as frames
    core.on_peer_up("b", now=2)
    stream = StreamReplica(ReplicaId("cpu", 0), ReplicaId("relay", 0), 0)
    core.receive("b", StreamHead(stream, 0, 0, NO_PUNCTUATION), now=3)
    with pytest.raises(CoreFailed, match="InjectedBug"):
        core.receive("b", Batch(stream, 0, 0, [(10, "s", 0.5), (11, "s", 0.5), (12, "s", 0.5)], None), now=4)
    assert core.state is CoreState.ERROR and len(errors) == 1
    with pytest.raises(CoreFailed):
        core.messages_to_send()                                # nothing the half-updated core queued leaves


@pytest.mark.pure_python        # replaces the lifecycle's on_timer on the instance
def test_an_illegal_transition_on_the_timer_stops_it_too(tmp_path):
    errors = []
    core = guarded(tmp_path, errors)
    core._core.lifecycle.on_timer = lambda now: advance(ReplicaState.REMOVED, ReplicaState.LIVE)  # noqa: SLF001
    with pytest.raises(CoreFailed, match="IllegalTransition"):
        core.handle_timer(now=5)
    assert isinstance(errors[0], IllegalTransition) and core.state is CoreState.ERROR


def test_bad_input_from_outside_is_refused_by_the_core_not_raised(tmp_path):
    errors = []
    core = guarded(tmp_path, errors)
    for call in every_call(core).values():
        call()                                                  # a heartbeat from a stranger, an empty apply …
    before = core.statistics()
    core.on_source("cpu", b"\x91" * 1000 + b"\xc0", now=20)
    core.on_source("cpu", b"not json", now=21)
    core.on_source("nowhere", record(22), now=22)
    core.receive("b", StreamHead(StreamReplica(ReplicaId("cpu", 9), ReplicaId("nowhere", 0), 0), 0, 0, NO_PUNCTUATION),
                 now=23)
    after = core.statistics()
    assert core.state is CoreState.RUNNING and errors == [] and core.ready()
    refused = lambda stats: stats["replicas"]["cpu#0"]["malformed"] + stats["dead_letters"]  # noqa: E731
    assert refused(after) >= refused(before) + 2 and after["unknown_streams"] > before["unknown_streams"]   # counted


def test_every_row_of_the_table():
    assert CORE_TRANSITIONS == {(CoreState.RUNNING, CoreStep.RETURNED): CoreState.RUNNING,
                                (CoreState.RUNNING, CoreStep.RAISED): CoreState.ERROR}
    for (state, step), new in CORE_TRANSITIONS.items():
        assert next_core_state(state, step) is new
    for step in CoreStep:                                      # ERROR has no way out
        with pytest.raises(CoreFailed):
            next_core_state(CoreState.ERROR, step)
