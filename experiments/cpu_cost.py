"""CPU cost of one operator replica at a degree of replication (the paper's Table I, §VI-D).

The replica is the real node core's: one :class:`~engine.node.NodeCore` ("the measured node")
hosts replica 0 of the operator; ``k`` entry-point nodes each host a replica of every input stream,
so each input arrives as ``k`` stream replicas, and ``k`` downstream nodes each host a replica of a
pass-through Filter after the operator, so its output leaves as ``k`` stream replicas.  The
operator's other ``k − 1`` replicas are in the placement (their routes and peers exist) on nodes
that never connect.  Every message crosses as a wire frame (:mod:`engine.wire`), encoded by its
sender and decoded by its receiver: the per-replica cost includes "removing duplicates as well as
sending and receiving tuples via stream replicas" (§VI-D).

Measurement in two phases, so that nothing but the measured node is timed:

1. *record*: the whole cluster runs in this process on a hand clock (1 ms steps); every input the
   measured node gets (frames with their ``now``, timer calls) is logged;
2. *replay*: a fresh core with the same name, configuration and incarnation is fed exactly that
   log, decoding each frame and encoding everything it sends, and the process CPU time of the
   replay (``time.process_time_ns``, as the paper measured CPU usage, not wall time) is the cost.
   A core is deterministic in its inputs, so the replay does what the recorded node did.

Workload (§VI-D): every input gets 1 K tuples/s, one tuple per ms with a punctuation after it
(sources punctuate each payload); Filter always passes; Aggregate counts over a 10 ms window
sliding 1 ms; Join matches each tuple against the ~100 tuples of the other input inside its
100 ms window (a non-equality predicate, so every one is evaluated) and emits one tuple per ms;
Union merges two inputs.
"""

from __future__ import annotations

import gc
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable

from replicast.engine.messages import Batch
from replicast.engine.node import Delivered, NodeCore, NodeOptions, configure, placement_plan
from replicast.engine.wire import decode, encode
from replicast.operators.query import Query, QueryBuilder

#: The operators of Table I and how each is built: (inputs, QueryBuilder.operator parameters).
OPERATORS: dict[str, tuple[int, dict]] = {
    "union": (2, {"kind": "union"}),
    "filter": (1, {"kind": "filter", "where": "load >= 0.0"}),
    "aggregate": (1, {"kind": "aggregate", "window": {"kind": "time", "size_ms": 10, "slide_ms": 1},
                      "compute": {"n": "count()"}}),
    # `a.seq - b.seq == 0` is not an equality of two fields, so the plain (nested-loop) Join evaluates
    # it against every tuple of the other input inside the window: ~100 at 1 K tuples/s and 100 ms.
    "join": (2, {"kind": "join", "window_ms": 100, "on": "a.seq - b.seq == 0"}),
}
MEASURED = "measured"
_MS = 1000
_OPTIONS = NodeOptions(punctuation_us=100_000, heartbeat_us=500_000, peer_timeout_us=3_000_000)


@dataclass(frozen=True)
class Cost:
    """What one replay measured."""
    operator: str
    degree: int
    cpu_s: float              # CPU time of the measured node over the measured stream time
    stream_s: float           # stream time measured (after the warm-up)
    copies_in: int            # input records received (every stream replica's copy counts)
    records_out: int          # distinct records the operator emitted

    @property
    def cpu_percent(self) -> float:
        """Per cent of one core the replica uses at this input rate (the paper's unit)."""
        return 100.0 * self.cpu_s / self.stream_s


def build_query(operator: str) -> Query:
    """Inputs ``a`` (and ``b``) → the operator ``op`` → pass-through Filter ``down`` → application."""
    inputs, params = OPERATORS[operator]
    q = QueryBuilder(f"<table1 {operator}>")
    names = ["a", "b"][:inputs]
    for name in names:
        q.stream(name, {"seq": "int", "server": "str", "load": "float"})
    params = dict(params)
    q.operator("op", params.pop("kind"), names, **params)
    q.operator("down", "filter", "op", where="1 == 1")
    q.application("app", "down")
    return q.build()


def placement(query: Query, degree: int) -> dict[str, list[str]]:
    """Entry points on ``e0…``, the operator on the measured node and ``peer1…``,
    the downstream Filter on ``d0…``, the application on ``sink``."""
    where = {s: [f"e{i}" for i in range(degree)] for s in query.streams}
    where["op"] = [MEASURED, *(f"peer{i}" for i in range(1, degree))]
    where["down"] = [f"d{i}" for i in range(degree)]
    where["app"] = ["sink"]
    return where


