"""Map: converts each record into a new one (§IV-D).

The output keeps the input timestamp (a Map cannot move a record in time: that would break the
punctuation promise of §IV-A) and computes the other fields.  Non-finite floats are evaluation
errors and ``-0.0`` is normalised (see :mod:`operators.record`), so the result is bit-identical on
every replica (the compiled function does this: float fields go through
:func:`~operators.expressions.finite_float`).
"""

from __future__ import annotations

from typing import Callable

from replicast.operators.base import Operator
from replicast.operators.record import Record


class Map(Operator):
    kind = "map"

    def __init__(self, function: Callable[[Record], Record],
                 apply: Callable[[list[Record]], list[Record]] | None = None):
        """``function(record)`` returns the output record, the input's ``ts`` first (see
        :func:`operators.compile.compile_map`; :func:`operators.expressions.compile_tuple` makes
        computed float fields exact and finite and checks computed ints fit 64 bits).  Built whole
        by one call, the output record is one tuple allocation: about a fifth faster than adding
        ``ts`` to a tuple of fields (docs/performance.md).  ``apply(records)``, if given, maps a whole batch
        at once (:func:`operators.expressions.compile_tuples`: no Python call per record)."""
        super().__init__(1)
        self.function = function
        self.apply = apply if apply is not None else lambda records: list(map(function, records))

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        try:
            return self.apply(records)
        except Exception:  # fall back to one record at a time to count the bad ones
            return [out for out in map(self._safe, records) if out is not None]

    def _safe(self, record: Record) -> Record | None:
        try:
            return self.function(record)
        except Exception as error:
            self.count_error(record, error)
            return None
