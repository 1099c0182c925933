"""Aggregate over time windows: blocking, replica-consistent (§IV-F, Algorithm 3).

Each group forms windows ``[k·slide, k·slide + size)`` (µs since the epoch).  A record belongs to
every window ``W(ts)`` that contains it (Alg. 3 lines 1–3), which depends only on its timestamp,
so windows are formed identically whatever the arrival order.  A window ``[a, b)`` is complete
once the frontier ``p`` promises nothing earlier than ``b`` can arrive, i.e. ``b ≤ p + 1`` (the
paper's ``expiry ≤ p``, exact for integer timestamps); it is then closed and summarised
(lines 4–8).  The output timestamp is the window end ``b``; empty windows emit nothing.

Windows are keyed by their end in a sorted dict, so closing at a punctuation touches only the
windows that close.

Seal per key (Blazes §V-B1, :mod:`operators.key_seals`): a seal ``(K, p)`` closes the windows of the
groups whose sealed attributes equal ``K`` with end ``≤ p + 1`` — the same test as the punctuation's,
on one partition.  Those windows hold every record of ``K`` they will ever hold (the replica drops a
record of ``K`` at or below its seal, :class:`~operators.replica.OperatorReplica`), so they are the
windows the punctuation would close, with the same contents, only sooner.
"""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedDict

from replicast.operators.base import Operator
from replicast.operators.record import Record
from replicast.operators.summaries import Summary, group_key_function, summarise


class TimeWindowAggregate(Operator):
    kind = "aggregate"

    def __init__(self, size_us: int, slide_us: int, group_by: tuple[int, ...], summaries: tuple[Summary, ...]):
        super().__init__(1)
        if size_us <= 0 or slide_us <= 0:
            raise ValueError(f"window size and slide must be positive, got {size_us} and {slide_us} µs")
        self.size_us, self.slide_us = size_us, slide_us
        self.group_by, self.summaries = group_by, summaries
        self.group_key = group_key_function(group_by)
        # window end -> group key -> records in the window
        self.windows: SortedDict = SortedDict()
        #: Where a key seal's values sit in a group tuple (set from the analysis' KeySealing); None: no seals.
        self.seal_positions: tuple[int, ...] | None = None

    def window_ends(self, ts: int) -> range:
        """Ends of all windows ``[k·slide, k·slide + size)`` that contain ``ts``."""
        first = (ts - self.size_us) // self.slide_us + 1
        last = ts // self.slide_us
        return range(first * self.slide_us + self.size_us, last * self.slide_us + self.size_us + 1, self.slide_us)

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        windows = self.windows
        for record in records:
            group = self.group_key(record)
            for end in self.window_ends(record[0]):
                groups = windows.get(end)
                if groups is None:
                    groups = windows[end] = {}
                groups.setdefault(group, []).append(record)
        return []

    def on_frontier(self, p: int) -> list[Record]:
        out = []
        windows = self.windows
        while windows and windows.peekitem(0)[0] <= p + 1:
            end, groups = windows.popitem(0)
            if end > self.suppress_through:
                for group, rows in groups.items():
                    try:
                        out.append(summarise(end, group, self.summaries, rows))
                    except ArithmeticError as error:     # not representable: dropped, counted (summaries)
                        self.count_error((end, *group), error)
        return out

    def on_key_seal(self, port: int, key: tuple, p: int) -> list[Record]:
        """Key ``key`` is sealed up to ``p``: close its groups' windows with end ``≤ p + 1``."""
        positions, windows = self.seal_positions, self.windows
        if positions is None or p <= self.frontier:
            return []
        whole = positions == tuple(range(len(positions))) and len(positions) == len(self.group_by)
        out = []
        for end in list(windows.irange(maximum=p + 1)):
            groups = windows[end]
            matching = ([key] if key in groups else []) if whole else \
                [g for g in groups if tuple(g[i] for i in positions) == key]
            for group in matching:
                rows = groups.pop(group)
                if end > self.suppress_through:
                    try:
                        out.append(summarise(end, group, self.summaries, rows))
                    except ArithmeticError as error:     # not representable: dropped, counted (summaries)
                        self.count_error((end, *group), error)
            if not groups:
                del windows[end]
        return out

    def rebuild(self, frontiers: list[int]) -> int:
        """A window ``[a, a + size)`` is complete iff ``a`` is above the adopted frontier ``f``, i.e.
        its end (the output timestamp) is above ``f + size``; the others are never emitted."""
        self.suppress_through = frontiers[0] + self.size_us
        return self.suppress_through

    def snapshot_state(self) -> Any:
        return [[end, [[list(g), [list(r) for r in rows]] for g, rows in groups.items()]]
                for end, groups in self.windows.items()]

    def restore_state(self, state: Any) -> None:
        self.windows = SortedDict({end: {tuple(g): [tuple(r) for r in rows] for g, rows in groups}
                                   for end, groups in state})
