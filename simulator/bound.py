"""Per-record latency lower bound: the fastest path through the deployed replicas, from the trace alone.

Computed without the event loop, the network model or the node cores, as a check on all three: a
record published at ``ts`` by a source on server ``S`` can reach replica ``r`` no earlier than the
earliest arrival over every path of the physical plan (source → entry replica → … → ``r``), where
one hop ``a → b`` leaving at ``t`` arrives at ``min over t' ≥ t of t' + one_way(a, b, t')`` — the
trace is piecewise constant per frame, so waiting for a later frame is considered too, and an outage
frame is skipped.  Processing costs are not included: the simulator must never beat the bound and
should meet it within the modelled processing cost.

Only for queries whose records reach the applications unchanged (Union, Filter), so a delivered
record can be matched with the source record it is.
"""

from __future__ import annotations

from typing import Any

from replicast.operators.plan import plan
from replicast.operators.query import Query
from replicast.operators.record import Record

INFINITY = float("inf")


def hop(trace: Any, a: int, b: int, t: int, origin: int = 0) -> float:
    """Earliest arrival at ``b`` of a message that may leave ``a`` at ``t`` or later."""
    if a == b:
        return t
    interval, last = trace.interval_us, trace.n_frames - 1
    frame = min(max(0, t - origin) // interval, last)
    best = INFINITY
    while True:
        start = origin + frame * interval
        if start >= best:
            break
        delay = trace.one_way_us(a, b, frame * interval)
        if delay is not None:
            best = min(best, max(t, start) + delay)
        if frame == last:
            break
        frame += 1
    return best


def lower_bounds(query: Query, placement: dict[str, list[str]], servers: dict[str, int], trace: Any,
                 inputs: dict[str, list[Record]], homes: dict[str, str], origin: int = 0) -> dict[Record, float]:
    """Earliest possible arrival at its application of every input record (keyed by the record)."""
    physical = plan(query, {name: len(nodes) for name, nodes in placement.items()})
    node = {r: servers[placement[r.name][r.index]] for ids in physical.replicas.values() for r in ids}
    order = [*query.operators, *query.applications]
    bounds: dict[Record, float] = {}
    for stream, records in inputs.items():
        source = servers[homes[stream]]
        for record in records:
            arrive = {r: hop(trace, source, node[r], record[0], origin) for r in physical.replicas[stream]}
            for name in order:
                for r in physical.replicas[name]:
                    arrive[r] = min((hop(trace, node[s.source], node[r], arrive[s.source], origin)
                                     for s in physical.stream_replicas if s.target == r and s.source in arrive),
                                    default=INFINITY)
            for app in query.applications:
                value = arrive[physical.replicas[app][0]]
                bounds[record] = min(bounds.get(record, INFINITY), value)
    return bounds
