"""Deployments for a scenario: which servers host the replicas at degree ``kmax``.

The result is a manual placement (:func:`engine.node.configure`'s input): every stream, operator
and application → its servers in replica-index order.

* **Entry points** (§II-B): replica 0 runs on the source's server; with ``entry_replicas = "kmax"``
  the other ``kmax − 1`` are placed like operator replicas, and the source publishes to all of them.
* **manual**: the scenario lists servers per operator; degree ``k`` uses the first ``k``.
* **random** (Fig. 4, "random"): each operator gets a seeded random order of the servers and degree
  ``k`` uses its first ``k``, so a run at ``k + 1`` adds one replica to the run at ``k`` rather than
  moving the others — degrees are compared on the same base deployment.
* **min-cost** (Alg. 5) belongs to the placement package; it is refused until that exists.

Applications are not replicated: a named server, or a seeded random one.
"""

from __future__ import annotations

import random
import zlib

from operators.query import Query
from simulator.scenario import Scenario, ScenarioError
from simulator.sources import Source


def _order(scenario: Scenario, name: str, servers: list[str]) -> list[str]:
    rng = random.Random(zlib.crc32(f"{scenario.seed}/{name}".encode()))
    order = list(servers)
    rng.shuffle(order)
    return order


def deploy(scenario: Scenario, query: Query, sources: list[Source], servers: list[str], kmax: int) -> dict[str, list[str]]:
    where = f"{scenario.path}: [deployment]"
    if scenario.deployment == "min-cost":
        raise ScenarioError(f"{where}: kind = \"min-cost\" needs the placement package (Alg. 5), which is not "
                            f"available yet; use \"random\" or \"manual\"")
    if kmax > len(servers):
        raise ScenarioError(f"{where}: kmax = {kmax} needs at least {kmax} servers, the scenario has {len(servers)}")
    placement: dict[str, list[str]] = {}
    home = {s.stream: s.server for s in sources}
    for stream in query.streams:
        first = home[stream]
        k = kmax if scenario.entry_replicas == "kmax" else 1
        rest = [s for s in _order(scenario, stream, servers) if s != first]
        placement[stream] = [first, *rest[:k - 1]]
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
        server = scenario.applications.get(app) or _order(scenario, app, servers)[0]
        if server not in servers:
            raise ScenarioError(f"{where}: application '{app}' on {server!r}, which is not a server of this scenario")
        placement[app] = [server]
    extra = set(scenario.manual) - set(query.operators)
    if extra:
        raise ScenarioError(f"{where}: manual lists {sorted(extra)}, which are not operators of the query")
    return placement
