"""The output log's frontier: what a StreamHead promises a receiver about a trimmed log (§II-B)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from replicast.engine.core.output_log import OutputLog
from replicast.operators.base import NO_PUNCTUATION

batches = st.lists(st.tuples(st.lists(st.tuples(st.integers(-10**6, 10**6), st.integers(0, 3)), max_size=8),
                             st.one_of(st.none(), st.integers(-10**6, 10**6))), max_size=8)


@given(batches, st.data())
def test_the_frontier_is_the_largest_timestamp_or_punctuation_trimmed(items, data):
    """Records may run ahead of punctuations and come in any order inside a batch: after trimming
    a prefix, the frontier is the largest record timestamp or punctuation in it (never less, or a
    receiver would trust a suffix that lacks records; never more, or it would wait for nothing)."""
    log = OutputLog()
    for records, punctuation in items:
        log.append(records, punctuation)
    upto = data.draw(st.integers(0, len(items)))
    trimmed = items[:upto]
    log.trim(sum(len(r) + (p is not None) for r, p in trimmed))
    seen = [ts for records, _ in trimmed for ts, _ in records] + [p for _, p in trimmed if p is not None]
    assert log.frontier == max([NO_PUNCTUATION, *seen])
