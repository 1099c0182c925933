"""Seal waits as ``Wait`` events of kind ``seal`` (docs/tracing.md; engine/core/tracepoints.py rule 8),
in the simulator: the keyed aggregate of tests/simulator/test_key_seal_runtimes.py on n0, beside
cpu_a's producer, with cpu_b's 20 ms and cpu_c's 40 ms away (FixedDelays, one way).  A window that a
seal per key closes is one event per output, its ``wait_us`` the seal's arrival less the first
arrival at the aggregate's port of a record at or past the window's end (checked against the
port's arrivals seen from outside the tracer, and by hand from the publications and the delays);
a run without seals (the windows closed by whole-stream punctuations) has none.  Each seal wait
names the key whose seal closed its window.  With a count window (sorted: its records wait in a
sorter), the records a seal per key releases early are sorter waits that end at the seal's arrival,
not at the next punctuation."""

from __future__ import annotations

from collections import Counter

import pytest

from replicast.engine.core import tracepoints
from replicast.engine.core.trace_aggregate import finish, merge
from replicast.engine.core.trace_language import parse
from replicast.engine.node import NodeOptions
from replicast.operators.replica import OperatorReplica
from replicast.simulator.driver import Simulation
from replicast.simulator.network import FixedDelays
from tests.simulator.test_key_seal_runtimes import HOME, NODES, PUNCTUATION_US, RTT_MS, scenario
from tests.simulator.test_runtimes import Collect

# Each test watches the operator replica and the sorter through patched methods.
pytestmark = pytest.mark.pure_python

WAITS = ("From w In Wait GroupBy w.replica, w.kind, w.ts, w.wait_us, w.key "
         "Select w.replica, w.kind, w.ts, w.wait_us, w.key, COUNT Sample 1/1")
TIME_WINDOW = 'window = { kind = "time", size_ms = 1000 }'
COUNT_WINDOW = 'window = { kind = "count", size = 3, slide = 2 }'

PLACEMENT = {"cpu_a": ["n0"], "cpu_b": ["n1"], "cpu_c": ["n2"], "cpu": ["n0"], "load": ["n0"],
             "per_server": ["n0"]}


ONE_WAY_US = {"n0": 0, "n1": 20_000, "n2": 40_000}     # RTT_MS / 2 from each producer to n0
WINDOW_US = 1_000_000


def traced(query, publications: list) -> Simulation:
    """The simulation of ``query`` from the first publication on, WAITS installed on every node."""
    sim = Simulation(query, PLACEMENT, FixedDelays(RTT_MS), {n: i for i, n in enumerate(NODES)},
                     options=NodeOptions(heartbeat_us=500_000, peer_timeout_us=3_000_000,
                                         punctuation_us=PUNCTUATION_US),
                     start_us=publications[0][0], observer=Collect())
    for node in sim.nodes.values():
        tracepoints.install(node.core, "waits", parse(WAITS))
    return sim


def answer(sim: Simulation, publications: list) -> list[dict]:
    """Run ``sim`` over the publications (and 30 s more): WAITS's merged answer."""
    for when, stream, body in publications:
        sim.env.timeout(when - sim.env.now).callbacks.append(
            lambda event, stream=stream, body=body: sim.publish(HOME[stream], stream, body))
    sim.run(publications[-1][0] + 30_000_000)
    tables = [t["waits"] for t in (tracepoints.take(n.core) for n in sim.nodes.values()) if "waits" in t]
    return finish(parse(WAITS), merge(parse(WAITS), tables))


def traced_run(sealed: bool, monkeypatch) -> tuple[list[dict], Counter, list]:
    """The merged answer of WAITS, and (ts, wait) of each output a seal closed, computed outside the
    tracer from when the aggregate's port got its batches, and the publications."""
    query, _, publications = scenario(sealed, period_us=5_000)   # a record every 5 ms from each producer
    sim = traced(query, publications)
    passed: list[tuple[int, int]] = []               # (newest ts so far, when it first came) at load's port
    observed: Counter = Counter()
    on_batch, on_key_seals = OperatorReplica.on_batch, OperatorReplica.on_key_seals

    def batch(self, port, upstream, records, punctuation, key=None):
        if self.operator.kind == "aggregate" and records:
            newest = max(r[0] for r in records)
            if not passed or newest > passed[-1][0]:
                passed.append((newest, sim.env.now))
        return on_batch(self, port, upstream, records, punctuation, key)

    def seals(self, port, upstream, sealed_keys):
        out, forwarded = on_key_seals(self, port, upstream, sealed_keys)
        for record in out:                             # the first arrival at or past its end
            since = next((at for ts, at in passed if ts >= record[0]), None)
            observed[(record[0], record[1], 0 if since is None else sim.env.now - since)] += 1
        return out, forwarded

    monkeypatch.setattr(OperatorReplica, "on_batch", batch)
    monkeypatch.setattr(OperatorReplica, "on_key_seals", seals)
    return answer(sim, publications), observed, publications


