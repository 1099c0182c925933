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

§V-B utility weights: each arriving copy gives its stream replica the weight ``1/rank``, where rank
1 is the first copy of that occurrence to arrive, 2 the second, … .  They are kept as integer counts
per rank (``rank_counts[i][r-1]``) so accumulating them costs no float arithmetic on the hot path.
"""

from __future__ import annotations

from typing import Any

from operators.base import NO_PUNCTUATION
from operators.record import Record


class DuplicateFilter:
    """Algorithm 1 for one input port fed by ``k`` stream replicas numbered ``0 … k-1``."""

    def __init__(self, k: int):
        self.k = k
        self.max_punctuation = NO_PUNCTUATION
        # count entry of a record: [max_count, count from replica 0, …, count from replica k-1]
        self._counts: dict[Record, list[int]] = {}
        self._first = [self._first_entry(i) for i in range(k)]
        self.rank_counts = [[0] * k for _ in range(k)]
        self.passed = 0
        self.duplicates = 0
        self.below_punctuation = 0

    def _first_entry(self, i: int) -> list[int]:
        entry = [1] + [0] * self.k
        entry[i + 1] = 1
        return entry

    def add_replica(self) -> int:
        """Accept one more stream replica (a revived or newly connected upstream); returns its index."""
        self.k += 1
        self._first = [self._first_entry(i) for i in range(self.k)]
        for counts in self.rank_counts:
            counts.append(0)
        self.rank_counts.append([0] * self.k)
        return self.k - 1

    def on_batch(self, i: int, records: list[Record]) -> list[Record]:
        """Records from stream replica ``i``; returns those that pass, in arrival order."""
        out: list[Record] = []
        append = out.append
        counts = self._counts
        get = counts.get
        first = self._first[i]
        column = i + 1
        max_punctuation = self.max_punctuation
        for record in records:
            if record[0] <= max_punctuation:           # Alg. 1 line 2
                self.below_punctuation += 1
                continue
            entry = get(record)
            if entry is None:                           # first copy of the first occurrence
                counts[record] = first.copy()
                append(record)
                continue
            if column >= len(entry):                    # entry made before add_replica()
                entry.extend([0] * (column + 1 - len(entry)))
            count = entry[column] + 1                   # line 3
            entry[column] = count
            if count > entry[0]:                        # lines 4-6
                entry[0] = count
                append(record)
            else:
                self._rank_duplicate(i, entry, count)
        self.passed += len(out)
        self.rank_counts[i][0] += len(out)
        return out

    def _rank_duplicate(self, i: int, entry: list[int], count: int) -> None:
        rank = sum(1 for c in entry[1:] if c >= count)
        self.rank_counts[i][min(rank, self.k) - 1] += 1
        self.duplicates += 1

    def on_record(self, i: int, record: Record) -> bool:
        return bool(self.on_batch(i, [record]))

    def on_punctuation(self, i: int, p: int) -> int | None:
        """Punctuation ``p`` from replica ``i``; returns the punctuation to forward, if any (lines 7-11)."""
        if p <= self.max_punctuation:
            return None
        self.max_punctuation = p
        self._counts = {r: e for r, e in self._counts.items() if r[0] > p}
        return p

    # -- statistics and state -------------------------------------------------------------------
    def weights(self) -> list[float]:
        """Accumulated §V-B weight of each stream replica: Σ over copies of 1/rank."""
        return [sum(n / (rank + 1) for rank, n in enumerate(counts)) for counts in self.rank_counts]

    def pending(self) -> int:
        """How many distinct records are remembered (bounded by one punctuation interval)."""
        return len(self._counts)

    def snapshot(self) -> dict[str, Any]:
        return {"k": self.k, "max_punctuation": self.max_punctuation,
                "counts": [[list(r), e] for r, e in self._counts.items()],
                "rank_counts": [list(c) for c in self.rank_counts]}

    def restore(self, state: dict[str, Any]) -> None:
        self.__init__(state["k"])
        self.max_punctuation = state["max_punctuation"]
        self._counts = {tuple(r): list(e) for r, e in state["counts"]}
        self.rank_counts = [list(c) for c in state["rank_counts"]]
