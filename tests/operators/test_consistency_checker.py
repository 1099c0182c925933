"""The library's replica-consistency check catches an operator that depends on arrival order."""

import random

from replicast.operators.base import Operator
from replicast.operators.aggregate import TimeWindowAggregate
from replicast.operators.summaries import Summary
from replicast.operators.testing import check_replica_consistency


class RunningSum(Operator):
    """A user-defined aggregate written the wrong way: a running float ``+=`` per window."""

    def __init__(self):
        super().__init__(1)
        self.totals = {}

    def on_batch(self, port, records):
        for ts, _, value in records:
            self.totals[ts // 1_000_000] = self.totals.get(ts // 1_000_000, 0.0) + value
        return []

    def on_frontier(self, p):
        closed = [k for k in self.totals if (k + 1) * 1_000_000 <= p + 1]
        return [((k + 1) * 1_000_000, self.totals.pop(k)) for k in sorted(closed)]


RECORDS = sorted((i * 10_000, 0, v) for i, v in enumerate([1e16, 1.0, -1e16, 1.0, 0.1, 0.2, 0.3] * 4))


def test_a_running_float_sum_is_reported_as_inconsistent():
    problems = check_replica_consistency(RunningSum, [RECORDS], random.Random(3), trials=30)
    assert problems and "differs" in problems[0]


def test_the_fsum_aggregate_passes_the_same_check():
    factory = lambda: TimeWindowAggregate(1_000_000, 1_000_000, (1,), (Summary("sum", 2, "float"),))  # noqa: E731
    assert check_replica_consistency(factory, [RECORDS], random.Random(3), trials=30) == []
