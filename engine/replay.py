"""Replicated replay: runs a query's whole physical replica graph in one process (issue 2 §6).

This is the proof harness for replication transparency (§III): the same source records are fed
to ``k`` replicas of every entry point and operator, every stream replica is a FIFO channel with
its own random delay (TCP-like: a message never overtakes an earlier one on its channel), all
deliveries are interleaved by one schedule seeded by ``seed``, and ``crash`` randomly chosen
replicas fail for good at random times (never all replicas of one operator).  The applications'
outputs must equal — as multisets, and in order for ordered applications — the outputs of the
non-replicated, failure-free run (``replicas=1, crash=0``).

Sources behave as §IV-A describes: each stream sends its records at their event time and a
punctuation every ``punctuation_us`` of event time (``p = n·P − 1`` just before the first record
at or after ``n·P``), and finally :data:`~operators.record.CLOSED`.

The replicas themselves are the same pure :class:`~operators.replica.OperatorReplica` objects the
node hosts; only this scheduler is specific to replay.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from itertools import count

from operators.errors import InputError
from operators.plan import PhysicalPlan, ReplicaId, plan
from operators.query import Query
from operators.record import CLOSED, Record
from operators.replica import OperatorReplica, application_sink, entry_point


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
                    self.nodes[replica] = entry_point()
                elif kind == "application":
                    self.nodes[replica] = application_sink(counts[0], query.applications[name].ordered)
                else:
                    self.nodes[replica] = OperatorReplica(query.new_operator(name), counts, physical.sorts_input(name))
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

    def run(self, streams: dict[str, list[Record]], crash: int) -> ReplayResult:
        for name, records in streams.items():
            for when, batch, punctuation in source_messages(records, self.punctuation_us):
                for channel in self.source_channels[name]:
                    self.send(channel, when, batch, punctuation)
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
        out, forwarded = self.nodes[target].on_batch(port, upstream, records, punctuation)
        if not out and forwarded is None:
            return
        if target.name in self.outputs:
            self.outputs[target.name].extend(out)
            return
        for downstream in self.routes.get(target, ()):
            self.send(downstream, now, out, forwarded)


def replay(query: Query, streams: dict[str, list[Record]], *, replicas: int = 1, seed: int = 0,
           crash: int = 0, punctuation_us: int = 1_000_000) -> ReplayResult:
    """Run ``query`` on ``streams`` with ``replicas`` replicas of everything; see the module docstring."""
    if punctuation_us <= 0:
        raise InputError(f"punctuation interval must be positive, got {punctuation_us} µs")
    return _Replay(query, replicas, seed, punctuation_us).run(streams, crash)
