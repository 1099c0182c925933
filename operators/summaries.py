"""Window summaries for aggregates: ``count()``, ``sum(f)``, ``avg(f)``, ``min(f)``, ``max(f)``.

Replica consistency is bit-exact (DESIGN.md §5): replicas see a window's records in different
orders, so a summary must not depend on order.  A running float ``+=`` does (addition of floats is
not associative), so ``sum`` and ``avg`` of floats use :func:`math.fsum`, which is exactly rounded
and therefore order-independent; integer sums are exact anyway.  ``min``/``max`` are
order-independent because records never carry NaN or ``-0.0`` (see :mod:`operators.record`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from operators.record import Record

FUNCTIONS = ("count", "sum", "avg", "min", "max")


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
        total = math.fsum(values) if self.field_type == "float" else sum(values)
        result = total if self.function == "sum" else total / len(values)
        return result + 0.0 if type(result) is float else result


def group_key_function(indices: tuple[int, ...]) -> Callable[[Record], tuple]:
    """A function returning the group-by key of a record as a tuple (``()`` without group-by)."""
    if not indices:
        return lambda record: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda record: (record[index],)
    return itemgetter(*indices)


def summarise(ts: int, group: tuple, summaries: tuple[Summary, ...], records: list[Record]) -> Record:
    """The output record of a closed window: ``(ts, *group, *summaries)``."""
    return (ts, *group, *(s.compute(records) for s in summaries))
