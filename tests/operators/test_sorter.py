"""Sorter — the unique order of §IV-C."""

from hypothesis import given, strategies as st

from replicast.operators.record import canonical_bytes
from replicast.operators.sorter import Sorter
from tests.operators.strategies import keyed_records


def test_releases_up_to_the_punctuation_in_timestamp_order():
    s = Sorter()
    s.add([(5, "b"), (1, "z"), (9, "q")])
    assert s.release(5) == [(1, "z"), (5, "b")]
    assert len(s) == 1
    assert s.release(100) == [(9, "q")]


def test_equal_timestamps_are_ordered_by_canonical_bytes():
    s = Sorter()
    s.add([(1, "b"), (1, "a"), (1, 3), (1, "a")])
    released = s.release(1)
    assert released == sorted(released, key=lambda r: canonical_bytes(r))
    assert released.count((1, "a")) == 2


@given(keyed_records(), st.randoms(use_true_random=False), st.integers(1, 4))
def test_any_arrival_order_gives_the_same_sequence(records, rng, chunks):
    shuffled = list(records)
    rng.shuffle(shuffled)
    s = Sorter()
    out = []
    cut = len(shuffled) // chunks + 1
    for start in range(0, len(shuffled), cut):
        s.add(shuffled[start:start + cut])
    for p in (1_000_000, 3_000_000, 2**62):
        out.extend(s.release(p))
    assert out == sorted(records, key=lambda r: (r[0], canonical_bytes(r)))


def test_snapshot_restore():
    s = Sorter()
    s.add([(2, "x"), (1, "y")])
    t = Sorter()
    t.restore(s.snapshot())
    assert t.release(10) == s.release(10) == [(1, "y"), (2, "x")]
