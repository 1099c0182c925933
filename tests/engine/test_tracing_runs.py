"""Rule 1's computed sampled slots and rule 2's runs (engine/core/tracepoints.py): what makes a
batch without a sampled record one comparison and a copy of a sampled one one count must not
change what a query answers (docs/tracing.md, "Overhead")."""

from __future__ import annotations

import random

import pytest

from replicast.engine.core import trace_sampling, tracepoints
from replicast.engine.core.trace_aggregate import finish, merge
from replicast.engine.core.trace_language import parse
from replicast.engine.messages import Batch
from replicast.engine.node import NodeCore
from replicast.engine.query_file import parse_query
from replicast.engine.wire import decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.engine.started import FILTER_QUERY as QUERY, started_core


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000, 40_009])
def test_the_next_and_previous_sampled_slots_are_the_ones_a_scan_finds(n):
    rng = random.Random(n)
    for i in range(min(150, 400_000 // n)):
        slot = rng.randrange(0, 10**7) if i % 2 else rng.randrange(0, 1 << 52)    # µs since 1970 >> 8: ~2**43
        scan = slot
        while not tracepoints.sampled(scan << tracepoints.SLOT_SHIFT, n):
            scan += 1
        assert trace_sampling.next_sampled(slot, n) == scan, slot
        scan = slot
        while not tracepoints.sampled(scan << tracepoints.SLOT_SHIFT, n):
            scan -= 1
        assert trace_sampling.previous_sampled(slot, n) == scan, slot


def _core(k: int) -> tuple[NodeCore, int]:
    """One node core ``z`` hosting the filter and the application, fed by ``k`` upstream replicas."""
    return started_core(parse_query(QUERY), {"s": [f"u{i}" for i in range(k)], "f": ["z"], "app": ["z"]}, "z")


def _frames(rows: list, i: int, sizes: list[int]) -> list:
    """Upstream replica ``i``'s batches of ``rows``, cut into ``sizes`` (repeated), as read off the wire."""
    stream = StreamReplica(ReplicaId("s", i), ReplicaId("f", 0), 0)
    out, offset, start, j = [], 0, 0, 0
    while start < len(rows):
        chunk = rows[start:start + sizes[j % len(sizes)]]
        start, j = start + len(chunk), j + 1
        p = CLOSED if start >= len(rows) else chunk[-1][0]
        out.append(decode(encode(Batch(stream, 0, offset, chunk, p))[4:]))
        offset += len(chunk) + 1
    return out


def _answer(sample: int, text: str) -> list[dict]:
    """Three upstream replicas: u0 and u1 send the same batches (equal content keys: rule 2's
    runs), u1 lagging by three batches; u2 cuts the stream differently and lags by five (its
    copies overlap the runs).  One record is sent twice in a row (a second occurrence)."""
    rows = [(1_000_000 + 37 * i, f"s{i % 7}", (i % 100) / 100) for i in range(2_200)]
    twice = next(i for i in range(1_000, 2_200) if tracepoints.sampled(rows[i][0], 49))   # at 1/7 and 1/49
    rows.insert(twice, rows[twice])                    # (4 groups a record at 1/1: within MAX_GROUPS)
    core, now = _core(3)
    tracepoints.install(core, "q", parse(text.format(n=sample)))
    same = _frames(rows, 0, [500])
    sent = [[("u0", m) for m in same], [("u1", m) for m in _frames(rows, 1, [500])],
            [("u2", m) for m in _frames(rows, 2, [300, 700, 450])]]
    lags = [0, 3, 5]
    for step in range(max(len(s) + lag for s, lag in zip(sent, lags))):
        for batches, lag in zip(sent, lags):
            if 0 <= step - lag < len(batches):
                now += 1_000
                core.receive(*batches[step - lag], now=now)
                core.messages_to_send(), core.events()
    q = parse(text.format(n=sample))
    return finish(q, merge(q, [tracepoints.take(core)["q"]]))


def test_copies_split_differently_lagging_or_repeated_count_as_the_per_record_rule_does():
    """At 1/N (runs, computed slots, a copy of a run one count) each port's Arrival table is
    the per-record table at 1/1 (GroupBy the timestamp) of the records sampled at 1/N."""
    every = """From a In Arrival GroupBy a.replica, a.upstream, a.rank, a.outcome, a.ts
               Select a.replica, a.upstream, a.rank, a.outcome, a.ts, COUNT, SUM(a.later_us) Sample 1/{n}"""
    some = """From a In Arrival GroupBy a.replica, a.upstream, a.rank, a.outcome
              Select a.replica, a.upstream, a.rank, a.outcome, COUNT, SUM(a.later_us) Sample 1/{n}"""
    reference = _answer(1, every)
    for sample in (7, 49):
        expected: dict = {}
        for row in reference:
            if tracepoints.sampled(row["ts"], sample):
                key = (row["replica"], row["upstream"], row["rank"], row["outcome"])
                count, later = expected.get(key, (0, 0))
                expected[key] = (count + row["COUNT"], later + row["SUM(later_us)"])
        got = {(r["replica"], r["upstream"], r["rank"], r["outcome"]): (r["COUNT"], r["SUM(later_us)"])
               for r in _answer(sample, some)}
        assert got == expected
        assert {rank for _, _, rank, _ in got} == {1, 2, 3, 4, 5, 6}   # three copies of two equal records
        assert sum(c for c, _ in got.values()) > 150


def test_copies_of_batches_without_a_sampled_record_are_not_read_in_step_or_lagging():
    """Rule 1: the copies a duplicate filter takes unread (below its punctuation) are answered by
    their content keys — not among the hot batches' keys, in step or lagging — so
    the tracer does not decode them either (a copy it must decode would have its records)."""
    rows = [(1_000_000 + i, f"s{i % 7}", (i % 100) / 100) for i in range(20_000)]
    core, now = _core(3)
    tracepoints.install(core, "q", parse(f"From a In Arrival Select COUNT Sample 1/{10**9}"))
    sent = [_frames(rows, i, [1_000]) for i in range(3)]
    lags = [0, 0, 4]                                   # u1 in step with u0, u2 four batches behind
    for step in range(len(sent[0]) + max(lags)):
        for i, lag in enumerate(lags):
            if 0 <= step - lag < len(sent[i]):
                now += 1_000
                core.receive(f"u{i}", sent[i][step - lag], now=now)
                core.messages_to_send(), core.events()
    copies = [m.records for i in (1, 2) for m in sent[i]]
    assert core.counters["known_batches"] == len(copies)         # the filter took every copy unread
    assert [r for r in copies if r._records is not None] == []     # and so did the tracer
    assert tracepoints.take(core)["q"] == []


def test_small_batches_read_record_by_record_are_sampled_and_their_copies_counted():
    """Batches below the filter's whole-batch size (operators/dedup.py MIN_RUN), after a whole one
    whose run the punctuation covered, are read record by record, with no span (not the whole
    batch's before them): the tracer samples them itself, and their copies, taken unread, are read
    where they were hot.  u1 sends every batch two batches after u0: each sampled record passes
    from u0 and is dropped from u1 at the filter, and passes at the application."""
    rows = [(1_000_000 + 37 * i, f"s{i % 7}", (i % 100) / 100) for i in range(1_500)]
    text = """From a In Arrival GroupBy a.replica, a.upstream, a.rank, a.outcome
              Select a.replica, a.upstream, a.rank, a.outcome, COUNT Sample 1/{n}"""
    for sample in (1, 7, 49):
        core, now = _core(2)
        tracepoints.install(core, "q", parse(text.format(n=sample)))
        sent = [_frames(rows, i, [40] + [5] * 8) for i in range(2)]     # a whole batch, then small ones
        for step in range(len(sent[0]) + 2):
            for i, lag in enumerate((0, 2)):
                if 0 <= step - lag < len(sent[i]):
                    now += 1_000
                    core.receive(f"u{i}", sent[i][step - lag], now=now)
                    core.messages_to_send(), core.events()
        q = parse(text.format(n=sample))
        got = {(r["replica"], r["upstream"], r["rank"], r["outcome"]): r["COUNT"]
               for r in finish(q, merge(q, [tracepoints.take(core)["q"]]))}
        n = sum(1 for r in rows if tracepoints.sampled(r[0], sample))
        assert got == {("f#0", "s#0", 1, "pass"): n, ("f#0", "s#1", 2, "drop"): n, ("app#0", "f#0", 1, "pass"): n}
        assert n > 25
