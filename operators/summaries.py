"""Window summaries for aggregates: ``count()``, ``sum(f)``, ``avg(f)``, ``min(f)``, ``max(f)``.

Replica consistency is bit-exact (DESIGN.md §5): replicas see a window's records in different
orders, so a summary must not depend on order.  A running float ``+=`` does (addition of floats is
not associative), so ``sum`` and ``avg`` of floats use :func:`math.fsum`, which is exactly rounded
and therefore order-independent; integer sums are exact anyway.  ``min``/``max`` are
order-independent because records never carry NaN or ``-0.0`` (see :mod:`operators.record`).

Finite values can still overflow: ``fsum`` raises when a partial sum leaves the float range (two
records of 1e308), and whether it does depends on the order.  So when ``n · max|v|`` could leave
the range (a test on the values alone, the same on every replica) the sum is computed exactly with :class:`fractions.Fraction` (also
order-independent) and rounded once: ``avg`` gets the exact mean; a ``sum`` whose exact value is
beyond the float range, and an int ``sum`` beyond 64 bits, raise :class:`ArithmeticError` — the
aggregate drops and counts that output record, identically on every replica.
"""

from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from replicast.operators.record import INT_MAX, INT_MIN, Record, normalise

FUNCTIONS = ("count", "sum", "avg", "min", "max")
#: Below this, a sum of n values each under _SAFE / n in magnitude cannot overflow.
_SAFE = 2.0**1023


@dataclass(frozen=True)
class Summary:
    """One ``compute`` entry: ``function`` over the field at ``index`` (None for ``count()``)."""

    function: str
    index: int | None
    field_type: str | None

    @property
    def output_type(self) -> str:
        if self.function == "count":
            return "int"
        if self.function == "avg":
            return "float"
        return self.field_type or "float"

    def compute(self, records: list[Record]) -> object:
        if self.function == "count":
            return len(records)
        values = list(map(itemgetter(self.index), records))
        if self.function in ("min", "max"):
            return (min if self.function == "min" else max)(values)
        if self.field_type != "float":
            total = sum(values)
            if self.function == "avg":
                return normalise(total / len(values))
            if not INT_MIN <= total <= INT_MAX:
                raise ArithmeticError(f"sum() of {len(values)} ints does not fit in 64 bits")
            return total
        if max(map(abs, values)) < _SAFE / len(values):   # no partial sum can leave the float range
            total = math.fsum(values)
            return normalise(total if self.function == "sum" else total / len(values))
        else:                  # one could (whether fsum raises depends on the order): exactly
            exact = sum(map(Fraction, values), Fraction(0))
            if self.function == "avg":
                exact /= len(values)
            try:
                return normalise(float(exact))
            except OverflowError:
                raise ArithmeticError(f"{self.function}() of {len(values)} floats is beyond the float range") from None


def group_key_function(indices: tuple[int, ...]) -> Callable[[Record], tuple]:
    """A function returning the group-by key of a record as a tuple (``()`` without group-by)."""
    if not indices:
        return lambda record: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda record: (record[index],)
    return itemgetter(*indices)


def summarise(ts: int, group: tuple, summaries: tuple[Summary, ...], records: list[Record]) -> Record:
    """The output record of a closed window: ``(ts, *group, *summaries)``; raises
    :class:`ArithmeticError` if a summary is not representable (see the module docstring)."""
    return (ts, *group, *(s.compute(records) for s in summaries))
