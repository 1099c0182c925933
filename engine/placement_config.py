"""A cluster file's placement coordinator (§V): ``placement = "min-cost"`` and the ``[coordinator]`` table.

* ``placement = "min-cost"``: nobody places operators by hand.  Every node runs the entry points and
  applications ``[coordinator] pin`` gives it (``pin = { stream_or_app = "node" }``, or a list of
  nodes for several replicas: ``cpu_n1 = ["n1", "n2"]``; anything not pinned goes to the first node
  of the file) and reports to the elected coordinator (the live node
  with the smallest name); the coordinator deploys the operators, ``kmax`` replicas each by Alg. 5
  over the RTTs the nodes measured, once every node has reported and every pair has an RTT (or
  ``settle_s`` after it was elected).
* ``[coordinator]`` with a manual ``[placement]`` table: the nodes start as placed and the
  coordinator adopts that deployment.
* Either way the coordinator then garbage-collects (Alg. 6: every ``gc_period_s`` while the cost
  exceeds ``theta``, never below ``kmin`` replicas) and revives (§V-C: inputs all later than
  ``revival_threshold_s``).  A latency objective (``latency_within_percent``: each application within
  that % of the static deployment; ``latency_bound_ms``: within that many ms; each a p99 over the last
  ``latency_window_s``) stops GC before it and revives when it is broken (placement/objective.py).  Every key is checked; a mistake is one line
  naming the file, key and value (types and ranges: msgspec, :class:`CoordinatorTable`).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta

from replicast.operators.config_file import convert
from replicast.operators.query import Query

if TYPE_CHECKING:     # numpy and scipy only when a node takes part in placement: every node imports this module
    from replicast.engine.node import CoordinationSetup
    from replicast.placement.constraints import DeployConfig
    from replicast.placement.coordinator import CoordinatorConfig

@dataclass(frozen=True)
class CoordinatorSettings:
    """A ``[coordinator]`` table, of a cluster file or a scenario (docs/placement.md)."""

    report_ms: float = 5000.0
    utility_period_s: float = 30.0
    gc: bool = True
    revival: bool = True
    gc_period_s: float = 300.0
    theta: float = 0.0
    kmin: int = 2
    revival_threshold_s: float = 10.0
    revival_period_s: float = 5.0
    settle_s: float = 30.0
    expiry_s: float = 30.0
    latency_within_percent: float | None = None   # the latency objective (placement.objective)
    latency_bound_ms: float | None = None
    latency_window_s: float = 600.0              # the objective's p99 over this much history
    #: What each server reports per stream replica for GC to rank by: "rank" (§V-B) or "win-share"
    #: (docs/tracing.md); NodeOptions.utility of every node.
    utility: str = "rank"
    # cluster files only
    kmax: int = 2
    sink_replicas: int = 1            # of every application, placed by Alg. 5 like operator replicas
    alpha: float = 0.9
    dmin_ms: float = 30.0
    source_rate: float = 1.0          # records/s of every source stream, until measured
    cpu_us: float = 10.0              # CPU per record, for the loads Alg. 5 expects
    pin: dict[str, tuple[str, ...]] = field(default_factory=dict)   # replica i on the i-th node
    # scenarios only: also simulate the deployment without the coordinator
    compare_static: bool = True

    def config(self, deploy: DeployConfig | None = None) -> CoordinatorConfig:
        """The coordinator core's configuration; ``deploy`` defaults to this table's kmax, alpha, dmin_ms."""
        from replicast.placement.constraints import DeployConfig
        from replicast.placement.coordinator import CoordinatorConfig
        from replicast.placement.objective import LatencyObjective
        objective = (None if self.latency_within_percent is None and self.latency_bound_ms is None
                     else LatencyObjective(self.latency_within_percent, self.latency_bound_ms,
                                           self.latency_window_s))
        return CoordinatorConfig.in_seconds(
            deploy or DeployConfig(kmax=self.kmax, alpha=self.alpha, dmin_ms=self.dmin_ms,
                                   sink_replicas=self.sink_replicas), gc=self.gc,
            kmin=self.kmin, theta=self.theta, utility_period_s=self.utility_period_s, gc_period_s=self.gc_period_s,
            revival_threshold_s=self.revival_threshold_s, revival_period_s=self.revival_period_s,
            settle_s=self.settle_s, expiry_s=self.expiry_s, objective=objective, revival=self.revival)

    @property
    def report_us(self) -> int:
        return round(self.report_ms * 1000)


#: The largest finite float (msgspec bounds must be finite; TOML's inf is refused by it).
_FINITE = 1.7976931348623157e308
Positive = Annotated[float, Meta(gt=0, le=_FINITE, description="a positive number")]
NonNegative = Annotated[float, Meta(ge=0, le=_FINITE, description="a number >= 0")]
AtLeastOne = Annotated[int, Meta(ge=1, description="an integer >= 1")]


class CoordinatorTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The keys of ``[coordinator]`` that cluster files and scenarios share (docs/placement.md)."""

    report_ms: Positive = CoordinatorSettings.report_ms
    utility_period_s: Positive = CoordinatorSettings.utility_period_s
    gc_period_s: Positive = CoordinatorSettings.gc_period_s
    revival_threshold_s: Positive = CoordinatorSettings.revival_threshold_s
    revival_period_s: Positive = CoordinatorSettings.revival_period_s
    settle_s: Positive = CoordinatorSettings.settle_s
    expiry_s: Positive = CoordinatorSettings.expiry_s
    latency_within_percent: NonNegative | None = None
    latency_bound_ms: NonNegative | None = None
    latency_window_s: Positive = CoordinatorSettings.latency_window_s
    kmin: AtLeastOne = CoordinatorSettings.kmin
    theta: NonNegative = CoordinatorSettings.theta
    gc: bool = CoordinatorSettings.gc
    revival: bool = CoordinatorSettings.revival
    utility: Annotated[Literal["rank", "win-share"], Meta(description="\"rank\" or \"win-share\"")] = \
        CoordinatorSettings.utility


