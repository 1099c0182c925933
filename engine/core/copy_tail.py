"""What a joined entry point may still meet of its donor's copied log (:mod:`engine.core.stamping`
rule 3, :mod:`engine.core.lifecycle` rule 5).

Rules of this module:

1. A :class:`CopyTail` holds the copy's records above the donor's punctuation, in stream order; the
   entry point's own records are matched against it in order (:meth:`CopyTail.carries`).
2. It is *done* — past the copy — once it is empty: every record matched, a record the copy does
   not carry arrived (nothing later can be in it), or a punctuation made the rest late
   (:meth:`CopyTail.clear`).  Done is final for that tail; a later join makes a new one.  Every
   other replica's tail is empty from the start (:meth:`CopyTail.none`).
"""

from __future__ import annotations

from collections import Counter, deque

from replicast.operators.base import NO_PUNCTUATION


class CopyTail:
    """The records of a donor's copied log that a joined entry point may still take from its own
    subscription, in stream order (rule 1)."""

    __slots__ = ("order", "left", "last_ts")

    def __init__(self, records: list):
        self.order = deque(records)
        self.left = Counter(records)
        self.last_ts = max((r[0] for r in records), default=NO_PUNCTUATION)

    @classmethod
    def none(cls) -> "CopyTail":
        """No copy to meet (rule 2)."""
        return cls([])

    @property
    def done(self) -> bool:
        """Past the copy (rule 2)."""
        return not self.order

    def clear(self) -> None:
        """Past the copy: a punctuation made what is left of it late (rule 2)."""
        self.order.clear()
        self.left.clear()

    def carries(self, record) -> bool:
        """Whether ``record`` is the copy's next one (or a later one: those before it never came)."""
        if not self.left.get(record):
            self.clear()                          # past the copy: nothing later can be in it
            return False
        while True:
            first = self.order.popleft()
            self.left[first] -= 1
            if first == record:
                return True
