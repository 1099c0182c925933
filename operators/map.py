"""Map: converts each record into a new one (§IV-D).

The output keeps the input timestamp (a Map cannot move a record in time: that would break the
punctuation promise of §IV-A) and computes the other fields.  Non-finite floats are evaluation
errors and ``-0.0`` is normalised (see :mod:`operators.record`), so the result is bit-identical on
every replica.
"""

from __future__ import annotations

import math
from typing import Callable

from operators.base import Operator
from operators.record import Record


class Map(Operator):
    kind = "map"

    def __init__(self, function: Callable[[Record], tuple]):
        """``function(record)`` returns the output fields after ``ts``, as a tuple."""
        super().__init__(1)
        self.function = function

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        out = []
        append = out.append
        function = self.function
        for record in records:
            try:
                fields = function(record)
            except Exception as error:
                self.count_error(record, error)
                continue
            if any(type(v) is float for v in fields):
                if not all(math.isfinite(v) for v in fields if type(v) is float):
                    self.count_error(record, ArithmeticError(f"non-finite result {fields!r}"))
                    continue
                fields = tuple(v + 0.0 if type(v) is float else v for v in fields)
            append((record[0], *fields))
        return out
