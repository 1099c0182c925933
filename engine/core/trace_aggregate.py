"""Partial aggregation of trace events where they happen, and merging at the front end (Pivot Tracing's
local aggregation: a node ships one small table per query per interval, never an event).

Rules of this module (pure):

1. A node keeps, per query, a table ``group key -> states``: one mergeable state per aggregate of
   the query's ``Select`` (:meth:`TraceQuery.aggregates`).  COUNT and SHARE are a count; SUM a
   sum; AVG ``[sum, count]``; MIN/MAX a number; a percentile a :class:`LogHistogram`'s buckets.
2. Tables travel as plain data (lists, dicts of str, ints and floats: JSON and msgpack alike) and
   merge by group key (:func:`merge`), so any number of nodes and intervals add up.
3. :func:`finish` turns a merged table into rows of the query's ``Select`` columns; SHARE is the
   group's count over the count of all groups agreeing on every GroupBy field but the last.
4. An event needs only the fields its query reads (:attr:`Partial.fields`: Where, GroupBy and the
   aggregated fields); equal events are added at once with their count (``Partial.add(event,
   count)``), so a tracepoint can aggregate a batch's events before they reach the table
   (engine/core/tracepoints.py rule 7).  The table is the same as with one ``add`` per event.
"""

from __future__ import annotations

import math
import operator
from collections import defaultdict
from operator import itemgetter
from typing import Any, Iterable

from replicast.engine.core.trace_language import TraceQuery, percentile

#: Relative accuracy of percentiles (a DDSketch-style log histogram: every value within 1 %).
GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)


class LogHistogram:
    """Counts of values in buckets ``(γ^(i-1), γ^i]`` (index 0 holds values ≤ 1, negatives included)."""

    @staticmethod
    def index(value: float) -> int:
        return 0 if value <= 1 else math.ceil(math.log(value) / _LOG_GAMMA)

    @staticmethod
    def quantile(buckets: dict, q: float) -> float | None:
        """The ``q`` quantile of what ``buckets`` counted (None if empty), within 1 % (rule 1)."""
        total = sum(buckets.values())
        if not total:
            return None
        rank, seen = q * (total - 1), 0
        for i in sorted(buckets, key=int):
            seen += buckets[i]
            if seen > rank:
                i = int(i)
                return 0.0 if i == 0 else 2 * GAMMA ** i / (GAMMA + 1)
        return None


def new_states(query: TraceQuery) -> list:
    """Empty states for one group (rule 1)."""
    states: list[Any] = []
    for output in query.aggregates:
        name = output.aggregate
        states.append(0 if name in ("COUNT", "SHARE", "SUM") else [0, 0] if name == "AVG"
                      else None if name in ("MIN", "MAX") else {})
    return states


def update(query: TraceQuery, states: list, event: dict, count: int = 1) -> None:
    """Add one event, ``count`` times over (equal events of one batch: rule 4), to a group's states."""
    for i, output in enumerate(query.aggregates):
        name = output.aggregate
        if name in ("COUNT", "SHARE"):
            states[i] += count
            continue
        value = event[output.field]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue                                   # a non-numeric field: nothing to add
        if name == "SUM":
            states[i] += value * count
        elif name == "AVG":
            states[i][0] += value * count
            states[i][1] += count
        elif name == "MIN":
            states[i] = value if states[i] is None or value < states[i] else states[i]
        elif name == "MAX":
            states[i] = value if states[i] is None or value > states[i] else states[i]
        else:
            bucket = LogHistogram.index(value)
            states[i][bucket] = states[i].get(bucket, 0) + count


def merge_states(query: TraceQuery, into: list, other: list) -> None:
    for i, output in enumerate(query.aggregates):
        name, value = output.aggregate, other[i]
        if name in ("COUNT", "SHARE", "SUM"):
            into[i] += value
        elif name == "AVG":
            into[i] = [into[i][0] + value[0], into[i][1] + value[1]]
        elif name in ("MIN", "MAX"):
            if value is not None:
                pick = min if name == "MIN" else max
                into[i] = value if into[i] is None else pick(into[i], value)
        else:
            buckets = dict(into[i])
            for bucket, n in value.items():
                buckets[int(bucket)] = buckets.get(int(bucket), 0) + n
            into[i] = buckets


