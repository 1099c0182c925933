"""Filter: passes each record that satisfies a predicate (§IV-D).

Stateless and deterministic, so replica-consistent whatever the input order.  A record whose
predicate raises (say ``x / y`` with ``y == 0``) is dropped and counted — every replica drops the
same one, so consistency holds.
"""

from __future__ import annotations

from typing import Callable

from replicast.operators.base import Operator
from replicast.operators.record import Record


class Filter(Operator):
    kind = "filter"

    def __init__(self, predicate: Callable[[Record], object],
                 select: Callable[[list[Record]], list[Record]] | None = None):
        """``predicate(record)`` decides one record; ``select(records)``, if given, the records of a
        batch that pass, all at once (:func:`operators.expressions.compile_selection`)."""
        super().__init__(1)
        self.predicate = predicate
        self.select = select if select is not None else lambda records: list(filter(predicate, records))

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        try:
            return self.select(records)
        except Exception:  # fall back to one record at a time to count the bad ones
            return [r for r in records if self._safe(r)]

    def _safe(self, record: Record) -> bool:
        try:
            return bool(self.predicate(record))
        except Exception as error:
            self.count_error(record, error)
            return False
