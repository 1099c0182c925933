"""A :class:`~placement.model.Workload` from a query file, before anything has been measured.

The coordinator measures rates and loads while the query runs (§V-A: "these statistics are available
in the later phases"); before that, placement needs estimates.  The rules, all overridable per
name through ``rates``:

* every source stream produces ``source_rate`` records/s (§VI-A: sources generate tuples periodically);
* an operator's output rate is the sum of its input rates — exact for a Union, an upper bound for a
  Filter (§VI-A's Filters pass everything) or a Map, a placeholder for Joins and Aggregates;
* one replica's load is its input rate times ``cpu_us`` µs of CPU per record, in cores
  (entry points: their own rate; applications: their input's).
"""

from __future__ import annotations

from typing import Mapping

from replicast.operators.query import Query
from replicast.placement.errors import PlacementError
from replicast.placement.model import Workload


def from_query(query: Query, pinned: Mapping[str, int], *, source_rate: float = 1.0,
               rates: Mapping[str, float] | None = None, cpu_us: float = 10.0) -> Workload:
    """The workload of ``query`` with streams and applications on the ``pinned`` server indices."""
    rates = dict(rates or {})
    unknown = sorted(set(rates) - set(query.streams) - set(query.operators))
    if unknown:
        raise PlacementError(f"{query.source}: rates given for {', '.join(unknown)}, which are not streams or operators")
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise PlacementError(f"rates: '{name}' must be a number of records/s >= 0, got {value!r}")
    inputs = {name: query.inputs_of(name) for name in (*query.operators, *query.applications)}
    rate: dict[str, float] = {}
    load: dict[str, float] = {}
    for name in query.streams:
        rate[name] = float(rates.get(name, source_rate))
        load[name] = rate[name] * cpu_us * 1e-6
    for name in (*query.operators, *query.applications):
        arriving = sum(rate[i] for i in inputs[name])
        if name in query.operators:
            rate[name] = float(rates.get(name, arriving))
        load[name] = arriving * cpu_us * 1e-6
    return Workload(tuple(query.streams), tuple(query.operators), tuple(query.applications), inputs, rate, load,
                    dict(pinned))
