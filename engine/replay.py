"""Replicated replay: runs a query's whole physical replica graph in one process (DESIGN.md §6a; docs/replay.md).

This is the proof harness for replication transparency (§III): the same source records are fed
to ``k`` replicas of every entry point and operator, every stream replica is a FIFO channel with
its own random delay (TCP-like: a message never overtakes an earlier one on its channel), all
deliveries are interleaved by one schedule seeded by ``seed``, and ``crash`` randomly chosen
replicas fail for good at random times (never all replicas of one operator).  The applications'
outputs must equal — as multisets, and in order for ordered applications — the outputs of the
non-replicated, failure-free run (``replicas=1, crash=0``).

Sources behave as §IV-A describes: each stream sends its records at their event time and a
punctuation every ``punctuation_us`` of event time (``p = n·P − 1`` just before the first record
at or after ``n·P``), and finally :data:`~operators.record.CLOSED`.  A stream that declares
``seal`` also sends, after each punctuation, a seal per key it has produced, as high as its
records allow (just below the key's next record): the scheduled replay carries them through the
replicas as the node does (operators/key_seals.py), while the reference run ignores them, so
``--check`` compares sealed replicas with the unsealed one-copy output.

The replicas themselves are the same pure :class:`~operators.replica.OperatorReplica` objects the
node hosts; only this scheduler is specific to replay.

With one replica and no crash (the reference run) there is nothing adversarial to schedule, so
:func:`replay` runs the plan straight through instead (:class:`_StraightThrough`): each source
sends one batch per punctuation interval, and every batch goes depth-first through the plan the
moment it is emitted — no per-record messages, delays or heap (docs/performance.md: the scheduled reference
run was 25–70× slower than the operators).  That is one particular schedule with zero delays, so
by replication transparency its output is the scheduled run's: the same multiset per application,
and the same list for ordered ones (``tests/engine/test_replay.py`` checks it against
:func:`scheduled_replay` with ``replicas=1``).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator
from itertools import count
from operator import itemgetter

from replicast.operators.errors import InputError
from replicast.operators.key_seals import KeySeal, KeySealing, key_names, key_sealing
from replicast.operators.plan import PhysicalPlan, ReplicaId, plan
from replicast.operators.query import Query
from replicast.operators.record import CLOSED, Record
from replicast.operators.replica import OperatorReplica, application_sink, entry_point

_ts = itemgetter(0)
_send_order = itemgetter(0, 1)


@dataclass
class ReplayResult:
    """Per application, the records delivered to it, in delivery order."""

    outputs: dict[str, list[Record]]
    crashed: list[ReplicaId] = field(default_factory=list)
    messages: int = 0
    duplicates: int = 0
    evaluation_errors: int = 0

    def multisets(self) -> dict[str, Counter]:
        return {app: Counter(records) for app, records in self.outputs.items()}


def source_messages(records: list[Record], punctuation_us: int) -> list[tuple[int, list[Record], int | None]]:
    """What a source sends: ``(send time, records, punctuation)``, punctuated every ``punctuation_us``."""
    messages: list[tuple[int, list[Record], int | None]] = []
    last = None
    for record in records:
        ts = record[0]
        boundary = (ts // punctuation_us) * punctuation_us - 1   # all later records have ts > boundary
        if last is None or boundary > last:
            messages.append((ts, [], boundary))
            last = boundary
        messages.append((ts, [record], None))
    end = records[-1][0] + 1 if records else 0
    messages.append((end, [], CLOSED))
    return messages


def source_batches(records: list[Record], punctuation_us: int,
                   stream: str = "stream") -> Iterator[tuple[int, list[Record], int]]:
    """:func:`source_messages` with each interval's records in one batch, sent with the punctuation after them.

    ``(send time, records, punctuation)``: first ``(t, [], p0)``, then each interval's records with
    the punctuation that closes the interval, sent when the source learns it (its next record), and
    the last interval's records with :data:`~operators.record.CLOSED`.  ``records`` must be in
    timestamp order (checked at once: :func:`~engine.event_file.read_events` checks it too; ``stream``
    names them in the error); an interval ends at the first record at or after the next multiple of
    ``punctuation_us``, found by bisection.  The batches are cut as they are consumed, so a run
    holds one of them at a time (all of them alive made the garbage collector traverse them all
    through the run: ~15% of a reference run of filter+map).
    """
    stamps = list(map(_ts, records))                     # in C
    if stamps != sorted(stamps):
        raise InputError(f"{stream}: records are not in timestamp order")
    return _cut(records, stamps, punctuation_us)


def _cut(records: list[Record], stamps: list[int], punctuation_us: int) -> Iterator[tuple[int, list[Record], int]]:
    if not stamps:
        yield 0, [], CLOSED
        return
    first = stamps[0]
    yield first, [], (first // punctuation_us) * punctuation_us - 1
    start = 0
    while True:
        end = bisect_left(stamps, (stamps[start] // punctuation_us + 1) * punctuation_us, start)
        if end == len(stamps):
            yield stamps[-1] + 1, records[start:], CLOSED
            return
        ts = stamps[end]                       # all later records have ts > the boundary before ts
        yield ts, records[start:end], (ts // punctuation_us) * punctuation_us - 1
        start = end


def _tagged(i: int, name: str, batches: Iterator[tuple[int, list[Record], int]]):
    """``(send time, i, name, records, punctuation)`` for each batch of stream ``name`` (number ``i``)."""
    for when, records, punctuation in batches:
        yield when, i, name, records, punctuation


def choose_crashes(physical: PhysicalPlan, n: int, rng: random.Random) -> list[ReplicaId]:
    """``n`` replicas of entry points and operators, leaving at least one alive of each."""
    candidates = [r for name, ids in physical.replicas.items() if physical.kind(name) != "application" for r in ids]
    alive = {name: len(ids) for name, ids in physical.replicas.items()}
    possible = sum(k - 1 for name, k in alive.items() if physical.kind(name) != "application")
    if n < 0 or n > possible:
        raise InputError(f"--crash {n}: between 0 and {possible} replicas can crash while one replica of every "
                         f"entry point and operator survives")
    rng.shuffle(candidates)
    chosen = []
    for replica in candidates:
        if len(chosen) == n:
            break
        if alive[replica.name] > 1:
            alive[replica.name] -= 1
            chosen.append(replica)
    return chosen


def seal_schedule(records: list[Record], positions: tuple[int, ...]):
    """``seals(p)``: after punctuation ``p``, a seal per key seen at or below ``p``, each just below that
    key's next record (or at the stream's last timestamp when it has none)."""
    stamps: dict[tuple, list[int]] = {}
    for record in records:
        stamps.setdefault(tuple(record[i] for i in positions), []).append(record[0])
    last = records[-1][0] if records else 0

    def seals(p: int) -> list[KeySeal]:
        out = []
        for key, ts in stamps.items():
            if ts[0] <= p:
                following = bisect_left(ts, p + 1)
                out.append((key, ts[following] - 1 if following < len(ts) else max(last, p)))
        return out
    return seals


class _Replay:
    def __init__(self, query: Query, replicas: int, seed: int, punctuation_us: int):
        self.physical = plan(query, replicas)
        self.rng = random.Random(seed)
        self.punctuation_us = punctuation_us
        self.nodes: dict[ReplicaId, OperatorReplica] = {}
        # channel id -> (target, port, upstream index); routes: source replica -> its channel ids
        self.channels: list[tuple[ReplicaId, int, int]] = []
        self.delay: list[int] = []
        self.jitter: list[int] = []
        self.last_arrival: list[int] = []
        self.routes: dict[ReplicaId, list[int]] = {}
        self.queue: list = []
        self.sequence = count()
        self.dead: set[ReplicaId] = set()
        self.outputs: dict[str, list[Record]] = {app: [] for app in query.applications}
        self.messages = 0
        self._build()

    def _channel(self, target: ReplicaId, port: int, upstream: int) -> int:
        self.channels.append((target, port, upstream))
        # §VI: wide-area paths differ a lot; make delays comparable to the punctuation interval.
        self.delay.append(self.rng.randrange(0, 2 * self.punctuation_us + 1))
        self.jitter.append(self.rng.randrange(0, self.punctuation_us // 2 + 1))
        self.last_arrival.append(0)
        return len(self.channels) - 1

    def _build(self) -> None:
        physical, query = self.physical, self.physical.query
        for name, ids in physical.replicas.items():
            kind = physical.kind(name)
            for replica in ids:
                counts = [len(physical.upstreams(replica, port)) for port in range(physical.n_ports(name))]
                if kind == "entry":
                    key = key_names(query.streams[name].seal)
                    positions = tuple(query.schemas[name].index(a) for a in key)
                    self.nodes[replica] = entry_point(sealing=KeySealing(key, forwards=True, record_positions=positions)
                                                      if key else None)
                elif kind == "application":
                    self.nodes[replica] = application_sink(counts[0], query.applications[name].ordered)
                else:
                    self.nodes[replica] = OperatorReplica(query.new_operator(name), counts, physical.sorts_input(name),
                                                          sealing=key_sealing(query, name))
        for name, ids in physical.replicas.items():
            for replica in ids:
                for port in range(physical.n_ports(name)):
                    for index, source in enumerate(physical.upstreams(replica, port)):
                        self.routes.setdefault(source, []).append(self._channel(replica, port, index))
        self.source_channels = {name: [self._channel(r, 0, 0) for r in physical.replicas[name]]
                                for name in query.streams}

    def send(self, channel: int, now: int, records: list[Record], punctuation: int | None) -> None:
        arrival = max(now + self.delay[channel] + self.rng.randrange(0, self.jitter[channel] + 1),
                      self.last_arrival[channel])        # FIFO per stream replica, as on TCP
        self.last_arrival[channel] = arrival
        heapq.heappush(self.queue, (arrival, next(self.sequence), channel, records, punctuation))

    def send_seals(self, channel: int, now: int, seals: list[KeySeal]) -> None:
        """Seals behind what the channel carried before them (FIFO, as the node sends them)."""
        self.send(channel, now, None, seals)

    def run(self, streams: dict[str, list[Record]], crash: int) -> ReplayResult:
        query = self.physical.query
        for name, records in streams.items():
            seal = query.streams[name].seal
            schema = query.schemas[name]
            seals = seal_schedule(records, tuple(schema.index(a) for a in key_names(seal))) if seal else None
            for when, batch, punctuation in source_messages(records, self.punctuation_us):
                for channel in self.source_channels[name]:
                    self.send(channel, when, batch, punctuation)
                if seals is not None and punctuation is not None and punctuation != CLOSED:
                    sealed = seals(punctuation)
                    if sealed:
                        for channel in self.source_channels[name]:
                            self.send_seals(channel, when, sealed)
        crashed = choose_crashes(self.physical, crash, self.rng)
        horizon = max((r[-1][0] for r in streams.values() if r), default=0) + 1
        start = min((r[0][0] for r in streams.values() if r), default=0)
        for replica in crashed:
            when = self.rng.randrange(start, horizon + 1)
            heapq.heappush(self.queue, (when, next(self.sequence), -1, replica, None))
        while self.queue:
            now, _, channel, records, punctuation = heapq.heappop(self.queue)
            if channel < 0:
                self.dead.add(records)
                continue
            self.deliver(now, channel, records, punctuation)
        filters = [f for node in self.nodes.values() for f in node.filters]
        return ReplayResult(self.outputs, crashed, self.messages,
                            sum(f.duplicates + f.below_punctuation for f in filters),
                            sum(node.operator.errors for node in self.nodes.values()))

    def deliver(self, now: int, channel: int, records: list[Record], punctuation: int | None) -> None:
        target, port, upstream = self.channels[channel]
        if target in self.dead:
            return
        self.messages += 1
        if records is None:                              # seals per key (``punctuation`` holds them)
            out, seals = self.nodes[target].on_key_seals(port, upstream, punctuation)
            forwarded = None
        else:
            out, forwarded = self.nodes[target].on_batch(port, upstream, records, punctuation)
            seals = ()
        if not out and forwarded is None and not seals:
            return
        if target.name in self.outputs:
            self.outputs[target.name].extend(out)
            return
        for downstream in self.routes.get(target, ()):
            if out or forwarded is not None:
                self.send(downstream, now, out, forwarded)
            if seals:
                self.send_seals(downstream, now, seals)


class _StraightThrough:
    """One replica of everything, no crash: batches go depth-first through the plan, no schedule."""

    def __init__(self, query: Query, punctuation_us: int):
        self.query = query
        self.punctuation_us = punctuation_us
        self.physical = plan(query, 1)
        self.nodes: dict[str, OperatorReplica] = {}
        self.routes: dict[str, list[tuple[str, int]]] = {}      # producer -> (consumer, port)
        for name in self.physical.replicas:
            kind = self.physical.kind(name)
            if kind == "entry":
                self.nodes[name] = entry_point()
            elif kind == "application":
                self.nodes[name] = application_sink(1, query.applications[name].ordered)
            else:
                ports = [1] * self.physical.n_ports(name)
                self.nodes[name] = OperatorReplica(query.new_operator(name), ports, self.physical.sorts_input(name))
            for port, producer in enumerate(query.inputs_of(name)):
                self.routes.setdefault(producer, []).append((name, port))
        self.outputs: dict[str, list[Record]] = {app: [] for app in query.applications}
        self.messages = 0

    def run(self, streams: dict[str, list[Record]]) -> ReplayResult:
        # The sources' batches in the order they are sent (ties: stream order), each pushed through
        # the whole plan before the next one is sent.
        # Each stream's batches are in send order already: merged, not sorted, and cut as they go.
        per_stream = [_tagged(i, name, source_batches(stream, self.punctuation_us, name))
                      for i, (name, stream) in enumerate(streams.items())]
        for _, _, name, records, punctuation in heapq.merge(*per_stream, key=_send_order):
            self.deliver(name, 0, records, punctuation)
        filters = [f for node in self.nodes.values() for f in node.filters]
        return ReplayResult(self.outputs, [], self.messages,
                            sum(f.duplicates + f.below_punctuation for f in filters),
                            sum(node.operator.errors for node in self.nodes.values()))

    def deliver(self, name: str, port: int, records: list[Record], punctuation: int | None) -> None:
        self.messages += 1
        out, forwarded = self.nodes[name].on_batch(port, 0, records, punctuation)
        if not out and forwarded is None:
            return
        if name in self.outputs:
            self.outputs[name].extend(out)
            return
        for consumer, consumer_port in self.routes.get(name, ()):
            self.deliver(consumer, consumer_port, out, forwarded)


def replay(query: Query, streams: dict[str, list[Record]], *, replicas: int = 1, seed: int = 0,
           crash: int = 0, punctuation_us: int = 1_000_000) -> ReplayResult:
    """Run ``query`` on ``streams`` with ``replicas`` replicas of everything; see the module docstring.

    ``replicas=1, crash=0`` (the reference) runs straight through the plan, which ignores ``seed``;
    anything else runs :func:`scheduled_replay`.
    """
    if punctuation_us <= 0:
        raise InputError(f"punctuation interval must be positive, got {punctuation_us} µs")
    if replicas == 1 and crash == 0:
        return _StraightThrough(query, punctuation_us).run(streams)
    return scheduled_replay(query, streams, replicas=replicas, seed=seed, crash=crash, punctuation_us=punctuation_us)


def scheduled_replay(query: Query, streams: dict[str, list[Record]], *, replicas: int = 1, seed: int = 0,
                     crash: int = 0, punctuation_us: int = 1_000_000) -> ReplayResult:
    """The adversarial schedule of the module docstring, also for ``replicas=1, crash=0``."""
    if punctuation_us <= 0:
        raise InputError(f"punctuation interval must be positive, got {punctuation_us} µs")
    return _Replay(query, replicas, seed, punctuation_us).run(streams, crash)
