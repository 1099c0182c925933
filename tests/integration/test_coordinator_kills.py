"""The Done-when of replica management on real TCP (docs/placement.md, "A server that restarted"): the
live Fig. 1 cluster with the coordinator on (``placement = "min-cost"``, entry points pinned to two
servers each, as ``examples/cluster-fig1-placement.toml``), and each node in turn, after a GC round
has happened (checked in the coordinator's log), is killed with SIGKILL, restarted as docs/deploy.md
says, and — once the coordinator has restored what it ran there — killed with SIGKILL for good.
Every application must receive exactly ``replay``'s reference and close.  The runs themselves live
in :mod:`tests.integration.coordinator_kills` (``app``'s runs pin the applications to two nodes: its
docstring says why).

One run per node (the two kills in one run), about two minutes each: the sweep is marked slow, and CI
runs three nodes of it (``VICTIMS``); ``REPLICAST_KILL_SWEEP=all`` runs every node, and
``python3 -m tests.integration.coordinator_kills`` runs every node killed for good and killed then
restarted, in separate runs, and prints the table.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.coordinator_kills import ALL_NODES, Mode, describe, run_one

#: CI kills three nodes (the coordinator with the sinks, and two of the six source servers, which also
#: host operators) to keep the suite near 15 minutes on two cores; the whole sweep is
#: ``REPLICAST_KILL_SWEEP=all python3 -m pytest tests/integration/test_coordinator_kills.py``.
VICTIMS = list(ALL_NODES) if os.environ.get("REPLICAST_KILL_SWEEP") == "all" else ["app", "n1", "n4"]


@pytest.mark.slow
@pytest.mark.parametrize("victim", VICTIMS)
def test_each_node_killed_and_restarted_then_killed_for_good_with_the_coordinator(tmp_path, victim):
    outcome = run_one(tmp_path, victim, Mode.RESTART_THEN_FOR_GOOD)
    print(describe(outcome))
    assert outcome.error is None, outcome.error
    assert outcome.gc_before_kill > 0
    assert outcome.exact, describe(outcome)
