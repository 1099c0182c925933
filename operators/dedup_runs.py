"""Identical batches remembered whole (*runs*), a representation of a duplicate filter's counts
(:mod:`operators.dedup`, §IV-B).

Replicas of a deterministic operator that see the same input batches emit the same output batches,
so the k copies of a batch often arrive as byte-identical frames.  A caller that has an identity for
a batch's content (the engine passes the frame's record bytes) gives it as ``key``.  When the first
copy of a keyed batch has distinct timestamps that are all newer than anything remembered, none of
its records can equal a remembered record or each other, so every one is new: the batch passes whole
and is remembered as one :class:`Run` — the records with one shared copy mask — without hashing any
record.  A later copy with the same key is Algorithm 1 for all its records at once (one mask update;
its frame need not even be decoded).  Anything a run cannot answer alone makes the filter turn the
runs concerned into per-record slots (:mod:`operators.dedup_slots`) first.

When a punctuation covers a run, its key is kept (the newest runs' keys, up to ``COVERED_RECORDS``
records' worth), so the copies lagging replicas send later are dropped as below the punctuation
(Alg. 1 line 2) without being read; otherwise memory stays bounded by one punctuation interval.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from replicast.operators.record import Record

#: Records of covered runs whose keys are kept for lagging replicas (bounds that memory).
COVERED_RECORDS = 1 << 16


@dataclass(slots=True)
class Run:
    """A keyed batch remembered whole: distinct records with timestamps ``oldest … newest``, all
    sent by the replicas in ``mask`` (each once); ``below`` more of the batch's records were at or
    below a punctuation and are forgotten (line 11)."""

    key: Hashable
    records: Sequence[Record]
    oldest: int
    newest: int
    mask: int
    below: int = 0


class Runs:
    """The runs of one port, disjoint and in timestamp order, and the keys of runs covered since."""

    __slots__ = ("by_key", "covered", "covered_records")

    def __init__(self) -> None:
        # key -> run, in timestamp order; ordered so the oldest is found in O(1) after front
        # deletions (a plain dict's iteration scans the deleted slots)
        self.by_key: OrderedDict[Hashable, Run] = OrderedDict()
        self.covered: OrderedDict[Hashable, int] = OrderedDict()   # key -> size, recently covered runs
        self.covered_records = 0

    def __len__(self) -> int:
        return len(self.by_key)

    def knows(self, key: Hashable) -> bool:
        """Whether a copy of the batch with this key can be taken without its records."""
        return key in self.by_key or key in self.covered

    def add(self, key: Hashable, records: Sequence[Record], oldest: int, newest: int, mask: int) -> None:
        self.by_key[key] = Run(key, records, oldest, newest, mask)

    def oldest(self) -> int:
        """The oldest timestamp a run holds (there is one)."""
        return next(iter(self.by_key.values())).oldest

    def overlapping(self, oldest: int, newest: int) -> list[Run]:
        """The runs holding timestamps in ``oldest … newest``."""
        runs = list(self.by_key.values())
        first = bisect_left([r.newest for r in runs], oldest)
        last = bisect_right([r.oldest for r in runs], newest)
        return runs[first:last]

    def take(self, runs: Iterable[Run]) -> None:
        """Stop remembering ``runs`` as runs (the filter gives their records per-record slots)."""
        for run in runs:
            del self.by_key[run.key]

    def records(self) -> Iterable[tuple[Record, int]]:
        """Every record a run holds, with its copy mask."""
        return ((r, run.mask) for run in self.by_key.values() for r in run.records)

    def pending(self) -> int:
        return sum(len(run.records) for run in self.by_key.values())

    def forget(self, p: int) -> None:
        """Line 11 for runs: they are in timestamp order, so only the oldest few are touched.  A run
        wholly at or below ``p`` is forgotten and its key kept in ``covered``; a run across ``p``
        keeps its records above ``p``."""
        covered: dict[Hashable, int] = {}
        for key, run in self.by_key.items():
            if run.oldest > p:
                break
            if run.newest <= p:
                covered[key] = len(run.records) + run.below
                continue
            kept = [r for r in run.records if r[0] > p]
            run.below += len(run.records) - len(kept)
            run.records, run.oldest = kept, min(r[0] for r in kept)
        for key in covered:
            del self.by_key[key]
        self.cover(covered.items())

    def cover(self, covered: Iterable[tuple[Hashable, int]]) -> None:
        """Copies of these ``(key, size)`` batches still to come are below the punctuation: keep their
        keys, the newest first, within a budget of records (lagging replicas' copies arrive in order)."""
        kept = self.covered
        for key, size in covered:
            if key not in kept:
                kept[key] = size
                self.covered_records += size
        while self.covered_records > COVERED_RECORDS and len(kept) > 1:
            self.covered_records -= kept.popitem(last=False)[1]     # O(1), unlike a dict's front
