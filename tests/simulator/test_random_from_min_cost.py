"""The paper's random baseline (§VI-E, Fig. 4(a)) as a simulator deployment: min-cost at kmax = 1,
further replicas on random candidate servers of Alg. 5, nested across kmax."""

from dataclasses import replace
from pathlib import Path

import numpy as np

from replicast.simulator.deploy import deploy
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import load_scenario

DATA = Path(__file__).parent / "data"


def placements(kind: str, ks=(1, 2, 3, 4)):
    prepared = Prepared(replace(load_scenario(DATA / "placement.toml"), deployment=kind))
    servers = list(prepared.servers)
    return prepared, {k: deploy(prepared.scenario, prepared.query, prepared.sources, servers, k,
                                prepared.placement_network) for k in ks}


def test_it_starts_from_min_cost_and_adds_random_replicas_nested_across_kmax():
    prepared, rand = placements("random-from-min-cost")
    _, best = placements("min-cost")
    operators = list(prepared.query.operators)
    assert rand[1] == best[1]                                  # the same optimal non-replicated start
    for k in (2, 3, 4):
        for op in operators:
            assert rand[k][op][:k - 1] == rand[k - 1][op]      # kmax + 1 adds to kmax, moves nothing
            assert len(set(rand[k][op])) == k
        for name in (*prepared.query.streams, *prepared.query.applications):
            assert rand[k][name] == best[k][name]              # entry points and applications stay put
    assert any(rand[4][op] != best[4][op] for op in operators)
    # Random candidates still keep peers more than dmin apart (Alg. 5's constraint, the smaller one-way delay).
    network = prepared.placement_network()
    index = {s: i for i, s in enumerate(network.servers)}
    for op in operators:
        chosen = [index[s] for s in rand[4][op]]
        for a in chosen:
            for b in chosen:
                if a != b:
                    assert min(network.latency_ms[a, b], network.latency_ms[b, a]) > prepared.scenario.dmin_ms


def test_a_random_from_min_cost_run_costs_more_than_min_cost():
    prepared = Prepared(replace(load_scenario(DATA / "placement.toml"), duration_s=120))
    rand = run(prepared, 3, deployment="random-from-min-cost").summary
    best = run(prepared, 3).summary
    assert rand["delivered"] == best["delivered"] > 0
    assert rand["network_cost"] > best["network_cost"]
    assert np.isfinite(rand["latency_ms"]["p99"])
