"""The single-replica representation of a duplicate filter (:mod:`operators.dedup`, §IV-B).

With a single stream replica (k = 1) Algorithm 1 passes every record above the punctuation — each
copy is a new occurrence — so the filter only checks timestamps, in C, and keeps the records passed
since the last punctuation in a list (``recent``), from which ``DuplicateFilter.add_replica``
rebuilds exact counts when a second stream replica connects (revival, §V-C).  A keyed batch passed
whole has its key remembered until a punctuation covers it, then kept with the covered runs' keys
(:class:`operators.dedup_runs.Runs`): copies from a replica added later are known unread.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from replicast.operators.record import Record, sorted_stamps


class Single:
    """Records passed since the last punctuation from the one stream replica, and its keyed batches."""

    __slots__ = ("recent", "keys")

    def __init__(self, recent: list[Record] | None = None):
        self.recent: list[Record] = [] if recent is None else recent
        # (key, newest ts, size) of the keyed batches passed whole since the last punctuation, so
        # their keys become known once a punctuation covers them
        self.keys: list[tuple[Hashable, int, int]] = []

    def on_batch(self, records: Sequence[Record], key: Hashable | None, max_punctuation: int,
                 min_run: int) -> tuple[list[Record], list[int]]:
        """Line 2 only (a copy can never repeat an earlier one): the records that pass, and the batch's
        timestamps, sorted (``records`` is not empty)."""
        stamps = sorted_stamps(records)                 # oldest and newest at once: linear on sorted input
        if stamps[0] > max_punctuation:
            passed = records if type(records) is list else list(records)
            if key is not None and len(records) >= min_run:
                self.keys.append((key, stamps[-1], len(records)))
        else:
            passed = [r for r in records if r[0] > max_punctuation]
        self.recent += passed
        return passed, stamps

    def forget(self, p: int, newest: int) -> list[tuple[Hashable, int]]:
        """Line 11 (``newest``: the newest timestamp remembered); returns the ``(key, size)`` of the
        keyed batches ``p`` covers."""
        self.recent = [] if newest <= p else [r for r in self.recent if r[0] > p]
        if not self.keys:
            return []
        covered = [(key, n) for key, newest_ts, n in self.keys if newest_ts <= p]
        self.keys = [entry for entry in self.keys if entry[1] > p]
        return covered
