"""§V-B arrival ranks of a duplicate filter's copies (:mod:`operators.dedup`).

Each arriving copy gives its stream replica the weight ``1/rank``, where rank 1 is the first copy of
that occurrence to arrive, 2 the second, …  They are kept as integer counts per rank
(``counts[i][rank-1]``), so the hot path does no float arithmetic.  A later copy's rank is the
popcount of its record's copy mask (:mod:`operators.dedup_slots`); the hot path only collects those
masks per replica (``unranked``), and they are counted — in C — when the counts are read or the
collection grows past ``RANK_BUFFER``.
"""

from __future__ import annotations

from collections import Counter

_POPCOUNT = bytes(i.bit_count() for i in range(256))
#: Masks collected per replica before their ranks are counted (bounds that memory).
RANK_BUFFER = 1 << 16


class Ranks:
    """Rank counts of ``k`` stream replicas, with the masks of later copies not yet counted."""

    __slots__ = ("counts", "unranked")

    def __init__(self, counts: list[list[int]]):
        self.counts = counts
        self.unranked: list[list[int]] = [[] for _ in counts]    # masks of later copies, per replica

    @classmethod
    def empty(cls, k: int) -> Ranks:
        return cls([[0] * k for _ in range(k)])

    @property
    def k(self) -> int:
        return len(self.counts)

    def add_replica(self) -> None:
        """One more stream replica: one more rank for everyone, and its own counts."""
        self.count()
        k = self.k + 1
        for counts in self.counts:
            counts.append(0)
        self.counts.append([0] * k)
        self.unranked.append([])

    def count(self) -> list[list[int]]:
        """Count the collected masks: a copy whose arrival made the mask ``m`` has rank ``popcount(m)``."""
        k = self.k
        for ranks, masks in zip(self.counts, self.unranked):
            if not masks:
                continue
            if k <= 8:                                  # masks fit in bytes: count ranks in C
                by_rank = bytes(masks).translate(_POPCOUNT)
                for rank in range(2, k + 1):
                    ranks[rank - 1] += by_rank.count(rank)
            else:
                for mask, n in Counter(masks).items():
                    ranks[mask.bit_count() - 1] += n
            masks.clear()
        return self.counts

    def weights(self) -> list[float]:
        """Accumulated §V-B weight of each stream replica: Σ over copies of 1/rank."""
        return [sum(n / (rank + 1) for rank, n in enumerate(counts)) for counts in self.count()]
