"""The sorter: restores the unique order of a stream in front of order-sensitive consumers (§IV-C).

Records are buffered in a sorted list keyed by ``(ts, canonical bytes)`` — a total order in which
records with equal timestamps are ordered by their msgpack encoding, the paper's "regard tuples
as byte arrays".  At punctuation ``p`` every buffered record with ``ts ≤ p`` is complete (no
earlier one can still come) and is released in that order, so all replicas of an order-sensitive
operator see one identical sequence.  The price is the wait for the punctuation, which is why the
planner inserts sorters only where order matters.
"""

from __future__ import annotations

from typing import Any, Sequence

from sortedcontainers import SortedList

from replicast.operators.record import Record, canonical_bytes


class Sorter:
    """Buffers records and releases them in the unique order up to each punctuation."""

    def __init__(self) -> None:
        self._buffer: SortedList = SortedList()

    def add(self, records: list[Record]) -> None:
        self._buffer.update((r[0], canonical_bytes(r), r) for r in records)

    def release(self, p: int) -> list[Record]:
        """All buffered records with ``ts ≤ p``, in the unique order; removes them."""
        end = self._buffer.bisect_left((p + 1,))
        released = [item[2] for item in self._buffer.islice(0, end)]
        del self._buffer[:end]
        return released

    def release_key(self, p: int, positions: tuple[int, ...], key: tuple) -> list[Record]:
        """The buffered records of key ``key`` (values at ``positions``) with ``ts ≤ p``, in the
        unique order; removes them.  A seal per key (:mod:`operators.key_seals`) completes that
        partition's prefix: releasing it before the others is one consumer-visible order per key."""
        end = self._buffer.bisect_left((p + 1,))
        taken = [item for item in self._buffer.islice(0, end) if tuple(item[2][i] for i in positions) == key]
        for item in taken:
            self._buffer.remove(item)
        return [item[2] for item in taken]

    def __len__(self) -> int:
        return len(self._buffer)

    def snapshot(self) -> list[Any]:
        return [list(item[2]) for item in self._buffer]

    def restore(self, state: Sequence[Any]) -> None:      # (a list, or a tuple off the wire)
        self._buffer = SortedList()
        self.add([tuple(r) for r in state])
