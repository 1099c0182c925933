"""Placement in simulations (§V): min-cost deployment from the trace, and the coordinator on the nodes.

* ``deployment = "min-cost"``: before the run, Alg. 5 (:func:`placement.deployment.min_cost`,
  relaxation + phases + refinement) over the scenario's servers, with latencies from the trace
  window the run covers (per-pair median RTT of up to :data:`FRAMES` frames, halved; Vivaldi fills
  pairs never measured) and the workload estimated from the query and the sources' periods.  It
  plays the part of the coordinator's initial deployment (a live cluster's coordinator computes it
  from measured RTTs once the nodes have reported), so the comparison with ``random`` starts at once.
* ``[coordinator]``: every server's node core takes part in placement
  (:mod:`engine.core.coordination`): the elected server (smallest name among those it reaches) runs
  the coordinator core, reports and decisions travel over the simulated network like every other
  message, and its decisions (garbage collection, revival) are control messages the named nodes
  apply.  The coordinator adopts the deployment the run starts with, whatever its kind.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable

import numpy as np

from replicast.engine.node import CoordinationSetup
from replicast.engine.placement_config import CoordinatorSettings
from replicast.engine.placement_config import parse_coordinator as parse_settings
from replicast.operators.query import Query
from replicast.placement.constraints import DeployConfig
from replicast.placement.deployment import min_cost, random_deployment
from replicast.placement.errors import PlacementError
from replicast.placement.from_trace import network_from_frames
from replicast.placement.model import Network, Workload
from replicast.placement.workload import from_query
from replicast.simulator.scenario import ScenarioError

#: Trace frames (evenly spaced over the run's window) the min-cost deployment's latencies come from.
FRAMES = 60
_S = 1_000_000


def parse_coordinator(table: dict, where: str) -> CoordinatorSettings:
    """A scenario's ``[coordinator]`` table: the keys of a cluster file's, less those a scenario
    gives elsewhere (kmax, ``[deployment]``'s alpha and dmin_ms, pins from sources), plus
    ``compare_static``."""
    return parse_settings(table, where, ScenarioError)


# -- the workload and the network the coordinator sees ----------------------------------------------
def workload(query: Query, sources: list, servers: list[str], pins: dict[str, str]) -> Workload:
    """The query's workload before anything is measured: every source stream's rate from its period
    (one record per period; ``events`` sources: their records over their span), entry points and
    applications pinned to ``pins`` (name → server)."""
    rates: dict[str, float] = {}
    for source in sources:
        if source.kind == "events" and len(source.records) > 1:
            span = (source.records[-1][0] - source.records[0][0]) / _S
            rate = len(source.records) / span if span > 0 else float(len(source.records))
        else:
            rate = _S / source.period_us
        rates[source.stream] = rates.get(source.stream, 0.0) + rate
    index = {s: i for i, s in enumerate(servers)}
    return from_query(query, {name: index[server] for name, server in pins.items()}, rates=rates)


def trace_network(trace: Any, servers: dict[str, int], start_us: int, end_us: int, origin_us: int,
                  seed: int) -> Network:
    """The network of ``servers`` over the window ``[start_us, end_us)`` of the run (trace time =
    simulated time − ``origin_us``)."""
    first = trace.frame_index(max(0, start_us - origin_us))
    last = trace.frame_index(max(0, end_us - origin_us))
    picks = np.unique(np.linspace(first, max(first, last), min(FRAMES, last - first + 1)).astype(int))
    columns = list(servers.values())
    frames = np.stack([trace.frame(int(k))[columns][:, columns] for k in picks])
    rng = random.Random(zlib.crc32(f"{seed}/coordinates".encode()))
    network, _ = network_from_frames(list(servers), frames, rng, rounds=1000)
    return network


def min_cost_placement(network: Network, load: Workload, kmax: int, alpha: float, dmin_ms: float,
                       where: str) -> dict[str, list[str]]:
    """Alg. 5 at ``kmax`` (with refinement) as a manual placement: name → servers by replica index."""
    try:
        deployment = min_cost(network, load, DeployConfig(kmax=kmax, alpha=alpha, dmin_ms=dmin_ms))
    except PlacementError as error:
        raise ScenarioError(f"{where}: min-cost deployment: {error}") from None
    return deployment.placement(network.servers)


def random_placement(network: Network, load: Workload, kmax: int, alpha: float, dmin_ms: float, seed: int,
                     where: str) -> dict[str, list[str]]:
    """§VI-E's random baseline: the min-cost deployment at kmax = 1 (relaxation and refinement: "we
    started from an optimal, non-replicated deployment"), then each further replica on a uniformly
    random server of Alg. 5's candidates (same alpha and dmin).  The choices come from one seeded
    generator in phase order, so the deployment at ``kmax + 1`` adds to the one at ``kmax``."""
    rng = random.Random(zlib.crc32(f"{seed}/random-from-min-cost".encode()))
    try:
        base = min_cost(network, load, DeployConfig(kmax=1, alpha=alpha, dmin_ms=dmin_ms))
        deployment = random_deployment(network, load, DeployConfig(kmax=kmax, alpha=alpha, dmin_ms=dmin_ms), rng,
                                       start=base)
    except PlacementError as error:
        raise ScenarioError(f"{where}: random-from-min-cost deployment: {error}") from None
    return deployment.placement(network.servers)


def node_setups(spec: CoordinatorSettings, servers: list[str], estimate: Workload, kmax: int, alpha: float,
                dmin_ms: float, seed: int) -> Callable[[str], CoordinationSetup]:
    """Each node's :class:`~engine.core.coordination.CoordinationSetup` (its own seeded ``random.Random``)."""
    config = spec.config(DeployConfig(kmax=kmax, alpha=alpha, dmin_ms=dmin_ms))

    def setup(node: str) -> CoordinationSetup:
        rng = random.Random(zlib.crc32(f"{seed}/coordinator/{node}".encode()))
        return CoordinationSetup(tuple(servers), estimate, rng, config, spec.report_us)

    return setup
