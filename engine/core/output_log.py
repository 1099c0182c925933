"""The retained output of one replica incarnation, numbered by item offset, for replay (§II-B).

Every stream replica leaving a replica carries the same item sequence (records and punctuations),
so one log serves all of them.  Each downstream stream replica acknowledges a prefix; the log
drops what every retaining downstream holds.  A reconnecting, joining or newly connected
downstream replica is sent the retained suffix, after a :class:`~engine.messages.StreamHead`
that says where it starts and its :attr:`OutputLog.frontier`.

Invariant (what makes a suffix useful to a receiver that lacks the prefix, ``docs/lifecycle.md``):
**every record with ``ts > frontier`` is retained**.  So the log is trimmed, whenever it can be,
right after a *clean* punctuation ``p`` — one that every record before it is at or below — and the
frontier becomes ``p``: a receiver that acknowledged that prefix has seen ``p``, so it trusts the
suffix's punctuations at once.  (Outputs may run ahead of punctuations — a join's pair, an
aggregate's window end ``p + 1`` — so not every punctuation is clean.)  If no clean point lies in
``slack`` acknowledged items, the log is trimmed anyway and the frontier is the largest timestamp
or punctuation trimmed: still true, only less convenient for such a receiver.
"""

from __future__ import annotations

from collections import deque
from operator import itemgetter
from typing import Any

from operators.base import NO_PUNCTUATION
from operators.record import Record

_ts = itemgetter(0)
#: Acknowledged items trimmed without a clean point in them (bounds what a log keeps for cleanliness).
SLACK = 4096
#: One batch: offset, records, punctuation, path, then the largest punctuation and the largest record
#: timestamp at or before it in the whole stream.
Entry = tuple[int, list[Record], int | None, tuple[str, ...], int, int]


class OutputLog:
    """Batches from offset :attr:`base` to :attr:`end`; see the module docstring."""

    def __init__(self, frontier: int | None = NO_PUNCTUATION, slack: int = SLACK) -> None:
        self.base = 0
        self.end = 0
        #: Every record with ``ts > frontier`` is at or after :attr:`base`; None while not yet known
        #: (a rebuilding replica before its horizon is known: receivers must wait for it).
        self.frontier = frontier
        self.slack = slack
        self._batches: deque[Entry] = deque()
        self._promise = NO_PUNCTUATION          # largest punctuation appended
        self._top = NO_PUNCTUATION              # largest record timestamp appended

    def append(self, records: list[Record], punctuation: int | None, path: tuple[str, ...] = ()) -> int:
        """Add one batch; returns its offset."""
        offset = self.end
        if records:
            top = max(map(_ts, records))
            if top > self._top:
                self._top = top
        if punctuation is not None and punctuation > self._promise:
            self._promise = punctuation
        self._batches.append((offset, records, punctuation, path, self._promise, self._top))
        self.end += len(records) + (punctuation is not None)
        return offset

    def since(self, offset: int) -> list[Entry]:
        """The retained batches that hold items at or after ``offset`` (first four fields are the batch)."""
        return [b for b in self._batches if b[0] + len(b[1]) + (b[2] is not None) > offset]

    def trim(self, offset: int) -> None:
        """Forget what lies below ``offset`` (every retaining receiver holds it), keeping the
        invariant: up to the last clean punctuation below it, or all of it past :data:`SLACK`."""
        batches = self._batches
        cut = clean = None
        for i, (start, records, punctuation, _, promise, top) in enumerate(batches):
            if start + len(records) + (punctuation is not None) > offset:
                break
            cut = i
            if punctuation is not None and top <= punctuation:
                clean = i
        if cut is None:
            return
        if clean != cut and offset - batches[0][0] > self.slack:
            clean = cut                         # too long without a clean point: trim it all
        if clean is None:
            return
        last = batches[clean]
        frontier = max(last[4], last[5]) if self.frontier is not None else None
        for _ in range(clean + 1):
            batches.popleft()
        self.base = last[0] + len(last[1]) + (last[2] is not None)
        if frontier is not None and frontier > self.frontier:
            self.frontier = frontier

    def __len__(self) -> int:
        """Retained items."""
        return self.end - self.base

    # -- snapshots (a joining replica's log starts as a copy of its donor's) ---------------------
    def snapshot(self) -> dict[str, Any]:
        return {"frontier": self.frontier, "batches": [[[list(r) for r in records], punctuation, list(path)]
                                                       for _, records, punctuation, path, _, _ in self._batches]}

    @classmethod
    def restore(cls, state: dict[str, Any]) -> "OutputLog":
        """A new log (offsets from 0) holding the donor's retained items, with its frontier."""
        log = cls(state["frontier"])
        for records, punctuation, path in state["batches"]:
            log.append([tuple(r) for r in records], punctuation, tuple(path))
        return log
