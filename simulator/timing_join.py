"""The timing tier's Join over columns: the pairs :class:`~operators.keyed_join.KeyedJoin` emits for
a window's rows, found by sorting and searching instead of one probe per record (docs/simulator.md,
"The timing tier").

:func:`simulator.timing_content.operator_rows` feeds a Join every left row, then every right row,
with no punctuation between them: nothing is pruned, each right row probes the left rows of its
key, and the pairs come out right row by right row, each right row's matches in the left buffer's
order — timestamp, then arrival (§IV-E, Alg. 2; ``operators/keyed_join.py``).  :func:`keyed_pairs`
gives the same pairs in the same order as two row arrays, when the Join is keyed and has no
residual predicate (anything else goes through the operator's code); the keys are the operator's
own key functions.  ``tests/simulator/test_timing_join.py`` checks both give the same pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replicast.operators.keyed_join import KeyedJoin


def keyed_pairs(operator: Any, left: Any, right: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(left rows, right rows) of the pairs ``operator`` emits fed all of ``left`` then all of
    ``right`` (:class:`~simulator.timing_content.Rows`); None where it is not a KeyedJoin without
    a residual predicate."""
    if type(operator) is not KeyedJoin or operator.predicate is not None or operator.seal_orders != (None, None):
        return None
    w = operator.window_us
    key_left, key_right = operator.keys
    ids: dict[Any, int] = {}
    lk = np.fromiter((ids.setdefault(key_left(r), len(ids)) for r in left.records), np.int64, len(left))
    rk = np.fromiter((ids.get(key_right(r), -1) for r in right.records), np.int64, len(right))
    lts, rts = left.ts, right.ts
    if not len(lts) or not len(rts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    low = min(int(lts.min()), int(rts.min()))
    span = max(int(lts.max()), int(rts.max())) - low + 2 * w + 1      # one key's stretch of the sort key
    if (len(ids) + 1) * span >= 2**62:
        return None
    # the left buffer: by key, then timestamp, ties in arrival (row) order — a stable sort
    placed = lk * span + (lts - low)
    order = np.argsort(placed, kind="stable")
    placed = placed[order]
    found = rk >= 0
    base = np.where(found, rk, 0) * span
    # each right row's matches: its key's left rows with |t1.ts - t2.ts| < w
    lo = np.searchsorted(placed, base + np.maximum(rts - w + 1 - low, 0), side="left")
    hi = np.searchsorted(placed, base + (rts + w - 1 - low), side="right")
    counts = np.where(found, hi - lo, 0)
    right_rows = np.repeat(np.arange(len(rts)), counts)
    starts = np.cumsum(counts) - counts
    positions = np.arange(len(right_rows)) - np.repeat(starts, counts) + np.repeat(lo, counts)
    return order[positions], right_rows


def pair_records(left: list, right: list, left_rows: np.ndarray, right_rows: np.ndarray) -> list:
    """The Join's output records of the pairs: ``(max ts, *left fields, *right fields)`` (§IV-E)."""
    return [(a[0] if a[0] >= b[0] else b[0], *a[1:], *b[1:])
            for a, b in zip([left[i] for i in left_rows.tolist()], [right[i] for i in right_rows.tolist()])]
