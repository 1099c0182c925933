"""Join — Algorithm 2 (§IV-E)."""

import random
from collections import Counter

from hypothesis import given, strategies as st

from replicast.operators.join import Join
from replicast.operators.testing import check_replica_consistency, disorder, interleave, punctuate, run_operator
from replicast.operators.record import Punctuation
from tests.operators.strategies import keyed_records

EQUAL_KEYS = lambda left, right: left[1] == right[1]   # noqa: E731


def test_pairs_within_the_window_join_with_the_later_timestamp():
    j = Join(10, EQUAL_KEYS)
    assert j.on_record(0, (100, "a", 1)) == []
    assert j.on_record(1, (109, "a", 2)) == [(109, "a", 1, "a", 2)]
    assert j.on_record(1, (110, "a", 3)) == []          # |100 - 110| = w: outside
    assert j.on_record(1, (95, "b", 4)) == []           # predicate false
    assert j.on_record(0, (96, "b", 5)) == [(96, "b", 5, "b", 4)]   # left fields first, whichever arrives last


def test_other_inputs_punctuation_prunes_the_buffer():
    j = Join(10)
    j.on_record(1, (100, "r"))
    j.on_record(1, (105, "r"))
    j.on_punctuation(0, 100)             # future left records have ts ≥ 101: (100, r) still matches 101..109
    assert len(j.buffers[1]) == 2
    j.on_punctuation(0, 110)             # future left ts ≥ 111: 100 is out of reach, 105 still matches 111..114
    assert list(j.buffers[1]) == [(105, "r")]
    j.on_punctuation(0, 115)
    assert len(j.buffers[1]) == 0


def test_pruning_keeps_exactly_the_records_a_future_record_can_still_match():
    j = Join(10)
    j.on_batch(1, [(102, "edge"), (101, "gone")])
    j.on_punctuation(0, 110)              # the next left record can have ts 111: 111 - 102 = 9 < 10, 111 - 101 = w
    assert list(j.buffers[1]) == [(102, "edge")]
    assert j.on_record(0, (111, "l")) == [(111, "l", "edge")]


def test_records_that_cannot_match_future_records_are_not_buffered():
    j = Join(10)
    j.on_punctuation(1, 200)
    assert j.on_record(0, (150, "l")) == []
    assert len(j.buffers[0]) == 0


def nested_loop(left, right, w, predicate):
    return Counter((max(a[0], b[0]), *a[1:], *b[1:]) for a in left for b in right
                   if abs(a[0] - b[0]) < w and predicate(a, b))


@given(keyed_records(max_size=20, max_ts=3_000_000), keyed_records(max_size=20, max_ts=3_000_000),
       st.integers(1, 2_000_000), st.randoms(use_true_random=False))
def test_equals_a_nested_loop_join_under_any_interleaving(left, right, w, rng):
    arrivals = interleave([disorder(punctuate(left, 500_000), rng), disorder(punctuate(right, 700_000), rng)], rng)
    out = run_operator(Join(w, EQUAL_KEYS), arrivals)
    assert Counter(r for r in out if type(r) is not Punctuation) == nested_loop(left, right, w, EQUAL_KEYS)


@given(keyed_records(max_size=15), keyed_records(max_size=15), st.randoms(use_true_random=False))
def test_replica_consistent(left, right, rng):
    assert check_replica_consistency(lambda: Join(1_500_000, EQUAL_KEYS), [left, right], rng, trials=5) == []


def test_snapshot_restore_continues_identically():
    j = Join(10)
    j.on_record(0, (100, "l"))
    k = Join(10)
    k.restore(j.snapshot())
    assert k.on_record(1, (105, "r")) == j.on_record(1, (105, "r")) == [(105, "l", "r")]


def test_memory_stays_bounded_with_regular_punctuations():
    j = Join(1000)
    rng = random.Random(1)
    peak = 0
    for step in range(200):
        base = step * 1000
        j.on_batch(0, [(base + rng.randrange(1000), "l")])
        j.on_batch(1, [(base + rng.randrange(1000), "r")])
        j.on_punctuation(0, base + 999)
        j.on_punctuation(1, base + 999)
        peak = max(peak, len(j.buffers[0]) + len(j.buffers[1]))
    assert peak <= 4