def by_hand(publications: list, end: int) -> dict[str, int]:
    """Each producer's seal wait for the window ending at ``end``, from the publications and the
    delays alone: its seal is its first message at or after ``end`` (sources seal with the first
    record of each punctuation interval), arriving after its one-way delay; the window's end passed
    at n0 with the first record at or past it from any producer."""
    first = {server: min(when for when, s, _ in publications if s == stream and when >= end) + ONE_WAY_US[server]
             for stream, server in HOME.items()}
    return {server: at - min(first.values()) for server, at in first.items()}


def test_a_window_closed_by_a_seal_is_a_seal_wait_of_the_time_its_end_had_passed(monkeypatch):
    rows, observed, publications = traced_run(True, monkeypatch)
    seal_rows = [row for row in rows if row["kind"] == "seal"]
    assert {row["replica"] for row in seal_rows} == {"load#0"}
    got = Counter()
    for row in seal_rows:
        got[(row["ts"], row["key"], row["wait_us"])] += row["COUNT"]
    # one event per output a seal closed, each wait what the port's arrivals give, each naming the
    # key (the output's server) whose seal closed it
    assert got == observed
    # n0's and n1's windows close at their seals; n2's, the farthest, at the punctuation its seal came with
    assert {server for _, server, _ in observed} == {"n0", "n1"}
    assert len({ts for ts, _, _ in observed}) >= 5 and len(observed) == 2 * len({ts for ts, _, _ in observed})
    for ts, server, wait in observed:                   # by hand: n1's seal ~20 ms after n0's records passed the end
        assert wait == by_hand(publications, ts)[server], (ts, server, wait)
    assert min(wait for _, server, wait in observed if server == "n1") > 15_000


def test_a_window_closed_by_a_punctuation_has_no_seal_wait(monkeypatch):
    rows, observed, _ = traced_run(False, monkeypatch)
    assert not observed
    assert not [row for row in rows if row["kind"] == "seal"]


def test_a_count_windows_records_a_seal_releases_wait_until_the_seal_not_the_punctuation(monkeypatch):
    """The sorted count window: each record's sorter wait, seen from outside the tracer, runs from
    the port's sorter taking it to the sorter releasing it — at a seal per key of its server
    (``release_key``) for most, at a punctuation for the rest."""
    from replicast.engine.query_file import parse_query
    from replicast.operators.sorter import Sorter
    from tests.simulator.test_key_seal_runtimes import query_text

    _, _, publications = scenario(True, period_us=5_000)
    text = query_text(True)
    assert TIME_WINDOW in text
    query = parse_query(text.replace(TIME_WINDOW, COUNT_WINDOW), "count-seal.toml")
    assert query.coordination.by_name["load"].coordination.value == "seal per key" and query.order_sensitive("load")
    sim = traced(query, publications)
    windows: set[int] = set()                          # the count window's sorters
    added: dict[tuple, int] = {}                       # record -> when its sorter took it
    waited: Counter = Counter()                        # (ts, server, wait, released by)
    on_batch, add, release, release_key = (OperatorReplica.on_batch, Sorter.add, Sorter.release,
                                           Sorter.release_key)

    def batch(self, port, upstream, records, punctuation, key=None):
        if self.operator.kind == "aggregate" and self.sorters:
            windows.update(map(id, self.sorters))
        return on_batch(self, port, upstream, records, punctuation, key)

    def adding(self, records):
        if id(self) in windows:
            for record in records:
                added.setdefault(record, sim.env.now)
        return add(self, records)

    def released(by):
        def releasing(self, *args):
            out = (release if by == "punctuation" else release_key)(self, *args)
            if id(self) in windows:
                for record in out:
                    waited[(record[0], record[1], sim.env.now - added.pop(record), by)] += 1
            return out
        return releasing

    monkeypatch.setattr(OperatorReplica, "on_batch", batch)
    monkeypatch.setattr(Sorter, "add", adding)
    monkeypatch.setattr(Sorter, "release", released("punctuation"))
    monkeypatch.setattr(Sorter, "release_key", released("seal"))
    rows = answer(sim, publications)
    got = Counter()
    for row in rows:
        if row["kind"] == "sorter":
            assert row["replica"] == "load#0"
            got[(row["ts"], row["key"], row["wait_us"])] += row["COUNT"]
    assert got == Counter({(ts, server, wait): n for (ts, server, wait, _), n in waited.items()})
    by_seal = [wait for (_, _, wait, by) in waited if by == "seal"]
    by_punctuation = [wait for (_, _, wait, by) in waited if by == "punctuation"]
    assert len(by_seal) > 100 and by_punctuation      # seals released most records, punctuations the rest
    # a record its server's seal released waited less than one punctuation interval
    assert max(by_seal) < PUNCTUATION_US
    assert sim.nodes["n0"].core.statistics()["key_seals"] > 0
