"""The retained output of one replica, numbered by item offset, for replay (§II-B).

Every stream replica leaving a replica carries the same item sequence (records and punctuations),
so one log serves all of them.  Each downstream stream replica acknowledges a prefix; the log
drops what every remote downstream holds.  A reconnecting or newly connected downstream replica
is sent the retained suffix; it skips the offsets it already has (:mod:`engine.messages` rule 2).
"""

from __future__ import annotations

from collections import deque

from operators.record import Record


class OutputLog:
    """Batches ``(offset, records, punctuation, path)`` from offset :attr:`base` to :attr:`end`
    (``path``: the batch's provenance, :mod:`engine.messages` rule 5)."""

    def __init__(self) -> None:
        self.base = 0
        self.end = 0
        self._batches: deque[tuple[int, list[Record], int | None, tuple[str, ...]]] = deque()

    def append(self, records: list[Record], punctuation: int | None, path: tuple[str, ...] = ()) -> int:
        """Add one batch; returns its offset."""
        offset = self.end
        self._batches.append((offset, records, punctuation, path))
        self.end += len(records) + (punctuation is not None)
        return offset

    def since(self, offset: int) -> list[tuple[int, list[Record], int | None, tuple[str, ...]]]:
        """The retained batches that hold items at or after ``offset``."""
        return [b for b in self._batches if b[0] + len(b[1]) + (b[2] is not None) > offset]

    def trim(self, offset: int) -> None:
        """Forget every batch that lies wholly below ``offset``."""
        batches = self._batches
        while batches:
            start, records, punctuation, _ = batches[0]
            end = start + len(records) + (punctuation is not None)
            if end > offset:
                break
            batches.popleft()
            self.base = end
        if not batches:
            self.base = self.end

    def __len__(self) -> int:
        """Retained items."""
        return self.end - self.base
