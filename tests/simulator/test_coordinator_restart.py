"""A server restarted with the coordinator on gets back what the coordinator had placed there
(docs/placement.md, "A server that restarted").

The hunt's cluster (tests/simulator/hunt.py: the Fig. 1 query on 16 Seattle servers, kmax = kmin = 2,
garbage collection every 30 s): the one server that runs operator replicas and no entry point or
application crashes at 70 s and restarts at 80 s with only its own configuration (nothing: its
replicas were the coordinator's).  The coordinator, seeing from the restarted server's report that it
lacks what the view places there, deploys those replicas there again and connects their stream
replicas (``restore`` decisions), so the deployment — and the fault tolerance it was chosen for
(placement/tolerance.py) — is back: every operator has kmin replicas again, on the servers it had.
Before, the coordinator only dropped them from its view: the cluster ran on with one replica of each
of them, one crash away from losing output.

The second test restarts a server that runs entry points: with one replica each (pinned beside its
source) the gap in its streams could only be treated as lost downstream; with kmax replicas each
(``entry_replicas = "kmax"``) the restarted one joins from its live peer and nothing is lost.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault
from tests.simulator.hunt import base_scenario, equals_reference, pinned_servers

S = 1_000_000
CRASH_S, RESTART_S = 70, 80


@functools.cache
def _run(victim: str | None, entry_replicas: str = "1"):
    scenario = replace(base_scenario(2, 2), entry_replicas=entry_replicas)
    if victim is not None:
        scenario.faults.extend([Fault("crash", (victim,), CRASH_S * S), Fault("restart", (victim,), RESTART_S * S)])
    prepared = Prepared(scenario)
    return prepared, run(prepared, 2, keep_records=True)


def _operator_replicas_on(summary: dict, query, server: str) -> set[str]:
    return {f"{name}#{i}" for name, servers in summary["placement"].items() if name in query.operators
            for i, s in enumerate(servers) if s == server}


def _operator_only_server() -> str:
    prepared, result = _run(None)
    placement, pinned = result.summary["placement"], pinned_servers(prepared.scenario)
    servers = sorted({s for name, nodes in placement.items() if name in prepared.query.operators for s in nodes} - pinned)
    assert servers, placement
    return servers[0]


def _coordinating(summary: dict) -> dict:
    (counters,) = summary["coordinator"]["coordinators"].values()
    return counters


def test_a_restarted_server_gets_its_replicas_back_and_the_output_is_exact():
    victim = _operator_only_server()
    prepared, result = _run(victim)
    assert equals_reference(prepared, result) == (0, 0)
    lost = _operator_replicas_on(result.summary, prepared.query, victim)
    restored = {target for _, kind, reason, target, _ in result.recorder.decisions
                if reason == "restore" and kind == "deploy"}
    assert lost and restored == lost
    # The deployment is the one chosen before the crash: the same cost as the same run without a fault.
    _, baseline = _run(None)
    assert _coordinating(result.summary)["cost"] == pytest.approx(_coordinating(baseline.summary)["cost"], rel=0.01)


def test_a_restarted_entry_point_server_loses_nothing_its_sources_did_not_publish():
    """The server of ``cpu_a``/``ping_a`` (their replica 0, beside their sources) restarts.  Each entry
    point has kmax replicas (``entry_replicas = "kmax"``, as a cluster file's pin to several servers):
    the sources publish to the live peer meanwhile, the restarted replica joins from it
    (docs/lifecycle.md) and the unions' ports advance over the downtime, so every application
    receives exactly the replay of everything published — the downtime's records included.  With one
    entry replica each, windows over the gap were declared lost (``rtt_stats`` lacked 111 of 1,759
    records, ``load_trends`` 342 of 441)."""
    victim = "seattle-2"
    prepared, result = _run(victim, "kmax")
    placement = result.summary["placement"]
    assert all(len(placement[s]) == 2 for s in prepared.query.streams) and placement["cpu_a"][0] == victim
    published = [r for r in result.inputs["cpu_a"] if CRASH_S * S < r[0] - prepared.start < RESTART_S * S]
    assert published                                       # the downtime had records to carry
    assert equals_reference(prepared, result) == (0, 0)