def merge(query: TraceQuery, tables: Iterable[list]) -> dict[tuple, list]:
    """Tables (``[[group values, states], …]``) added up by group (rule 2)."""
    merged: dict[tuple, list] = {}
    for table in tables:
        for key, states in table:
            key = tuple(key)
            if key not in merged:
                merged[key] = new_states(query)
            merge_states(query, merged[key], states)
    return merged


def finish(query: TraceQuery, merged: dict[tuple, list]) -> list[dict[str, Any]]:
    """Rows of the ``Select`` columns, sorted by group (rule 3)."""
    totals: dict[tuple, int] = defaultdict(int)
    share_at = next((i for i, o in enumerate(query.aggregates) if o.aggregate == "SHARE"), None)
    if share_at is not None:
        for key, states in merged.items():
            totals[key[:-1]] += states[share_at]
    rows = []
    for key in sorted(merged, key=lambda k: tuple(map(str, k))):
        states, group = merged[key], dict(zip(query.group_by, key))
        row, i = {}, 0
        for output in query.select:
            if output.aggregate is None:
                row[output.label] = group[output.field]
                continue
            state, name = states[i], output.aggregate
            i += 1
            if name == "SHARE":
                total = totals[key[:-1]]
                row[output.label] = state / total if total else None
            elif name == "AVG":
                row[output.label] = state[0] / state[1] if state[1] else None
            elif name in ("COUNT", "SUM", "MIN", "MAX"):
                row[output.label] = state
            else:
                row[output.label] = LogHistogram.quantile(state, percentile(name))
        rows.append(row)
    return rows


#: Groups one query's table holds per interval at most; events of further groups are counted, not kept.
MAX_GROUPS = 10_000


class Partial:
    """One query's table on one node, since the last :meth:`take` (rule 1); at most
    :data:`MAX_GROUPS` groups (``GroupBy a.ts`` would otherwise grow with the stream), the events of
    any further group counted in :attr:`overflow`.  What :meth:`add` needs of the query is taken out
    once, here (its conditions' tests, its group's getter, whether it only counts): a tracepoint
    that fires once in hundreds of batches runs from cold caches, where every step costs."""

    __slots__ = ("query", "fields", "groups", "events", "overflow", "_where", "_group", "_counting")

    def __init__(self, query: TraceQuery):
        self.query = query
        #: The event fields the query reads (rule 4).
        self.fields = frozenset([c.field for c in query.where] + list(query.group_by)
                                + [o.field for o in query.aggregates if o.field is not None])
        self.groups: dict[tuple, list] = {}
        self.events = self.overflow = 0
        self._where = tuple((c.field, _OPERATORS[c.op], c.value) for c in query.where)
        fields = query.group_by
        self._group = (itemgetter(*fields) if len(fields) > 1 else
                       (lambda event, f=fields[0]: (event[f],)) if fields else (lambda event: ()))
        #: only COUNT and SHARE: a group's states are counts, each ``+= count``
        self._counting = all(o.aggregate in ("COUNT", "SHARE") for o in query.aggregates)

    def add(self, event: dict, count: int = 1) -> None:
        """``count`` equal events (rule 4)."""
        for field, holds, literal in self._where:
            value = event.get(field)
            if value is None:
                return
            try:
                if not holds(value, literal):
                    return
            except TypeError:                          # a string compared with a number: no match
                return
        key = self._group(event)
        states = self.groups.get(key)
        if states is None:
            if len(self.groups) >= MAX_GROUPS:
                self.overflow += count
                return
            states = self.groups[key] = new_states(self.query)
        if self._counting:
            for i in range(len(states)):
                states[i] += count
        else:
            update(self.query, states, event, count)
        self.events += count

    def take(self) -> list:
        """The table as plain data (rule 2), emptied."""
        table = [[list(key), states] for key, states in self.groups.items()]
        self.groups, self.events = {}, 0
        return table


#: A Where condition's operator (trace_language.OPERATORS) as a function.
_OPERATORS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
              ">=": operator.ge}
