"""The deterministic merge (operators/merge.py): one release order whatever the arrival order, and
nothing released before every port's punctuation has passed it."""

from __future__ import annotations

import random

from hypothesis import given, strategies as st

from replicast.operators.merge import MergeSorter
from replicast.operators.record import canonical_bytes

# Two ports, each a stream of records punctuated every 10 µs (records (ts, value), ts in 1..59).
ports = st.lists(st.lists(st.tuples(st.integers(1, 59), st.integers(0, 3)), max_size=30), min_size=2, max_size=2)


def items(records):
    """A port's stream: its records in timestamp order, a punctuation after each 10-µs window."""
    out = []
    for window in range(6):
        out += [("r", r) for r in sorted(records) if window * 10 < r[0] <= window * 10 + 10]
        out.append(("p", window * 10 + 10))
    return out


def merged(streams, seed):
    """Feed the ports' items interleaved by a seeded RNG; return the concatenated releases."""
    rng, merge, released, cursor = random.Random(seed), MergeSorter(len(streams)), [], [0] * len(streams)
    while any(c < len(s) for c, s in zip(cursor, streams)):
        port = rng.choice([i for i, s in enumerate(streams) if cursor[i] < len(s)])
        kind, value = streams[port][cursor[port]]
        cursor[port] += 1
        if kind == "r":
            merge.add(port, [value])
            continue
        runs, low = merge.punctuate(port, value)
        if low is not None:
            assert all(r[0] <= low for _, run in runs for r in run)
            released += [(p, r) for p, run in runs for r in run]
    return released


@given(ports, st.integers(0, 2**32))
def test_one_order_whatever_the_interleaving(records, seed):
    streams = [items(r) for r in records]
    first, second = merged(streams, seed), merged(streams, seed + 1)
    assert first == second
    assert first == sorted(((p, r) for p, rs in enumerate(records) for r in rs),
                           key=lambda pr: (pr[1][0], pr[0], canonical_bytes(pr[1])))


def test_nothing_is_released_before_every_port_has_passed_it():
    merge = MergeSorter(2)
    merge.add(0, [(5, "a")])
    merge.add(1, [(3, "b")])
    assert merge.punctuate(0, 10) == ([], None)          # port 1 has promised nothing yet
    assert merge.punctuate(1, 4) == ([(1, [(3, "b")])], 4)
    assert merge.punctuate(1, 20) == ([(0, [(5, "a")])], 10)
    state = merge.snapshot()
    other = MergeSorter(2)
    other.restore(state)
    assert other.snapshot() == state and other.released == 10


def test_a_port_that_skips_ahead_releases_what_the_merge_holds_first():
    """An application adopting a frontier in place (``OperatorReplica.skip_to``, lifecycle) in the
    deterministic mode: the records the merge already holds at or below the frontier go out, in
    order, before the frontier's punctuation — not after it, as records behind a promise."""
    from replicast.operators.replica import OperatorReplica
    from replicast.operators.union import Union

    replica = OperatorReplica(Union(2), [1, 1], merged=True)
    assert replica.on_batch(0, 0, [(5, "a"), (7, "b")]) == ([], None)
    assert replica.on_batch(1, 0, [(6, "c")], punctuation=9) == ([], None)   # port 0 has no punctuation yet
    out, forwarded = replica.skip_to(0, 8)
    assert out == [(5, "a"), (6, "c"), (7, "b")] and forwarded == 8
    assert len(replica.merge) == 0
