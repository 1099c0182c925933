"""A process-pair backup's own input against its primary's determinants (mode ``synchronization``).

A backup's operator takes its primary's steps (:mod:`engine.core.pairs`), not its own; its own
input — the same records, from its own upstream replica, in another order — is matched here,
per port, as multisets: an own record either was already carried by a determinant (it is *ahead*
in the determinants) or waits (*pending*) for one.  So on taking over, the operator processes
exactly the own input no determinant carried, and later own copies of what determinants carried
are dropped.

Rules of this module:

1. Matching is by value: equal records are the same occurrence to the operator (the duplicate
   filters upstream of both replicas count multiplicities, §IV-B, so both sides carry each
   occurrence once).
2. Once both sides have passed punctuation ``p`` on a port, every record at or below ``p`` is on
   both sides and matched: what is listed there is forgotten, so memory stays about one
   punctuation interval of the lag between the two sides.
"""

from __future__ import annotations

from collections import Counter

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.record import Record


class Ledger:
    """Own input against determinants, for an operator with ``ports`` input ports."""

    def __init__(self, ports: int):
        self.pending: list[list[Record]] = [[] for _ in range(ports)]   # own, not carried yet (arrival order)
        self.unmatched = [Counter() for _ in range(ports)]              # how many of each pending record still wait
        self.ahead = [Counter() for _ in range(ports)]                  # carried by determinants, not yet own
        self.own = [NO_PUNCTUATION] * ports                             # own punctuation per port
        self.theirs = [NO_PUNCTUATION] * ports                          # the primary's, per port

    def take_own(self, port: int, records: list[Record], p: int | None) -> None:
        """The backup's own step (its operator does not take it while it follows its primary)."""
        ahead, unmatched, pending = self.ahead[port], self.unmatched[port], self.pending[port]
        for record in records:
            if ahead[record]:
                _decrement(ahead, record)
            else:
                pending.append(record)
                unmatched[record] += 1
        if p is not None and p > self.own[port]:
            self.own[port] = p
            self._forget(port)

    def take_theirs(self, port: int, records: list[Record], p: int | None) -> None:
        """A determinant's step, which the backup's operator took."""
        ahead, unmatched = self.ahead[port], self.unmatched[port]
        for record in records:
            if unmatched[record]:
                _decrement(unmatched, record)
            else:
                ahead[record] += 1
        if p is not None and p > self.theirs[port]:
            self.theirs[port] = p
            self._forget(port)

    def take_over(self, port: int) -> tuple[list[Record], int | None]:
        """What the operator must still take on ``port`` when the backup goes on alone: the own
        records no determinant carried, in arrival order, and the own punctuation if it is ahead."""
        records = self._waiting(port)
        self.pending[port], self.unmatched[port] = [], Counter()
        p = self.own[port] if self.own[port] > self.theirs[port] else None
        self.theirs[port] = max(self.theirs[port], self.own[port])
        return records, p

    def after_take_over(self, port: int, records: list[Record], p: int | None) -> list[Record]:
        """An own step once alone: without the records determinants already carried."""
        ahead = self.ahead[port]
        if ahead:
            kept = []
            for record in records:
                if ahead[record]:
                    _decrement(ahead, record)
                else:
                    kept.append(record)
            records = kept
        if p is not None and p > self.own[port]:
            self.own[port] = p
            self._forget(port)
        return records

    def settled(self) -> bool:
        """Nothing is ahead any more: once alone, the ledger has no more work."""
        return not any(self.ahead)

    def _waiting(self, port: int) -> list[Record]:
        budget = Counter(self.unmatched[port])
        out = []
        for record in self.pending[port]:
            if budget[record]:
                budget[record] -= 1
                out.append(record)
        return out

    def _forget(self, port: int) -> None:
        """Rule 2."""
        low = min(self.own[port], self.theirs[port])
        if low == NO_PUNCTUATION:
            return
        if self.pending[port] and min(r[0] for r in self.pending[port]) <= low:
            self.pending[port] = [r for r in self._waiting(port) if r[0] > low]
            self.unmatched[port] = Counter(self.pending[port])
        ahead = self.ahead[port]
        for record in [r for r in ahead if r[0] <= low]:
            del ahead[record]


def _decrement(counter: Counter, record: Record) -> None:
    if counter[record] == 1:
        del counter[record]
    else:
        counter[record] -= 1
