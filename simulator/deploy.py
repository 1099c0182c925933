"""Deployments for a scenario: which servers host the replicas at degree ``kmax``.

The result is a manual placement (:func:`engine.node.configure`'s input): every stream, operator
and application → its servers in replica-index order.

* **Entry points** (§II-B): replica 0 runs on the source's server; with ``entry_replicas = "kmax"``
  the other ``kmax − 1`` are placed like operator replicas, and the source publishes to all of them.
* **manual**: the scenario lists servers per operator; degree ``k`` uses the first ``k``.
* **random** (Fig. 4, "random"): each operator gets a seeded random order of the servers and degree
  ``k`` uses its first ``k``, so a run at ``k + 1`` adds one replica to the run at ``k`` rather than
  moving the others — degrees are compared on the same base deployment.
* **min-cost** (Alg. 5, :mod:`simulator.coordinator`): relaxation, ``kmax`` phases and refinement
  over the trace's latencies, with ``[deployment]``'s ``alpha`` and ``dmin_ms``; entry points'
  replica 0 stays at its source's server (with ``entry_replicas = "kmax"`` the others are placed as
  above: Alg. 5 leaves them where they are, like a cluster file's pin to several servers) and
  applications where they are put.
* **random-from-min-cost** (Fig. 4(a), "random", :func:`simulator.coordinator.random_placement`):
  §VI-E's baseline — min-cost at kmax = 1, every further replica on a random candidate server of
  Alg. 5 (same ``alpha`` and ``dmin_ms``), nested across kmax like ``random``.

Applications are not replicated: a named server, or a seeded random one.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable

from replicast.operators.query import Query
from replicast.simulator.scenario import Scenario, ScenarioError
from replicast.simulator.sources import Source

#: Deployment kinds computed by the placement package over the trace's latencies.
PLACED = ("min-cost", "random-from-min-cost")


def _order(scenario: Scenario, name: str, servers: list[str]) -> list[str]:
    rng = random.Random(zlib.crc32(f"{scenario.seed}/{name}".encode()))
    order = list(servers)
    rng.shuffle(order)
    return order


def deploy(scenario: Scenario, query: Query, sources: list[Source], servers: list[str], kmax: int,
           network: Callable[[], Any] | None = None) -> dict[str, list[str]]:
    """The placement at ``kmax``; ``network()`` gives min-cost its :class:`placement.model.Network`."""
    where = f"{scenario.path}: [deployment]"
    if scenario.deployment in PLACED and network is None:
        raise ScenarioError(f"{where}: kind = \"{scenario.deployment}\" needs the trace's network")
    if kmax > len(servers):
        raise ScenarioError(f"{where}: kmax = {kmax} needs at least {kmax} servers, the scenario has {len(servers)}")
    placement: dict[str, list[str]] = {}
    home = {s.stream: s.server for s in sources}
    for stream in query.streams:
        first = home[stream]
        k = kmax if scenario.entry_replicas == "kmax" else 1
        rest = [s for s in _order(scenario, stream, servers) if s != first]
        placement[stream] = [first, *rest[:k - 1]]
    for app in query.applications:
        server = scenario.applications.get(app) or _order(scenario, app, servers)[0]
        if server not in servers:
            raise ScenarioError(f"{where}: application '{app}' on {server!r}, which is not a server of this scenario")
    if scenario.deployment in PLACED:
        from replicast.simulator.coordinator import min_cost_placement, random_placement, workload
        pins = {name: placement[name][0] for name in query.streams}
        pins.update({app: scenario.applications.get(app) or _order(scenario, app, servers)[0]
                     for app in query.applications})
        estimate = workload(query, sources, servers, pins)
        if scenario.deployment == "random-from-min-cost":
            placed = random_placement(network(), estimate, kmax, scenario.alpha, scenario.dmin_ms, scenario.seed, where)
        else:
            placed = min_cost_placement(network(), estimate, kmax, scenario.alpha, scenario.dmin_ms, where)
        # Alg. 5 placed replica 0 of each entry point; with entry_replicas = "kmax" the others run as above.
        return {**placed, **{stream: placement[stream] for stream in query.streams}}
    for name in query.operators:
        if scenario.deployment == "manual":
            chosen = scenario.manual.get(name)
            if chosen is None:
                raise ScenarioError(f"{where}: manual deployment lists no servers for operator {name!r}")
            if len(chosen) < kmax:
                raise ScenarioError(f"{where}: manual '{name}' lists {len(chosen)} servers, kmax = {kmax} needs {kmax}")
            unknown = [s for s in chosen if s not in servers]
            if unknown:
                raise ScenarioError(f"{where}: manual '{name}': {unknown} are not servers of this scenario")
            placement[name] = list(chosen[:kmax])
        else:
            placement[name] = _order(scenario, name, servers)[:kmax]
    for app in query.applications:
        placement[app] = [scenario.applications.get(app) or _order(scenario, app, servers)[0]]
    extra = set(scenario.manual) - set(query.operators)
    if extra:
        raise ScenarioError(f"{where}: manual lists {sorted(extra)}, which are not operators of the query")
    return placement
