"""A port's memory of the sampled records that came to it (engine/core/tracepoints.py rule 2):
which came first, when, and how many copies of each came since.  Pure: no clock, no I/O.
"""

from __future__ import annotations

from itertools import repeat

from replicast.engine.core.trace_sampling import NEVER, Chosen


class Run:
    """A batch's sampled records that all came first to a port, newer than any it remembers, and
    distinct: remembered together (rule 2) — a copy of the same sampled records (the same
    :class:`Chosen`, by content key) is one count, not one per record."""

    __slots__ = ("records", "oldest", "newest", "at", "copies", "hashes")

    def __init__(self, records: "Chosen", oldest: int, newest: int, at: int):
        self.records, self.oldest, self.newest, self.at = records, oldest, newest, at
        self.copies = 1
        self.hashes: list[int] | None = None           # once remembered record by record instead


class PortMemory:
    """A port's first arrivals of sampled records (rule 2)."""

    __slots__ = ("at", "copies", "baggage", "runs", "order", "newest")

    def __init__(self) -> None:
        self.at: dict[int, int] = {}                   # record's hash -> now of its first arrival
        self.copies: dict[int, int] = {}               # record's hash -> copies so far
        self.baggage: dict[int, tuple] = {}            # record's hash -> the baggage its first copy came with
        self.runs: dict[int, Run] = {}                # id of a run's records -> the run (it holds them)
        self.order: list[Run] = []                    # the runs, oldest timestamps first (they do not overlap)
        self.newest = -NEVER                          # no remembered record, in a run or not, is newer

    def unrun(self, run: Run) -> None:
        """Remember ``run``'s records record by record from now on (a batch overlaps them)."""
        run.hashes = hashes = list(map(hash, run.records))
        self.copies.update(zip(hashes, repeat(run.copies)))
        self.at.update(zip(hashes, repeat(run.at)))
        del self.runs[id(run.records)]
        self.order.remove(run)
