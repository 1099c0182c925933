"""Aggregate over time windows — Algorithm 3 (§IV-F)."""

import math
from collections import Counter

from hypothesis import given, strategies as st

from replicast.operators.aggregate import TimeWindowAggregate
from replicast.operators.record import Punctuation
from replicast.operators.summaries import Summary
from replicast.operators.testing import check_replica_consistency, disorder, interleave, punctuate, run_operator
from tests.operators.strategies import keyed_records

SUMMARIES = (Summary("count", None, None), Summary("sum", 2, "float"), Summary("avg", 2, "float"),
             Summary("min", 2, "float"), Summary("max", 2, "float"))


def make(size, slide, summaries=SUMMARIES):
    return TimeWindowAggregate(size, slide, (1,), summaries)


def test_window_membership_follows_the_paper_example():
    # §IV-F: w = 10 s, s = 5 s: W(9:00:43) = {[9:00:35, 9:00:45), [9:00:40, 9:00:50)}
    agg = make(10_000_000, 5_000_000)
    t = (9 * 3600 + 43) * 1_000_000
    assert list(agg.window_ends(t)) == [(9 * 3600 + 45) * 1_000_000, (9 * 3600 + 50) * 1_000_000]


def test_windows_close_at_the_punctuation_with_the_window_end_as_timestamp():
    agg = make(10, 10, (Summary("count", None, None),))
    assert agg.on_batch(0, [(3, "a", 1.0), (12, "a", 1.0), (4, "b", 1.0)]) == []
    assert agg.on_punctuation(0, 8) == ([], 8)          # [0, 10) could still get ts 9
    out, p = agg.on_punctuation(0, 9)                    # now it cannot
    assert sorted(out) == [(10, "a", 1), (10, "b", 1)] and p == 9
    assert agg.on_punctuation(0, 100) == ([(20, "a", 1)], 100)   # empty windows emit nothing


def test_windows_around_the_epoch_have_negative_indices_and_close_once():
    agg = make(1_634_977, 233_568, (Summary("count", None, None),))
    agg.on_batch(0, [(17_666, "a", 1.0)])
    out, _ = agg.on_punctuation(0, 2**63 - 1)
    assert [r[0] for r in out] == list(agg.window_ends(17_666))    # the 7 windows containing it, once each


def test_float_sums_are_exact_so_every_order_gives_the_same_bits():
    agg = make(10, 10, (Summary("sum", 2, "float"),))
    agg.on_batch(0, [(1, "a", 1e16), (2, "a", 1.0), (3, "a", -1e16), (4, "a", 1.0)])
    assert agg.on_punctuation(0, 10)[0] == [(10, "a", 2.0)]     # a running += would give 0.0 or 2.0 by order


def brute_force(records, size, slide, p):
    out = Counter()
    ks = {k for r in records for k in range((r[0] - size) // slide + 1, r[0] // slide + 1)}
    for k in ks:
        start, end = k * slide, k * slide + size
        if end > p + 1:
            continue
        for group in {r[1] for r in records}:
            rows = [r for r in records if r[1] == group and start <= r[0] < end]
            if rows:
                values = [r[2] for r in rows]
                out[(end, group, len(rows), math.fsum(values), math.fsum(values) / len(values),
                     min(values), max(values))] += 1
    return out


@given(keyed_records(), st.integers(1, 3_000_000), st.integers(1, 8), st.randoms(use_true_random=False))
def test_equals_a_brute_force_window_computation(records, size, per_size, rng):
    slide = max(1, size // per_size) if per_size < 8 else size + 250_000   # overlapping, tumbling-ish, gapped
    arrivals = interleave([disorder(punctuate(records, 700_000), rng)], rng)
    out = run_operator(make(size, slide), arrivals)
    assert Counter(r for r in out if type(r) is not Punctuation) == brute_force(records, size, slide, 2**63)


@given(keyed_records(), st.randoms(use_true_random=False))
def test_replica_consistent(records, rng):
    assert check_replica_consistency(lambda: make(1_000_000, 300_000), [records], rng, trials=5) == []


def test_snapshot_restore_continues_identically():
    a = make(10, 5)
    a.on_batch(0, [(3, "a", 1.0), (7, "b", 2.0)])
    b = make(10, 5)
    b.restore(a.snapshot())
    assert b.on_punctuation(0, 50) == a.on_punctuation(0, 50)