def _payload(seq: int, now: int) -> bytes:
    """One tuple stamped ``now`` and a punctuation right after it (a source's JSON payload)."""
    record = {"ts": now, "seq": seq, "server": f"s{seq % 7}", "load": 0.25 + (seq % 50) / 100}
    return json.dumps([record, {"punctuation": now}]).encode()


@dataclass
class Recording:
    """The measured node's inputs in a recorded run: ``log`` holds ``("receive", src, frame, now)``,
    ``("timer", now)`` and ``("up", node, now)`` in order; ``counts`` the recorded replica's
    (input copies, records out) at the end; ``delivered`` the records the application got."""
    query: Query
    where: dict[str, list[str]]
    incarnation: int
    log: list[tuple]
    counts: tuple[int, int]
    delivered: int


def record_inputs(operator: str, degree: int, seconds: float) -> Recording:
    """Phase 1: run the cluster for ``seconds`` of stream, logging the measured node's inputs."""
    query = build_query(operator)
    where = placement(query, degree)
    physical = placement_plan(query, where)
    live = sorted({n for nodes in where.values() for n in nodes})
    cores = {n: NodeCore(n, query, _OPTIONS, now=0) for n in live}
    log: list[tuple] = []
    links: dict[tuple[str, str], deque] = defaultdict(deque)
    delivered = 0

    def flush() -> None:
        nonlocal delivered
        for name, core in cores.items():
            for dst, message in core.messages_to_send():
                if dst in cores:
                    links[(name, dst)].append(encode(message))
            delivered += sum(len(e.records) for e in core.events() if isinstance(e, Delivered))

    def pump(now: int) -> None:
        flush()
        while any(links.values()):
            for (src, dst), queue in list(links.items()):
                while queue:
                    frame = queue.popleft()
                    if dst == MEASURED:
                        log.append(("receive", src, frame, now))
                    cores[dst].receive(src, decode(frame[4:]), now=now)
            flush()

    for name, core in cores.items():
        core.apply(configure(query, where, name, None, physical), now=0)
    for name, core in cores.items():
        for other in cores:
            if other != name:
                if name == MEASURED:
                    log.append(("up", other, 0))
                core.on_peer_up(other, now=0)
    pump(0)
    for step in range(1, round(seconds * 1000) + 1):
        now = step * _MS
        for stream in query.streams:
            payload = _payload(step, now)
            for entry in where[stream]:
                cores[entry].on_source(stream, payload, now=now)
        for name, core in cores.items():
            if core.next_timer() <= now:
                if name == MEASURED:
                    log.append(("timer", now))
                core.handle_timer(now=now)
        pump(now)
    return Recording(query, where, cores[MEASURED].incarnation, log, _counts(cores[MEASURED]), delivered)


@dataclass(frozen=True)
class Replayed:
    """A replay: CPU ns from the first input after the warm-up to the end, the input copies and
    output records counted in that span, and the nodes the measured node sent batches to."""
    cpu_ns: int
    copies_in: int
    records_out: int
    batch_targets: frozenset[str]


def replay(recording: Recording, warmup_us: int, clock: Callable[[], int] = time.process_time_ns) -> Replayed:
    """Phase 2: a fresh measured core fed the recorded inputs, timed after ``warmup_us``."""
    core = NodeCore(MEASURED, recording.query, _OPTIONS, now=0, incarnation=recording.incarnation)
    core.apply(configure(recording.query, recording.where, MEASURED), now=0)
    before, started, targets = (0, 0), None, set()
    for entry in recording.log:
        if started is None and entry[-1] > warmup_us:
            before = _counts(core)
            gc.collect()
            started = clock()
        kind = entry[0]
        if kind == "receive":
            core.receive(entry[1], decode(entry[2][4:]), now=entry[3])
        elif kind == "timer":
            core.handle_timer(now=entry[1])
        else:
            core.on_peer_up(entry[1], now=entry[2])
        for node, message in core.messages_to_send():
            encode(message)
            if type(message) is Batch:
                targets.add(node)
        core.events()
    elapsed = 0 if started is None else clock() - started
    after = _counts(core)
    return Replayed(elapsed, after[0] - before[0], after[1] - before[1], frozenset(targets))


def _counts(core: NodeCore) -> tuple[int, int]:
    """(input copies received, records emitted) by the measured replica so far."""
    replica = next(h for r, h in core.hosted.items() if r.name == "op")
    return replica.records_in, replica.records_out
