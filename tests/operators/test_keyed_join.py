"""KeyedJoin — the Join of §IV-E (Alg. 2) with buffers indexed by the equi-join key (docs/performance.md)."""

from collections import Counter

import msgpack
import pytest
from hypothesis import given, strategies as st

from replicast.operators.compile import scope_of
from replicast.operators.expressions import compile_expression
from replicast.operators.join import Join
from replicast.operators.join_keys import JoinKeys, split_join_keys
from replicast.operators.keyed_join import KeyedJoin
from replicast.operators.query import QueryBuilder
from replicast.operators.record import Punctuation, Schema
from replicast.operators.testing import disorder, interleave, punctuate, run_operator
from tests.operators.strategies import TRICKY_FLOATS
from tests.operators.test_join import nested_loop

FIELDS = Schema.of({"k": "int", "v": "float"})
SCOPE = {**scope_of(FIELDS, 0, "a."), **scope_of(FIELDS, 1, "b.")}
# Keys on one field, on two, on an int against a float (1 == 1.0), with residuals that can raise.
ON = ["a.k == b.k", "b.k == a.k and a.v < b.v", "a.k == b.k and (a.v == b.v)", "a.v == b.k",
      "a.k == b.k and a.v / (b.v - 0.1) > 0 and b.v != 7.25", "(a.k == b.k and a.ts < b.ts) and a.v * b.v >= 0"]


def keyed(on: str, window_us: int) -> KeyedJoin:
    """The operator a query file compiles ``on`` to."""
    q = QueryBuilder("<test>")
    q.stream("a", FIELDS.as_dict())
    q.stream("b", FIELDS.as_dict())
    q.join("j", ["a", "b"], window_ms=window_us / 1000, on=on)
    q.application("app", "j")
    operator = q.build().new_operator("j")
    assert type(operator) is KeyedJoin
    return operator


def plain(on: str, window_us: int) -> Join:
    """Today's Join: every pair inside the window is tested with the whole predicate."""
    return Join(window_us, compile_expression(on, SCOPE, where="test", arity=2).function)


@pytest.mark.parametrize("on, expected", [
    ("a.k == b.k", JoinKeys((1,), (1,), None)),
    ("b.v == a.k", JoinKeys((1,), (2,), None)),
    ("a.k == b.k and b.v == a.v and a.v > 0", JoinKeys((1, 2), (1, 2), "a.v > 0")),
    ("a.v > 0 and (a.k == b.k and (a.ts == b.ts or b.v < 1))", JoinKeys((1,), (1,), "a.v > 0 and (a.ts == b.ts or b.v < 1)")),
    ("a.ts == b.ts and a.k + 1 == b.k", JoinKeys((0,), (0,), "a.k + 1 == b.k")),
])
def test_equalities_between_the_sides_become_keys(on, expected):
    assert split_join_keys(on, SCOPE) == expected


@pytest.mark.parametrize("on", ["a.k == b.k or a.v < b.v", "not a.k != b.k", "a.k == a.v", "a.k == b.k == 1",
                                "a.k + 0 == b.k", "a.k == 1", "True == b.k", "a.k != b.k"])
def test_anything_else_keeps_the_general_join(on):
    assert split_join_keys(on, SCOPE) is None
    q = QueryBuilder()
    q.stream("a", FIELDS.as_dict())
    q.stream("b", FIELDS.as_dict())
    q.join("j", ["a", "b"], window_ms=10, on=on)
    q.application("app", "j")
    assert type(q.build().new_operator("j")) is Join


def test_only_records_of_the_same_key_inside_the_window_are_visited():
    j = keyed("a.k == b.k and a.v < b.v", 10)
    assert j.on_batch(1, [(100, 1, 5.0), (100, 2, 5.0), (120, 1, 5.0)]) == []
    assert j.on_record(0, (109, 1, 1.0)) == [(109, 1, 1.0, 1, 5.0)]
    assert j.on_record(0, (110, 1, 9.0)) == []            # same key, residual false
    assert j.on_record(0, (105, 3, 1.0)) == []            # no record of key 3
    assert sorted(j.index[1]) == [1, 2]


