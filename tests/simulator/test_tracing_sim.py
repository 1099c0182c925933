"""Trace queries in the simulator: the SimPy driver runs the same node cores, so the same
tracepoints answer the same queries over simulated time (docs/tracing.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import replicast.simulator.run as simulator_run
from replicast.engine.core import tracepoints
from replicast.engine.core.trace_aggregate import finish, merge
from replicast.engine.core.trace_language import parse
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import load_scenario

DATA = Path(__file__).resolve().parent / "data"
SHARE = ('From a In Arrival Where a.outcome = "pass" GroupBy a.replica, a.port, a.upstream '
         "Select a.replica, a.port, a.upstream, COUNT, SHARE Sample 1/1")
DELIVER = "From d In Deliver GroupBy d.app, d.path Select d.app, d.path, COUNT, MAX(d.latency_us) Sample 1/1"


def test_a_simulated_run_answers_trace_queries_at_its_node_cores(monkeypatch):
    sims = []

    def traced(*args, **kwargs):                      # install the queries on every core before the run
        sim = simulator_run_Simulation(*args, **kwargs)
        for node in sim.nodes.values():
            tracepoints.install(node.core, "share", parse(SHARE))
            tracepoints.install(node.core, "deliver", parse(DELIVER))
        sims.append(sim)
        return sim
    simulator_run_Simulation = simulator_run.Simulation
    monkeypatch.setattr(simulator_run, "Simulation", traced)
    scenario = replace(load_scenario(DATA / "chain.toml"), duration_s=120)
    result = run(Prepared(scenario), 2, keep_records=True)
    tables = [tracepoints.take(node.core) for node in sims[0].nodes.values()]
    deliveries = finish(parse(DELIVER), merge(parse(DELIVER), [t["deliver"] for t in tables if "deliver" in t]))
    assert sum(row["COUNT"] for row in deliveries) == result.summary["delivered"] > 0
    assert all(" > " in row["path"] for row in deliveries)     # the simulator's provenance paths
    shares = finish(parse(SHARE), merge(parse(SHARE), [t["share"] for t in tables if "share" in t]))
    by_port: dict = {}
    for row in shares:
        by_port.setdefault((row["replica"], row["port"]), []).append(row["SHARE"])
    assert by_port and all(abs(sum(values) - 1) < 1e-9 for values in by_port.values())
    assert any(len(values) == 2 for values in by_port.values())   # k = 2: both upstream replicas win some
