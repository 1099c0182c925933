"""Every operator kind emits the same multiset under shuffled and replicated input (Definition 2, §III).

Each input port receives k stream replicas, each an independent arrival order of the same stream
(records shuffled, punctuations kept honest); the replica (duplicate filters → sorter if the operator
is order-sensitive → operator) must emit exactly what the operator emits on one ordered copy.
"""

from collections import Counter

import pytest
from hypothesis import given, strategies as st

from replicast.operators.query import QueryBuilder
from replicast.operators.record import Punctuation, sort_key
from replicast.operators.replica import OperatorReplica
from replicast.operators.testing import disorder, punctuate, run_operator
from tests.operators.strategies import keyed_records

KINDS = {
    "filter": dict(kind="filter", inputs=["a"], where="v > 0.15 or k == 2"),
    "map": dict(kind="map", inputs=["a"], set={"k": "(k + 1) % 2", "w": "v * 3 - 1"}),
    "union": dict(kind="union", inputs=["a", "b"]),
    "join": dict(kind="join", inputs=["a", "b"], window_ms=400, on="a.k == b.k"),
    "time-aggregate": dict(kind="aggregate", inputs=["a"], group_by=["k"],
                           window={"kind": "time", "size_ms": 900, "slide_ms": 300},
                           compute={"n": "count()", "s": "sum(v)", "m": "avg(v)", "lo": "min(v)"}),
    "count-aggregate": dict(kind="aggregate", inputs=["a"], group_by=["k"], window={"kind": "count", "size": 3, "slide": 2},
                            compute={"s": "sum(v)", "hi": "max(v)"}),
}


def build(spec):
    spec = dict(spec)
    q = QueryBuilder("<test>")
    for name in ("a", "b"):
        q.stream(name, {"k": "int", "v": "float"})
    inputs = spec.pop("inputs")
    q.operator("op", spec.pop("kind"), inputs if len(inputs) > 1 else inputs[0], **spec)
    q.application("app", "op")
    query = q.build()
    return query, len(inputs)


@pytest.mark.parametrize("kind", KINDS)
@given(left=keyed_records(), right=keyed_records(), k=st.integers(1, 4), rng=st.randoms(use_true_random=False))
def test_output_multiset_is_invariant_under_shuffled_replicated_input(kind, left, right, k, rng):
    query, n_inputs = build(KINDS[kind])
    # The reference is one copy in the unique (ts, canonical bytes) order: what a failure-free,
    # non-replicated run delivers to an order-sensitive operator (§IV-C).
    streams = [punctuate(sorted(records, key=sort_key), 500_000) for records in (left, right)[:n_inputs]]
    reference = run_operator(query.new_operator("op"), [(p, item) for p, s in enumerate(streams) for item in s]
                             if n_inputs == 1 else _round_robin(streams))
    expected = Counter(r for r in reference if type(r) is not Punctuation)

    replica = OperatorReplica(query.new_operator("op"), [k] * n_inputs, sort_inputs=query.order_sensitive("op"))
    copies = [(port, i, disorder(s, rng)) for port, s in enumerate(streams) for i in range(k)]
    out = []
    while copies:
        index = rng.randrange(len(copies))
        port, upstream, items = copies[index]
        item = items.pop(0)
        if not items:
            copies.pop(index)
        if type(item) is Punctuation:
            out.extend(replica.on_batch(port, upstream, [], item.ts)[0])
        else:
            out.extend(replica.on_batch(port, upstream, [item])[0])
    assert Counter(out) == expected


def _round_robin(streams):
    merged, cursors = [], [0] * len(streams)
    while any(c < len(s) for c, s in zip(cursors, streams)):
        for port, s in enumerate(streams):
            if cursors[port] < len(s):
                merged.append((port, s[cursors[port]]))
                cursors[port] += 1
    return merged
