"""The Done-when of replica management on real TCP (docs/placement.md, "A server that restarted"): the
live Fig. 1 cluster with the coordinator on (``placement = "min-cost"``, entry points pinned to two
servers each, as ``examples/cluster-fig1-placement.toml``), and each node in turn, after a GC round
has happened (checked in the coordinator's log), is killed with SIGKILL, restarted as docs/deploy.md
says, and — once the coordinator has restored what it ran there — killed with SIGKILL for good.
Every application must receive exactly ``replay``'s reference and close.  The runs themselves live
in :mod:`tests.integration.coordinator_kills` (``app``'s runs pin the applications to two nodes: its
docstring says why).

One run per node (the two kills in one run), about two minutes each: the sweep is marked slow, and CI
runs two nodes of it (``VICTIMS``); ``REPLICAST_KILL_SWEEP=all`` runs every node, and
``python3 -m tests.integration.coordinator_kills`` runs every node killed for good and killed then
restarted, in separate runs, and prints the table.
"""

from __future__ import annotations

import os

import pytest

from replicast.engine.query_file import load_query
from tests.integration.coordinator_kills import (ALL_NODES, Delivery, Mode, Outcome, describe, differences,
                                                 reference_outputs, run_one)
from tests.integration.helpers import ROOT

SERVERS = [f"n{i}" for i in range(1, 7)]

#: CI kills two nodes (the coordinator with the sinks, and one of the six source servers, which also
#: host operators) to keep the suite near 15 minutes on two cores; the whole sweep is
#: ``REPLICAST_KILL_SWEEP=all python3 -m pytest tests/integration/test_coordinator_kills.py``.
VICTIMS = list(ALL_NODES) if os.environ.get("REPLICAST_KILL_SWEEP") == "all" else ["app", "n1"]


@pytest.mark.slow
@pytest.mark.parametrize("victim", VICTIMS)
def test_each_node_killed_and_restarted_then_killed_for_good_with_the_coordinator(tmp_path, victim):
    outcome = run_one(tmp_path, victim, Mode.RESTART_THEN_FOR_GOOD)
    print(describe(outcome))
    assert outcome.error is None, outcome.error
    assert outcome.gc_before_kill > 0
    assert outcome.exact, describe(outcome)


def test_the_sweep_tells_missing_duplicated_and_unclosed_output_from_exact():
    """The comparison the sweep reports: a record dropped, one received twice and an application that
    never closed each show in the verdict; the replay's own output is exact."""
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    delivery = Delivery({f"{kind}_{s}": [] for s in SERVERS for kind in ("cpu", "ping")})
    for tick in range(30):
        for n, server in enumerate(SERVERS):
            ts = 1_000_000 + tick * 100_000
            delivery.published[f"cpu_{server}"].append({"ts": ts, "server": server, "load": 0.9})
            delivery.published[f"ping_{server}"].append({"ts": ts, "src": server, "dst": SERVERS[(n + 1) % 6],
                                                         "rtt_ms": float(10 + tick)})
    nothing = differences(query, delivery)          # nothing received yet: everything missing
    assert all(d.missing == d.reference > 0 for d in nothing.values()), nothing
    reference = reference_outputs(query, delivery.published)
    for app, spec in query.applications.items():
        names = query.schemas[spec.input].names
        delivery.arrivals[app] = [dict(zip(["ts", *names], record)) for record in reference[app]]
    delivery.closed.update(query.applications)
    outcome = Outcome("n2", Mode.FOR_GOOD, 1.0, differences=differences(query, delivery), closed=delivery.closed)
    assert outcome.exact and outcome.verdict() == "exact"
    alerts = delivery.arrivals["alerts"]
    delivery.arrivals["alerts"] = alerts[1:] + alerts[-1:]            # the first lost, the last twice
    outcome = Outcome("n2", Mode.FOR_GOOD, 1.0, differences=differences(query, delivery),
                      closed=delivery.closed - {"rtt_stats"})
    assert not outcome.exact
    assert outcome.verdict() == "missing 1; duplicated 1; never closed: rtt_stats", outcome.verdict()
    delivery.arrivals["alerts"] = alerts[1:] + alerts[:1]             # all there, the first last
    outcome = Outcome("n2", Mode.FOR_GOOD, 1.0, differences=differences(query, delivery), closed=delivery.closed)
    assert outcome.verdict() == "alerts out of order", outcome.verdict()

