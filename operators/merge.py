"""The deterministic merge: every replica of an operator processes its input in one order (the
``deterministic`` engine mode, the paper's baseline [12] in §VI-B).

Records of all ports are buffered in a sorted list keyed by ``(ts, port, canonical bytes)`` and
released only once *every* port's punctuation has passed them — the merged punctuation, the minimum
over ports.  Whatever order and interleaving the inputs arrive in, the concatenation of the
releases is the same sequence on every replica, so peer replicas process identical input.  The
price is the paper's point: "tuples are held until a relevant punctuation arrives … the pace is
eventually determined by the slowest input flow" (§VI-B).  Replication does not need this: its
operators are replica-consistent whatever the order (§III).
"""

from __future__ import annotations

from itertools import groupby
from operator import itemgetter
from typing import Any

from sortedcontainers import SortedList

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.record import Record, canonical_bytes

_port = itemgetter(1)


class MergeSorter:
    """Buffers the records of ``n_ports`` ports and releases them in the merge order up to the merged punctuation."""

    def __init__(self, n_ports: int) -> None:
        self.punctuations = [NO_PUNCTUATION] * n_ports
        #: The merged punctuation: every record at or below it has been released.
        self.released = NO_PUNCTUATION
        self._buffer: SortedList = SortedList()

    def add(self, port: int, records: list[Record]) -> None:
        self._buffer.update((r[0], port, canonical_bytes(r), r) for r in records)

    def punctuate(self, port: int, p: int) -> tuple[list[tuple[int, list[Record]]], int | None]:
        """Port ``port`` promised ``ts > p``.  If the merged punctuation advances, returns the records
        now released, as ``(port, records)`` runs in the merge order, and the new merged punctuation;
        else ``([], None)``."""
        if p > self.punctuations[port]:
            self.punctuations[port] = p
        low = min(self.punctuations)
        if low <= self.released:
            return [], None
        self.released = low
        end = self._buffer.bisect_left((low + 1,))
        items = list(self._buffer.islice(0, end))
        del self._buffer[:end]
        return [(port, [item[3] for item in run]) for port, run in groupby(items, key=_port)], low

    def __len__(self) -> int:
        return len(self._buffer)

    def snapshot(self) -> dict[str, Any]:
        return {"punctuations": list(self.punctuations), "released": self.released,
                "buffer": [[port, list(record)] for _, port, _, record in self._buffer]}

    def restore(self, state: dict[str, Any]) -> None:
        self.punctuations = list(state["punctuations"])
        self.released = state["released"]
        self._buffer = SortedList()
        for port, record in state["buffer"]:
            self.add(port, [tuple(record)])
