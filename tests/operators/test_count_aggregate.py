"""Aggregate over count windows — Algorithm 4 (§IV-F), sorted first."""

import math
from collections import Counter

from hypothesis import given, strategies as st

from replicast.operators.count_aggregate import CountWindowAggregate
from replicast.operators.record import Punctuation, canonical_bytes
from replicast.operators.replica import OperatorReplica
from replicast.operators.summaries import Summary
from replicast.operators.testing import disorder, punctuate
from tests.operators.strategies import keyed_records

SUMMARIES = (Summary("count", None, None), Summary("sum", 2, "float"))


def test_windows_of_size_records_sliding_by_slide():
    agg = CountWindowAggregate(3, 2, (1,), SUMMARIES)
    out = agg.on_batch(0, [(t, "a", 1.0) for t in range(1, 8)])
    # windows: records 1-3 (ends at ts 3), 3-5 (ts 5), 5-7 (ts 7); 7-9 never fills
    assert out == [(3, "a", 3, 3.0), (5, "a", 3, 3.0), (7, "a", 3, 3.0)]


def test_groups_count_separately_and_skip_with_a_larger_slide():
    agg = CountWindowAggregate(1, 2, (1,), (Summary("count", None, None),))
    out = agg.on_batch(0, [(1, "a", 0.0), (2, "b", 0.0), (3, "a", 0.0), (4, "a", 0.0), (5, "a", 0.0)])
    assert out == [(1, "a", 1), (2, "b", 1), (4, "a", 1)]


def brute_force(records, size, slide):
    out = Counter()
    for group in {r[1] for r in records}:
        rows = sorted((r for r in records if r[1] == group), key=lambda r: (r[0], canonical_bytes(r)))
        for start in range(0, len(rows) - size + 1, slide):
            window = rows[start:start + size]
            out[(window[-1][0], group, size, math.fsum(r[2] for r in window))] += 1
    return out


@given(keyed_records(), st.integers(1, 4), st.integers(1, 4), st.randoms(use_true_random=False), st.integers(1, 3))
def test_behind_a_sorter_every_replica_emits_the_same_sequence(records, size, slide, rng, k):
    """Replicas fed differently-ordered replicated input emit identical sequences (the sorter's job)."""
    outputs = []
    for _ in range(2):
        node = OperatorReplica(CountWindowAggregate(size, slide, (1,), SUMMARIES), [k], sort_inputs=True)
        out = []
        streams = [disorder(punctuate(records, 400_000), rng) for _ in range(k)]
        cursors = [0] * k
        while any(c < len(s) for c, s in zip(cursors, streams)):
            i = rng.choice([i for i in range(k) if cursors[i] < len(streams[i])])
            item = streams[i][cursors[i]]
            cursors[i] += 1
            if type(item) is Punctuation:
                out.extend(node.on_batch(0, i, [], item.ts)[0])
            else:
                out.extend(node.on_batch(0, i, [item])[0])
        outputs.append(out)
    assert outputs[0] == outputs[1]
    assert Counter(outputs[0]) == brute_force(records, size, slide)
