"""Aggregate over count windows: order-sensitive (§IV-F, Algorithm 4 lines 7–15).

Per group, windows cover records ``1..size``, ``slide+1..slide+size``, … in the stream's unique
``(ts, canonical bytes)`` order; a window closes when it holds ``size`` records and its output
timestamp is the timestamp of its last record.  Which records share a window depends on order, so
this operator declares ``order_sensitive``: the planner puts a :class:`~operators.sorter.Sorter`
in front of it (Alg. 4 lines 1–6), and every replica then sees the same sequence.  Windows that
never fill emit nothing, also when the stream closes.
"""

from __future__ import annotations

from typing import Any

from replicast.operators.base import Operator
from replicast.operators.record import CLOSED, Record
from replicast.operators.summaries import Summary, group_key_function, summarise


class CountWindowAggregate(Operator):
    kind = "aggregate"
    order_sensitive = True

    def __init__(self, size: int, slide: int, group_by: tuple[int, ...], summaries: tuple[Summary, ...]):
        super().__init__(1)
        if size <= 0 or slide <= 0:
            raise ValueError(f"count window size and slide must be positive, got {size} and {slide}")
        self.size, self.slide = size, slide
        self.group_by, self.summaries = group_by, summaries
        self.group_key = group_key_function(group_by)
        # group key -> [records seen, open windows (each a list of records)]
        self.groups: dict[tuple, list] = {}

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        out = []
        for record in records:
            group = self.group_key(record)
            state = self.groups.get(group)
            if state is None:
                state = self.groups[group] = [0, []]
            if state[0] % self.slide == 0:          # record number state[0]+1 starts a window
                state[1].append([])
            state[0] += 1
            for window in state[1]:
                window.append(record)
            if state[1] and len(state[1][0]) == self.size:
                try:
                    out.append(summarise(record[0], group, self.summaries, state[1].pop(0)))
                except ArithmeticError as error:     # not representable: dropped, counted (summaries)
                    self.count_error((record[0], *group), error)
        return self.vouch(out)

    def rebuild(self, frontiers: list[int]) -> int:
        """Which records share a window depends on every record since the stream began: a replica
        that lost any input can never vouch for a window again (it stays silent; its peers, or a
        later snapshot from one, carry the output)."""
        self.suppress_through = CLOSED
        return CLOSED

    def snapshot_state(self) -> Any:
        return [[list(g), n, [[list(r) for r in w] for w in windows]] for g, (n, windows) in self.groups.items()]

    def restore_state(self, state: Any) -> None:
        self.groups = {tuple(g): [n, [[tuple(r) for r in w] for w in windows]] for g, n, windows in state}
