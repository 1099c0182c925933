"""KeyedJoin: the window join of :mod:`operators.join` when ``on`` equates fields of the two sides.

Same operator, same outputs (§IV-E, Algorithm 2): a pair ``t1 ⊗ t2`` is emitted by whichever of
its records arrives second, when ``|t1.ts − t2.ts| < w``, the key fields are equal and the residual
predicate holds (:mod:`operators.join_keys` splits ``on`` into the two).  Only the buffers differ:

* each side's buffer is a dict key → that key's records in timestamp order (ties in arrival
  order, as the plain Join's sorted buffer keeps them), so a probe visits only the records of
  its own key inside the window instead of every record inside the window;
* pruning is the plain Join's, exactly (Alg. 2 lines 5–6): after punctuation ``p`` on one input,
  the other side's records with ``ts ≤ p + 1 − w`` are dropped.  A heap of ``(ts, arrival
  sequence, key, record)`` per side finds them without visiting every key; they are a prefix of
  each key's list.  The heap also gives the buffer in the plain Join's order (timestamp, then
  arrival), so both joins take and give the same snapshots.

A probe emits the key's matching records in timestamp order, which is the order the plain Join
emits the same pairs in, so for equal input the two emit equal lists, not only equal multisets.

Seals per key (:mod:`operators.key_seals`), where a port's input is sealed on its own join fields:
a seal ``(K, p)`` on one port prunes the other side's records of key ``K`` with ``ts ≤ p + 1 − w``
— line 6 on one partition — and later such records are not buffered.  Their heap entries stay until
the punctuation pops them; ``pruned`` remembers per key how far it went, so they are not counted
twice.  Only memory changes: the outputs are the same pairs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort_right
from heapq import heapify, heappop, heappush
from itertools import count
from operator import itemgetter
from typing import Any, Callable

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.join import Join
from replicast.operators.record import Record

_by_ts = itemgetter(0)


def key_getter(positions: tuple[int, ...]) -> Callable[[Record], Any]:
    """The key of a record: its field at ``positions[0]``, or the tuple of its fields at ``positions``."""
    return itemgetter(*positions)


class KeyedJoin(Join):
    """A :class:`~operators.join.Join` with buffers indexed by the equi-join key."""

    def __init__(self, window_us: int, keys: tuple[Callable[[Record], Any], Callable[[Record], Any]],
                 residual: Callable[[Record, Record], object] | None = None):
        """``keys[port](record)`` is the key of a record arriving on ``port``; pairs need equal keys
        and a true ``residual(left, right)`` (None: always true)."""
        super().__init__(window_us, residual)          # calls _clear()
        self.keys = keys
        #: Per port, where a seal's values go in the join key (from the analysis; None: no seals).
        self.seal_orders: tuple[tuple[int, ...] | None, ...] = (None, None)

    def _clear(self) -> None:
        self.index: tuple[dict, dict] = ({}, {})
        self.expiry: tuple[list, list] = ([], [])
        self._sequence = count()           # heap tie-breaker: keys themselves are never compared
        #: Per side, key -> the bound a seal pruned that key's records through (module docstring).
        self.pruned: tuple[dict, dict] = ({}, {})

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        key_of, own, other = self.keys[port], self.index[port], self.index[1 - port]
        expiry, sequence, pruned = self.expiry[port], self._sequence, self.pruned[port]
        w = self.window_us
        # A record older than this can match no future record of the other side (Join's module doc).
        keep_after = self.port_punctuations[1 - port] + 1 - w
        out: list[Record] = []
        for record in records:
            ts = record[0]
            key = key_of(record)
            candidates = other.get(key)
            if candidates:
                lo = bisect_left(candidates, ts - w + 1, key=_by_ts) if candidates[0][0] <= ts - w else 0
                hi = bisect_right(candidates, ts + w - 1, key=_by_ts) if candidates[-1][0] >= ts + w else None
                matches = candidates[lo:hi]
                if self.predicate is not None:
                    matches = self._passing(port, record, matches)
                if port == 0:
                    out += [(ts if ts >= m[0] else m[0], *record[1:], *m[1:]) for m in matches]
                else:
                    out += [(ts if ts >= m[0] else m[0], *m[1:], *record[1:]) for m in matches]
            if ts > keep_after and (not pruned or ts > pruned.get(key, NO_PUNCTUATION)):
                bucket = own.get(key)
                if bucket is None:
                    own[key] = [record]
                elif bucket[-1][0] <= ts:
                    bucket.append(record)
                else:
                    insort_right(bucket, record, key=_by_ts)
                heappush(expiry, (ts, next(sequence), key, record))
        return out

    def _passing(self, port: int, record: Record, matches: list[Record]) -> list[Record]:
        """The ``matches`` (same key, inside the window) for which the residual predicate holds."""
        test = self._matches
        if port == 0:
            return [m for m in matches if test(record, m)]
        return [m for m in matches if test(m, record)]

    def on_port_punctuation(self, port: int, p: int) -> list[Record]:
        self._prune(1 - port, p + 1 - self.window_us)          # Alg. 2 line 6
        return []

    def on_key_seal(self, port: int, key: tuple, p: int) -> list[Record]:
        """Port ``port`` sealed ``key`` through ``p``: the other side's records of that key with
        ``ts ≤ p + 1 − w`` can match nothing more (see the module docstring)."""
        order = self.seal_orders[port]
        if order is None:
            return []
        values = tuple(key[i] for i in order)
        join_key = values[0] if len(values) == 1 else values
        side, bound = 1 - port, p + 1 - self.window_us
        pruned = self.pruned[side]
        if bound <= self.port_punctuations[port] + 1 - self.window_us or bound <= pruned.get(join_key, NO_PUNCTUATION):
            return []
        pruned[join_key] = bound
        bucket = self.index[side].get(join_key)
        if bucket:
            n = bisect_right(bucket, bound, key=_by_ts)
            if n == len(bucket):
                del self.index[side][join_key]
            else:
                del bucket[:n]
        return []

    def _prune(self, side: int, bound: int) -> None:
        """Drop ``side``'s records with ``ts ≤ bound``: for each key, a prefix of its list."""
        heap, pruned = self.expiry[side], self.pruned[side]
        expired: dict[Any, int] = {}
        while heap and heap[0][0] <= bound:
            ts, _, key, _ = heappop(heap)
            if pruned and ts <= pruned.get(key, NO_PUNCTUATION):
                continue                                  # a seal took it already
            expired[key] = expired.get(key, 0) + 1
        if pruned:                                        # what the punctuation covers now
            for key in [k for k, b in pruned.items() if b <= bound]:
                del pruned[key]
        index = self.index[side]
        for key, n in expired.items():
            bucket = index[key]
            if n == len(bucket):
                del index[key]
            else:
                del bucket[:n]

    def buffered(self, port: int) -> list[Record]:
        """The records buffered for ``port`` in timestamp order, ties in arrival order: the plain Join's buffer."""
        pruned = self.pruned[port]
        return [entry[3] for entry in sorted(self.expiry[port])
                if not pruned or entry[0] > pruned.get(entry[2], NO_PUNCTUATION)]

    def snapshot_state(self) -> Any:
        return [[list(r) for r in self.buffered(port)] for port in (0, 1)]

    def restore_state(self, state: Any) -> None:
        self._clear()
        for port, side in enumerate(state):
            key_of, index, sequence = self.keys[port], self.index[port], self._sequence
            heap = self.expiry[port]
            for values in side:
                record = tuple(values)
                key = key_of(record)
                index.setdefault(key, []).append(record)      # in timestamp order already
                heap.append((record[0], next(sequence), key, record))
            heapify(heap)
