"""Join: window join of two streams, non-blocking and replica-consistent (§IV-E, Algorithm 2).

Outputs ``t1 ⊗ t2`` for ``t1`` from the left input and ``t2`` from the right input when
``|t1.ts − t2.ts| < w`` and ``P(t1, t2)`` holds.  The output timestamp is
``max(t1.ts, t2.ts)``: the time the result would appear without replication.  Output fields are
the left fields then the right fields.

Each pair is produced exactly once whatever the interleaving: when a record arrives it is matched
against the other side's buffer and then added to its own buffer, so a pair is emitted by
whichever of its two records arrives second (Alg. 2 lines 1–4).

Buffers are pruned by the *other* input's punctuation (Alg. 2 lines 5–6): after punctuation ``p``
on the left, every future left record has ``ts ≥ p + 1``, so a right record with
``t2.ts ≤ p + 1 − w`` can match nothing more.  (The paper's ``p − t2.ts > w`` is the same bound
for real-valued time; with integer µs this is the exact one.)  Buffers are sorted by timestamp so
a probe visits only the records inside the window.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable

from sortedcontainers import SortedKeyList

from replicast.operators.base import Operator
from replicast.operators.record import Record

_by_ts = itemgetter(0)


class Join(Operator):
    kind = "join"

    def __init__(self, window_us: int, predicate: Callable[[Record, Record], object] | None = None):
        super().__init__(2)
        if window_us <= 0:
            raise ValueError(f"join window must be positive, got {window_us} µs")
        self.window_us = window_us
        self.predicate = predicate
        self._clear()

    def _clear(self) -> None:
        self.buffers = (SortedKeyList(key=_by_ts), SortedKeyList(key=_by_ts))

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        other = self.buffers[1 - port]
        own = self.buffers[port]
        w = self.window_us
        # A record older than this can match no future record of the other side (see module doc).
        keep_after = self.port_punctuations[1 - port] + 1 - w
        out: list[Record] = []
        for record in records:
            ts = record[0]
            for match in other.irange_key(ts - w + 1, ts + w - 1):
                left, right = (record, match) if port == 0 else (match, record)
                if self._matches(left, right):
                    out.append((max(ts, match[0]), *left[1:], *right[1:]))
            if ts > keep_after:
                own.add(record)
        return out

    def _matches(self, left: Record, right: Record) -> bool:
        if self.predicate is None:
            return True
        try:
            return bool(self.predicate(left, right))
        except Exception as error:
            self.count_error((left, right), error)
            return False

    def on_port_punctuation(self, port: int, p: int) -> list[Record]:
        other = self.buffers[1 - port]
        del other[: other.bisect_key_right(p + 1 - self.window_us)]   # Alg. 2 line 6
        return []

    def buffered(self, port: int) -> list[Record]:
        """The records buffered for ``port`` (they may still match the other side), in timestamp order."""
        return list(self.buffers[port])

    def rebuild(self, frontiers: list[int]) -> int:
        """Each pair this replica emits is a correct one; it has every pair whose two records are
        above both adopted frontiers, i.e. (with ``|t1.ts − t2.ts| < w``) every pair with
        ``max(ts) > max(frontiers) + w − 1``."""
        return max(frontiers) + self.window_us - 1

    def snapshot_state(self) -> Any:
        return [[list(r) for r in self.buffered(port)] for port in (0, 1)]

    def restore_state(self, state: Any) -> None:
        self.buffers = tuple(SortedKeyList((tuple(r) for r in side), key=_by_ts) for side in state)
