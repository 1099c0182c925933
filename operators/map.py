"""Map: converts each record into a new one (§IV-D).

The output keeps the input timestamp (a Map cannot move a record in time: that would break the
punctuation promise of §IV-A) and computes the other fields.  Non-finite floats are evaluation
errors and ``-0.0`` is normalised (see :mod:`operators.record`), so the result is bit-identical on
every replica (the compiled function does this: float fields go through
:func:`~operators.expressions.finite_float`).
"""

from __future__ import annotations

from typing import Callable

from operators.base import Operator
from operators.record import Record


class Map(Operator):
    kind = "map"

    def __init__(self, function: Callable[[Record], tuple]):
        """``function(record)`` returns the output fields after ``ts`` as a tuple (see
        :func:`operators.expressions.compile_tuple`, which makes float fields exact and finite)."""
        super().__init__(1)
        self.function = function

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        function = self.function
        try:
            return [(record[0], *function(record)) for record in records]
        except Exception:  # fall back to one record at a time to count the bad ones
            return [out for out in map(self._safe, records) if out is not None]

    def _safe(self, record: Record) -> Record | None:
        try:
            return (record[0], *self.function(record))
        except Exception as error:
            self.count_error(record, error)
            return None