def test_other_inputs_punctuation_prunes_each_key_exactly():
    j = keyed("a.k == b.k", 10)
    j.on_batch(1, [(100, 1, 0.0), (105, 2, 0.0), (101, 1, 0.0), (102, 2, 0.0)])
    j.on_punctuation(0, 110)              # the next left record can have ts 111: keeps ts ≥ 102
    assert j.buffered(1) == [(102, 2, 0.0), (105, 2, 0.0)]
    assert list(j.index[1]) == [2] and len(j.expiry[1]) == 2
    j.on_punctuation(0, 115)
    assert j.buffered(1) == [] and j.index[1] == {} and j.expiry[1] == []


@st.composite
def grid_records(draw, max_size=25):
    """Records ``(ts, k, v)`` on a 125 ms grid ±1 µs: with :data:`WINDOWS` and punctuations every 500 ms,
    pairs fall exactly on the window's edge and records exactly on the pruning bound ``p + 1 − w``."""
    ts = st.builds(lambda n, d: max(0, n * 125_000 + d), st.integers(0, 24), st.sampled_from([-1, 0, 1]))
    return sorted(draw(st.lists(st.tuples(ts, st.integers(0, 2), TRICKY_FLOATS), max_size=max_size)))


WINDOWS = st.sampled_from([1, 2, 125_000, 125_001, 249_999, 250_000, 250_001, 500_000, 1_000_000])


def arrivals(left, right, rng):
    return interleave([disorder(punctuate(left, 500_000), rng), disorder(punctuate(right, 250_000), rng)], rng)


@given(grid_records(), grid_records(), st.sampled_from(ON), WINDOWS, st.randoms(use_true_random=False))
def test_emits_what_todays_join_emits_in_the_same_order_and_buffers_the_same(left, right, on, w, rng):
    new, old = keyed(on, w), plain(on, w)
    for port, item in arrivals(left, right, rng):
        if type(item) is Punctuation:
            assert new.on_punctuation(port, item.ts) == old.on_punctuation(port, item.ts)
        else:
            assert new.on_record(port, item) == old.on_record(port, item)
        for side in (0, 1):
            assert new.buffered(side) == old.buffered(side)
            assert sum(map(len, new.index[side].values())) == len(new.expiry[side])


@given(grid_records(), grid_records(), WINDOWS, st.randoms(use_true_random=False))
def test_equals_a_nested_loop_join_under_any_interleaving(left, right, w, rng):
    out = run_operator(keyed("a.k == b.k and a.v <= b.v", w), arrivals(left, right, rng))
    expected = nested_loop(left, right, w, lambda a, b: a[1] == b[1] and a[2] <= b[2])
    assert Counter(r for r in out if type(r) is not Punctuation) == expected


@given(grid_records(), grid_records(), st.sampled_from(ON), WINDOWS, st.data())
def test_snapshot_restored_into_a_fresh_join_continues_identically(left, right, on, w, data):
    """What replica state transfer relies on: a snapshot is plain (msgpack) data and loses nothing."""
    items = arrivals(left, right, data.draw(st.randoms(use_true_random=False)))
    cut = data.draw(st.integers(0, len(items)))
    running = keyed(on, w)
    run_operator(running, items[:cut])
    state = msgpack.unpackb(msgpack.packb(running.snapshot()))
    restored, plain_restored = keyed(on, w), plain(on, w)
    restored.restore(state)
    plain_restored.restore(state)                            # the plain Join's snapshot format, too
    rest = run_operator(running, items[cut:])
    assert run_operator(restored, items[cut:]) == rest
    assert run_operator(plain_restored, items[cut:]) == rest
    assert restored.snapshot() == running.snapshot()


def test_memory_stays_bounded_with_regular_punctuations():
    j = keyed("a.k == b.k", 1000)
    peak = 0
    for step in range(200):
        base = step * 1000
        j.on_batch(0, [(base + (step * 7) % 1000, step % 5, 0.0)])
        j.on_batch(1, [(base + (step * 13) % 1000, step % 3, 0.0)])
        j.on_punctuation(0, base + 999)
        j.on_punctuation(1, base + 999)
        peak = max(peak, len(j.expiry[0]) + len(j.expiry[1]) + len(j.index[0]) + len(j.index[1]))
    assert peak <= 8
