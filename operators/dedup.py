"""The duplicate filter: merges k stream replicas of one input into a duplicate-free stream (§IV-B).

Algorithm 1, with the paper's line numbers:

* a record ``t`` from stream replica ``i`` with ``t.ts ≤ max_punctuation`` is a duplicate (line 2):
  some replica already promised it had sent every record up to that punctuation;
* otherwise ``count[t][i] += 1`` (line 3) and ``t`` passes iff ``count[t][i] > max_count[t]``
  (lines 4–6) — it is the first copy of this occurrence of ``t`` to arrive;
* a punctuation ``p > max_punctuation`` is forwarded (lines 8–9) and all counts of records with
  ``ts ≤ p`` are dropped (line 11), so memory is bounded by what arrives in one punctuation interval.

Theorem 1: if the replicas carry the same multiset, the output carries it too — each record passes
exactly its multiplicity — whatever the interleaving, without ever blocking.

Representation (the hot path of every replica, so it avoids allocations): while every replica has
sent a record at most once, ``count[t]`` is an ``int`` bitmask of the replicas that sent it, with
``max_count = 1`` implied.  Only when a replica sends an equal record a second time (two distinct
events with equal values) does the record get a list ``[max_count, count_0, …, count_{k-1}]`` in a
side table, its mask becoming ``-1`` (all bits set) so that every later copy takes the slow path.

With a single stream replica (k = 1) Algorithm 1 passes every record above the punctuation — each
copy is a new occurrence — so the filter only checks timestamps, in C (``min``), and keeps the
records passed since the last punctuation in a list; :meth:`DuplicateFilter.add_replica` rebuilds
exact counts from that list, so a replica connected later (revival, §V-C) is filtered correctly.

§V-B utility weights: each arriving copy gives its stream replica the weight ``1/rank``, where
rank 1 is the first copy of that occurrence to arrive, 2 the second, …  They are kept as integer
counts per rank (``rank_counts[i][rank-1]``), so the hot path does no float arithmetic.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any

from operators.base import NO_PUNCTUATION
from operators.record import Record


_ts = itemgetter(0)
_POPCOUNT = bytes(i.bit_count() for i in range(256))

#: Mask of a record some replica sent more than once: every bit set, so the slow path handles it.
_MULTIPLE = -1


class DuplicateFilter:
    """Algorithm 1 for one input port fed by ``k`` stream replicas numbered ``0 … k-1``.

    ``k`` may start at 0 and grow with :meth:`add_replica` as stream replicas connect; a filter
    created with ``k = 1`` takes the single-replica fast path until a second replica is added.
    """

    def __init__(self, k: int):
        self.k = k
        self.max_punctuation = NO_PUNCTUATION
        self._counts: dict[Record, int] = {}           # record -> mask of replicas (or _MULTIPLE)
        self._multiple: dict[Record, list[int]] = {}   # record -> [max_count, count_0, …]
        self._newest = NO_PUNCTUATION           # largest ts stored (bounds pruning work)
        self._recent: list[Record] | None = [] if k == 1 else None   # single-replica mode
        self.rank_counts = [[0] * k for _ in range(k)]
        self.passed = 0
        self.duplicates = 0
        self.below_punctuation = 0

    def add_replica(self) -> int:
        """Accept one more stream replica (a revived or newly connected upstream); returns its index."""
        if self._recent is not None:            # leave single-replica mode with exact counts
            self._recent, recent = None, self._recent
            self.on_batch(0, recent)
            self.passed -= len(recent)
            self.rank_counts[0][0] -= len(recent)
        self.k += 1
        for counts in self.rank_counts:
            counts.append(0)
        self.rank_counts.append([0] * self.k)
        return self.k - 1

    def on_batch(self, i: int, records: list[Record]) -> list[Record]:
        """Records from stream replica ``i``; returns those that pass, in arrival order."""
        if not records:
            return []
        max_punctuation = self.max_punctuation
        if self._recent is not None:                    # k = 1: every record is a new occurrence
            passed = records if min(map(_ts, records)) > max_punctuation else \
                [r for r in records if r[0] > max_punctuation]
            self._recent += passed
            self._note(i, records, passed, len(records) - len(passed))
            return passed
        out: list[Record] = []
        append = out.append
        counts = self._counts
        get = counts.get
        bit = 1 << i
        below = 0
        newest = self._newest
        masks: list[int] = []                           # masks after each copy of occurrence 1
        seen_by = masks.append
        for record in records:
            seen = get(record)
            if seen is None:
                # Alg. 1 line 2. Only needed on a miss: a punctuation p removes every entry with
                # ts <= p (line 11), so a record still in the table is above max_punctuation.
                ts = record[0]
                if ts <= max_punctuation:
                    below += 1
                    continue
                if ts > newest:
                    newest = ts
                counts[record] = bit                    # first copy of occurrence 1 (lines 3-6)
                append(record)
            elif not seen & bit:                        # a later copy of occurrence 1
                seen |= bit
                counts[record] = seen
                seen_by(seen)
            elif self._count_copy(i, record):           # replica i repeats an equal record
                append(record)
        self._newest = newest
        if masks:
            self._count_ranks(i, masks)
        self.passed += len(out)
        self.below_punctuation += below
        self.duplicates += len(records) - len(out) - below
        self.rank_counts[i][0] += len(out)
        return out

    def _count_ranks(self, i: int, masks: list[int]) -> None:
        """§V-B: a copy whose arrival made the mask ``m`` has rank ``popcount(m)``."""
        ranks = self.rank_counts[i]
        if self.k <= 8:                                 # masks fit in bytes: count ranks in C
            by_rank = bytes(masks).translate(_POPCOUNT)
            for rank in range(2, self.k + 1):
                ranks[rank - 1] += by_rank.count(rank)
        else:
            for mask, n in Counter(masks).items():
                ranks[mask.bit_count() - 1] += n

    def _note(self, i: int, records: list[Record], out: list[Record], below: int) -> None:
        """Per-batch bookkeeping: newest timestamp stored, counters, rank-1 weights of what passed."""
        if out:                                         # only passing records add keys to _counts
            newest = max(map(_ts, out))
            if newest > self._newest:
                self._newest = newest
        self.passed += len(out)
        self.below_punctuation += below
        self.duplicates += len(records) - len(out) - below
        self.rank_counts[i][0] += len(out)

    def _count_copy(self, i: int, record: Record) -> bool:
        """Alg. 1 lines 3-6 with full counts; returns whether the copy passes."""
        entry = self._multiple.get(record)
        if entry is None:                               # switch to the list form
            mask = self._counts[record]
            entry = self._multiple[record] = [1] + [(mask >> j) & 1 for j in range(self.k)]
            self._counts[record] = _MULTIPLE
        if len(entry) <= i + 1:                         # entry made before add_replica()
            entry.extend([0] * (i + 2 - len(entry)))
        count = entry[i + 1] + 1                        # line 3
        entry[i + 1] = count
        if count > entry[0]:                            # lines 4-6
            entry[0] = count
            return True
        rank = sum(1 for c in entry[1:] if c >= count)
        self.rank_counts[i][min(rank, self.k) - 1] += 1
        return False

    def on_record(self, i: int, record: Record) -> bool:
        return bool(self.on_batch(i, [record]))

    def on_punctuation(self, i: int, p: int) -> int | None:
        """Punctuation ``p`` from replica ``i``; returns the punctuation to forward, if any (lines 7-11)."""
        if p <= self.max_punctuation:
            return None
        self.max_punctuation = p
        if self._multiple:
            self._multiple = {r: e for r, e in self._multiple.items() if r[0] > p}
        if self._newest <= p:                           # line 11, for every record at once
            self._counts = {}
            if self._recent is not None:
                self._recent = []
        elif self._recent is not None:
            self._recent = [r for r in self._recent if r[0] > p]
        else:
            self._counts = {r: e for r, e in self._counts.items() if r[0] > p}
        return p

    # -- statistics and state -------------------------------------------------------------------
    def weights(self) -> list[float]:
        """Accumulated §V-B weight of each stream replica: Σ over copies of 1/rank."""
        return [sum(n / (rank + 1) for rank, n in enumerate(counts)) for counts in self.rank_counts]

    def pending(self) -> int:
        """How many records are remembered (bounded by one punctuation interval)."""
        return len(self._counts) if self._recent is None else len(self._recent)

    def snapshot(self) -> dict[str, Any]:
        return {"k": self.k, "max_punctuation": self.max_punctuation, "newest": self._newest,
                "counts": [[list(r), e] for r, e in self._counts.items()],
                "multiple": [[list(r), e] for r, e in self._multiple.items()],
                "recent": None if self._recent is None else [list(r) for r in self._recent],
                "rank_counts": [list(c) for c in self.rank_counts]}

    def restore(self, state: dict[str, Any]) -> None:
        self.__init__(state["k"])
        self.max_punctuation = state["max_punctuation"]
        self._newest = state["newest"]
        self._counts = {tuple(r): e for r, e in state["counts"]}
        self._multiple = {tuple(r): list(e) for r, e in state["multiple"]}
        self._recent = None if state["recent"] is None else [tuple(r) for r in state["recent"]]
        self.rank_counts = [list(c) for c in state["rank_counts"]]
