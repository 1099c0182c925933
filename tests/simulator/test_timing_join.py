"""The timing tier's Join over columns (simulator/timing_join.py) gives the pairs the operator's own
code gives — the same pairs in the same order, and the same records — for all of a window's left
rows then all of its right rows: on hand-made rows (ties in timestamp, a key only one side has,
pairs exactly w − 1 and w apart) and on a window of the Fig. 1 query over the shipped trace."""

from __future__ import annotations

import random

import numpy as np

from replicast.engine.query_file import parse_query
from replicast.examples import example_path
from replicast.simulator.run import Prepared
from replicast.simulator.scenario import load_scenario
from replicast.simulator.timing_content import Rows, windows
from replicast.simulator.timing_join import keyed_pairs, pair_records

QUERY = """
[[streams]]
name = "load"
fields = { server = "str", load = "float" }

[[streams]]
name = "ping"
fields = { src = "str", dst = "str", rtt_ms = "float" }

[[operators]]
name = "correlate"
kind = "join"
inputs = ["load", "ping"]
window_ms = 10
on = "load.server == ping.dst"

[[applications]]
name = "app"
input = "correlate"
"""


def by_operator(operator, left: Rows, right: Rows) -> tuple[list[int], list[int], list]:
    """The operator's pairs as the timing tier made them before (rows tagged with their number)."""
    width = len(left.records[0]) + 1 if left.records else 0
    pairs = operator.on_batch(0, left.tagged()) + operator.on_batch(1, right.tagged())
    return ([p[width - 1] for p in pairs], [p[-1] for p in pairs],
            [(p[0], *p[1:width - 1], *p[width:-1]) for p in pairs])


def rows(records: list) -> Rows:
    return Rows(records, np.array([r[0] for r in records], np.int64))


def check(query, name: str, left: Rows, right: Rows) -> int:
    got = keyed_pairs(query.new_operator(name), left, right)
    assert got is not None, "not taken over columns"
    want_left, want_right, want_records = by_operator(query.new_operator(name), left, right)
    assert got[0].tolist() == want_left and got[1].tolist() == want_right
    assert pair_records(left.records, right.records, *got) == want_records
    return len(want_left)


def test_hand_made_rows():
    query = parse_query(QUERY)
    w = 10_000
    rng = random.Random(5)
    servers = ["a", "b", "c"]
    load = [(ts, rng.choice(servers), float(i)) for i, ts in enumerate(sorted(rng.randrange(0, 60_000, 1000)
                                                                            for _ in range(60)))]
    load += [(load[5][0], load[5][1], -1.0), (30_000, "a", 7.0), (30_000, "a", 8.0)]   # ties, out of ts order
    ping = [(ts, "x", rng.choice(servers + ["nowhere"]), 1.0) for ts in range(0, 60_000, 700)]
    ping += [(30_000 + w - 1, "x", "a", 2.0), (30_000 + w, "x", "a", 3.0), (30_000 - w + 1, "x", "a", 4.0),
             (30_000 - w, "x", "a", 5.0)]
    assert check(query, "correlate", rows(load), rows(ping)) > 100


def test_a_window_of_the_fig1_query():
    scenario = load_scenario(example_path("sim-fig1.toml"))
    scenario.duration_s = 600
    prepared = Prepared(scenario)
    window = next(windows(prepared, 300_000_000))
    spec = prepared.query.operators["correlate"]
    assert check(prepared.query, "correlate", window.rows[spec.inputs[0]], window.rows[spec.inputs[1]]) > 500
