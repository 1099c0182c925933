"""The node core's public face (DESIGN.md §3, §6): what drivers and tests import.

The core itself lives in :mod:`engine.core`, one module per job (see :mod:`engine.core.node`);
this module names the pieces a driver needs, so ``from engine.node import NodeCore`` stays the way
in — drivers (:mod:`engine.aio`, :mod:`simulator`) import nothing from ``engine.core`` directly
(``tests/engine/test_driver_imports.py``).

Rules of :class:`GuardedCore`, the crash-only wrapper a long-running driver holds (h11's ERROR state):

1. Bad input from outside never reaches it as an exception: the wire decoder and the handshake
   refuse bad frames before the core (:mod:`engine.wire`, :mod:`engine.handshake`), and the core
   refuses what it cannot use itself, counting it (``protocol_errors``, ``refused_control``, dead
   letters …) without raising.  So an exception out of the core is a bug in the core.
2. After such a bug the core may be half-updated: the wrapper moves to :attr:`CoreState.ERROR`,
   hands the exception to ``on_error`` once, and raises :class:`CoreFailed`.  In ERROR every input
   *and every drained output* is refused with :class:`CoreFailed`: nothing a half-updated core
   queued may leave the node.  The driver's duty is to stop the process with a non-zero status;
   its supervisor restarts it and it rejoins by snapshot (docs/lifecycle.md).
3. Reads that change nothing (:meth:`GuardedCore.statistics`, :attr:`~GuardedCore.hosted` …)
   stay allowed, for the last metrics; :meth:`GuardedCore.ready` is False in ERROR.
4. Pure, like the core: no clock, no logging; the driver logs what ``on_error`` receives.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable

from replicast.engine.core.configure import add_replica, configure, configure_pinned, placement_plan, remove_replica
from replicast.engine.core.events import (ControlRefused, DeadLetter, Decided, Delivered, Event, NodeOptions, PeerTimedOut,
                                ProtocolError, ReplicaChanged, SinkRestarted, StreamCutOff)
from replicast.engine.core.hosted import ReplicaKind, Start
from replicast.engine.core.modes import MODES, Mode, parse_mode, shape
from replicast.engine.core.node import NodeCore
from replicast.engine.core.states import IllegalTransition, InboundState, ReplicaState, RouteState
from replicast.engine.core.stats import COUNTERS, LATENCY_BOUNDS_US
from replicast.engine.core.baggage import trace_id
from replicast.engine.core.trace_aggregate import LogHistogram, finish as finish_trace_table, merge as merge_trace_tables
from replicast.engine.core.trace_language import TraceQuery, TraceQueryError, parse as parse_trace_query
from replicast.engine.core.tracepoints import (install as _install_trace, installed as installed_trace_queries,
                                               remove as _remove_trace, source_context as _trace_context,
                                               take as _take_traces)
#: For a driver holding a bare NodeCore (the simulator's trace queries: simulator/trace_queries.py).
install_trace_query, take_trace_tables = _install_trace, _take_traces
from replicast.engine.core.views import PersistVotes, StreamVotes, VoteMemory, Votes
from replicast.engine.messages import Message
from replicast.operators.errors import ReplicastError

if TYPE_CHECKING:
    from replicast.engine.core.coordination import CoordinationSetup

__all__ = ["NodeCore", "NodeOptions", "Start", "ReplicaKind", "configure", "configure_pinned", "placement_plan", "add_replica",
           "remove_replica", "Event", "Delivered", "DeadLetter", "Decided", "PeerTimedOut", "ProtocolError",
           "ReplicaChanged", "SinkRestarted", "StreamCutOff", "ControlRefused", "ReplicaState", "RouteState", "InboundState",
           "IllegalTransition", "MODES", "Mode", "parse_mode", "shape", "COUNTERS", "LATENCY_BOUNDS_US",
           "CoordinationSetup", "CoreState", "CoreStep", "CoreFailed", "GuardedCore", "next_core_state",
           "Votes", "VoteMemory", "PersistVotes", "StreamVotes",
           # Pivot-Tracing queries (docs/tracing.md): the language and the merge of partial tables are pure
           # and shared by the nodes, `trace-query` and the dashboard.
           "TraceQuery", "TraceQueryError", "parse_trace_query", "merge_trace_tables", "finish_trace_table",
           "LogHistogram", "trace_id", "installed_trace_queries"]


def __getattr__(name: str) -> Any:
    # The coordination setup imports numpy and placement: only when a driver asks for it (as the core does).
    if name == "CoordinationSetup":
        from replicast.engine.core.coordination import CoordinationSetup
        return CoordinationSetup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CoreState(Enum):
    """Whether a guarded core may still be used (rule 2)."""
    RUNNING = "running"
    ERROR = "error"


class CoreStep(Enum):
    """What one call into the core did."""
    RETURNED = "returned"
    RAISED = "raised"


#: (state, step) -> state.  ERROR has no row: whatever is asked of it is refused.
CORE_TRANSITIONS: dict[tuple[CoreState, CoreStep], CoreState] = {
    (CoreState.RUNNING, CoreStep.RETURNED): CoreState.RUNNING,
    (CoreState.RUNNING, CoreStep.RAISED): CoreState.ERROR,
}


def next_core_state(state: CoreState, step: CoreStep) -> CoreState:
    """The state after ``step`` in ``state``; :class:`CoreFailed` if the table has no row for it."""
    try:
        return CORE_TRANSITIONS[state, step]
    except KeyError:
        raise CoreFailed(f"the node core is in state {state.value}: it takes no more input") from None


class CoreFailed(ReplicastError):
    """The node core raised (a bug in the core, rule 1) or is in ERROR since it did: the process must exit."""


class GuardedCore:
    """A :class:`NodeCore` that stops for good at its first exception (module rules)."""

    def __init__(self, core: NodeCore, on_error: Callable[[BaseException], None] = lambda error: None):
        self._core, self._on_error = core, on_error
        self.state = CoreState.RUNNING
        #: The exception that moved the core to ERROR, or None.
        self.failure: BaseException | None = None

    # -- inputs (engine.core.node rule 2) ---------------------------------------------------------
    def receive(self, src: str, message: Message, *, now: int) -> None:
        self._call(self._core.receive, src, message, now=now)

    def apply(self, messages: Iterable[Message], *, now: int) -> None:
        self._call(self._core.apply, messages, now=now)

    def on_source(self, stream: str, payload: bytes, *, now: int) -> bool:
        return self._call(self._core.on_source, stream, payload, now=now)

    def on_peer_up(self, node: str, *, now: int) -> None:
        self._call(self._core.on_peer_up, node, now=now)

    def on_peer_down(self, node: str, *, now: int) -> None:
        self._call(self._core.on_peer_down, node, now=now)

    def handle_timer(self, *, now: int) -> None:
        self._call(self._core.handle_timer, now=now)

    def set_coordinator(self, node: str | None) -> None:
        self._call(self._core.set_coordinator, node)

    def set_load(self, load: float, capacity: float = 1.0) -> None:
        self._call(self._core.set_load, load, capacity)

    # -- drained outputs (engine.core.node rule 3): refused in ERROR -------------------------------
    def votes_to_persist(self) -> PersistVotes | None:
        return self._call(self._core.votes_to_persist)

    def messages_to_send(self) -> list[tuple[str, Message]]:
        return self._call(self._core.messages_to_send)

    def events(self) -> list[Event]:
        return self._call(self._core.events)

    def next_timer(self) -> int:
        return self._call(self._core.next_timer)

    # -- reads (rule 3) ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._core.name

    @property
    def hosted(self):
        return self._core.hosted

    @property
    def inbound(self):
        return self._core.inbound

    @property
    def coordination(self):
        return self._core.coordination

    def statistics(self) -> dict[str, Any]:
        return self._core.statistics()

    @property
    def tracer(self):
        return self._core.tracer

    # -- trace queries (docs/tracing.md): a user's input, so a refused query is a TraceQueryError for
    #    the caller, not the core's ERROR; none is taken in ERROR -----------------------------------
    def install_trace(self, qid: str, query) -> None:
        next_core_state(self.state, CoreStep.RETURNED)
        _install_trace(self._core, qid, query)

    def remove_trace(self, qid: str) -> bool:
        return _remove_trace(self._core, qid)

    def take_traces(self) -> dict[str, list]:
        return _take_traces(self._core)

    def trace_context(self, stream: str | None, traceparent: str | None) -> bool:
        """The next source message on ``stream`` came with this W3C traceparent (None: cleared)."""
        return _trace_context(self._core, stream, traceparent)

    def ready(self) -> bool:
        return self.state is CoreState.RUNNING and self._core.ready()

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        next_core_state(self.state, CoreStep.RETURNED)          # refused in ERROR
        try:
            result = method(*args, **kwargs)
        except Exception as error:
            self.state = next_core_state(self.state, CoreStep.RAISED)
            self.failure = error
            self._on_error(error)
            raise CoreFailed(f"the node core raised {type(error).__name__}: {error}") from error
        return result
