"""Checks ``replicast explain``'s verdict on a query by replicated replay (docs/explain.md, "Checked").

The analysis predicts, for a degree of replication, whether every application receives the
contents of the one-copy run (labels Seal/Async) or not (Run/Inst/Diverge).  This runs the query
in :func:`engine.replay.scheduled_replay` — every stream replica a FIFO channel with its own
seeded delay, all deliveries interleaved by the seed, and up to two replicas crashing for good at
random times — on sample records of every source, and compares each run with the one-copy
reference (``replay --check``'s comparison).  A predicted divergence must show within the seeds
given (1,000: docs/explain.md, "Checked"); a predicted agreement must hold on all of them (10,000).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from replicast.engine.replay import replay, scheduled_replay
from replicast.engine.replay_cli import compare
from replicast.operators.coordination import analyse
from replicast.operators.plan import plan
from replicast.operators.query import Query
from replicast.operators.record import Record

#: Values of the sample records: few distinct keys, so joins match and groups fill.
KEYS = ("a", "b", "c")


def sample_streams(query: Query, rng: random.Random, *, records: int = 24,
                   span_us: int = 4_000_000) -> dict[str, list[Record]]:
    """``records`` records per source, timestamps over ``span_us``, values drawn from ``rng``."""
    def value(kind: str):
        if kind == "str":
            return rng.choice(KEYS)
        if kind == "float":
            return round(rng.random(), 3)
        if kind == "int":
            return rng.randrange(10)
        return rng.random() < 0.5

    # A stream that declares ``seal`` is the only producer of its key's values (Blazes' independent
    # seal, docs/queries.md).  Where the engine acts on that promise (an operator seals per key),
    # the sample keeps it: streams sealed on one key draw disjoint values for its fields.  Elsewhere
    # the seal is only a label (a join, a user operator) and values are drawn freely, as for any query.
    from replicast.operators.coordination import Coordination

    sealed_on: dict[frozenset, list[str]] = {}
    if any(d.coordination is Coordination.SEAL_KEY for d in query.coordination.by_name.values()):
        for name, spec in query.streams.items():
            if spec.seal:
                sealed_on.setdefault(frozenset(spec.seal), []).append(name)
    streams = {}
    for name, spec in query.streams.items():
        stamps = sorted(rng.randrange(span_us) for _ in range(records))
        rows = [[ts, *(value(kind) for kind in spec.schema.types)] for ts in stamps]
        peers = sealed_on.get(frozenset(spec.seal), [name])
        if len(peers) > 1:
            own = peers.index(name)
            for field in spec.seal:
                position, kind = spec.schema.index(field), spec.schema.types[spec.schema.names.index(field)]
                for row in rows:
                    row[position] = _owned(rng, row[position], kind, own, len(peers))
        streams[name] = [tuple(row) for row in rows]
    return streams


def _owned(rng: random.Random, value, kind: str, own: int, streams: int):
    """A value of the ``own``-th of ``streams`` sealed streams: the key values are dealt out among
    them (``a``, ``c`` to the first of two, ``b`` to the second), so other streams still match them."""
    if kind == "str":
        pool = KEYS + tuple(f"k{i}" for i in range(max(0, streams - len(KEYS))))
        return rng.choice(pool[own::streams])
    if kind == "int":
        return rng.choice(range(own, 10 * streams, streams))
    if kind == "float":
        return value + 10.0 * own
    return own % 2 == 0          # bool: two streams at most can own disjoint values


@dataclass(frozen=True)
class VerdictCheck:
    """One query's prediction and what replay found."""

    query: str
    predicted_agreement: bool
    seeds_run: int
    diverged_at: int | None          # the first seed whose output differs from the reference
    problem: str | None

    @property
    def confirmed(self) -> bool:
        return self.predicted_agreement == (self.diverged_at is None)


def check_verdict(query: Query, *, seeds: int, replicas: int = 2, data_seed: int = 0,
                  punctuation_us: int = 1_000_000, records: int = 24, first_seed: int = 0) -> VerdictCheck:
    """Replay ``query`` with ``replicas`` replicas under seeds ``first_seed … first_seed + seeds - 1``;
    stops at the first divergence."""
    predicted = analyse(query, replicas).agrees
    streams = sample_streams(query, random.Random(data_seed), records=records)
    reference = replay(query, streams, replicas=1, crash=0, punctuation_us=punctuation_us)
    crashable = sum(len(ids) - 1 for name, ids in plan(query, replicas).replicas.items()
                    if name not in query.applications)
    for seed in range(first_seed, first_seed + seeds):
        crash = random.Random(seed).randrange(min(2, crashable) + 1)
        result = scheduled_replay(query, streams, replicas=replicas, seed=seed, crash=crash,
                                  punctuation_us=punctuation_us)
        problems = compare(query, reference, result)
        if problems:
            return VerdictCheck(query.source, predicted, seed - first_seed + 1, seed, problems[0])
    return VerdictCheck(query.source, predicted, seeds, None, None)