class ClusterCoordinatorTable(CoordinatorTable):
    """A cluster file's ``[coordinator]``: also the deployment (Alg. 5) and the pinned replicas."""

    kmax: AtLeastOne = CoordinatorSettings.kmax
    sink_replicas: AtLeastOne = CoordinatorSettings.sink_replicas
    alpha: Positive = CoordinatorSettings.alpha
    dmin_ms: NonNegative = CoordinatorSettings.dmin_ms
    source_rate: Positive = CoordinatorSettings.source_rate
    cpu_us: Positive = CoordinatorSettings.cpu_us
    pin: dict[str, Any] = {}


class ScenarioCoordinatorTable(CoordinatorTable):
    """A scenario's ``[coordinator]``: its runs, ``[deployment]`` and sources give the rest."""

    compare_static: bool = CoordinatorSettings.compare_static


def parse_coordinator(table: Any, where: str, error: type[Exception], *, nodes: list[str] | None = None,
                      query: Query | None = None) -> CoordinatorSettings:
    """``[coordinator]`` checked key by key: a cluster file's (given its ``nodes`` and ``query``) or,
    without them, a scenario's."""
    cluster = nodes is not None
    if not isinstance(table, dict):
        raise error(f"{where}: expected a table, got {table!r}")
    checked = convert(table, ClusterCoordinatorTable if cluster else ScenarioCoordinatorTable, where, error=error)
    values = {name: getattr(checked, name) for name in checked.__struct_fields__}
    if cluster:
        if checked.alpha > 1:
            raise error(f"{where}: 'alpha' must be at most 1, got {checked.alpha!r}")
        if checked.sink_replicas > checked.kmax:
            raise error(f"{where}: sink_replicas = {checked.sink_replicas} is more than kmax = {checked.kmax} "
                        f"(Alg. 5 places one replica of each per phase)")
        if checked.kmax > len(nodes):
            raise error(f"{where}: kmax = {checked.kmax} needs at least {checked.kmax} nodes, the file has {len(nodes)}")
        values["pin"] = {name: _pinned_nodes(name, value, f"{where}: pin.{name}", error, nodes, query)
                         for name, value in checked.pin.items()}
    return CoordinatorSettings(**values)


def _pinned_nodes(name: str, value: Any, where: str, error: type[Exception], nodes: list[str],
                  query: Query) -> tuple[str, ...]:
    """One ``pin`` entry: a node, or a list of distinct nodes (replica 0 on the first, docs/placement.md)."""
    if name not in query.streams and name not in query.applications:
        raise error(f"{where}: not a stream or application of {query.source}")
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not listed or not all(isinstance(n, str) for n in listed):
        raise error(f"{where}: expected a node name or a non-empty list of node names, got {value!r}")
    for node in listed:
        if node not in nodes:
            raise error(f"{where}: unknown node {node!r} (nodes: {', '.join(nodes)})")
    if len(set(listed)) < len(listed):
        raise error(f"{where}: a node is listed twice in {listed!r}")
    return tuple(listed)


def pinned_placement(settings: CoordinatorSettings, query: Query, nodes: list[str]) -> dict[str, list[str]]:
    """Entry points and applications on their pinned nodes, replica 0 on the first (the first node of
    the file if not pinned)."""
    return {name: list(settings.pin.get(name, (nodes[0],))) for name in (*query.streams, *query.applications)}


def coordination_setup(settings: CoordinatorSettings, query: Query, nodes: list[str],
                       placement: dict[str, list[str]], node: str) -> CoordinationSetup:
    """Node ``node``'s :class:`~engine.core.coordination.CoordinationSetup`: the cluster, the query's
    estimated workload with entry points and applications where ``placement`` runs their replica 0."""
    from replicast.engine.node import CoordinationSetup
    from replicast.placement.workload import from_query
    index = {name: i for i, name in enumerate(nodes)}
    pinned = {name: index[placement[name][0]] for name in (*query.streams, *query.applications)}
    estimate = from_query(query, pinned, source_rate=settings.source_rate, cpu_us=settings.cpu_us)
    rng = random.Random(zlib.crc32(f"coordinator/{node}".encode()))
    return CoordinationSetup(tuple(nodes), estimate, rng, settings.config(), settings.report_us)
