"""Scenario files (TOML): what to simulate.  See ``docs/simulator.md`` for the format.

A scenario names a trace and which of its nodes are servers, a query file, sources, the degrees of
replication to compare (``kmax``), a deployment (``manual``, ``random``, ``min-cost``), the placement
coordinator's settings (``[coordinator]``: garbage collection and revival during the run, §V),
timing, the network model and a fault script.  Every mistake is a
:class:`ScenarioError` naming the file, the key and what was expected.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from pathlib import Path

from replicast.engine.node import MODES as ENGINE_MODES, Mode, parse_mode
from replicast.engine.entry import MODES
from replicast.engine.toml_file import read_toml
from replicast.operators.config_file import typed_key
from replicast.operators.errors import ReplicastError
from replicast.simulator.clocks import ClockSpec
from replicast.simulator.network import OUTAGE_MODES

if TYPE_CHECKING:
    from replicast.engine.placement_config import CoordinatorSettings

DEPLOYMENTS = ("manual", "random", "min-cost", "random-from-min-cost")
SOURCE_KINDS = ("cpu", "ping", "events")
FAULT_KINDS = ("crash", "restart", "cut", "congest", "spike", "add", "remove")
DEFAULT_PROCESSING_US = {"entry": 0.5, "union": 0.3, "filter": 0.3, "map": 0.5, "join": 9.0, "aggregate": 4.0,
                         "count_aggregate": 2.0, "application": 0.3}


class ScenarioError(ReplicastError):
    """A scenario file is malformed."""


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    stream: str                 # may contain {i} (index of the server in `servers`) and {server}
    servers: tuple[str, ...] | str   # names, or "all"
    period_ms: float = 10_000.0
    events: Path | None = None


@dataclass(frozen=True)
class Fault:
    kind: str
    target: tuple[str, ...]     # a server, a replica ("name#i": the server hosting it), two servers, or (name, server)
    from_us: int
    to_us: int | None = None
    value: float = 0.0          # congest: extra one-way ms; spike: CPU cost factor


@dataclass
class Scenario:
    path: Path
    name: str
    trace: str
    query_path: Path
    servers: tuple[str, ...] | int
    kmax: tuple[int, ...] = (1,)
    seed: int = 0
    start_s: float = 0.0
    duration_s: float | None = None
    drain_s: float = 120.0
    punctuation_ms: float = 10_000.0
    heartbeat_ms: float = 5_000.0
    peer_timeout_ms: float = 30_000.0
    join_timeout_ms: float = 10_000.0
    retention_items: int = 1_000_000
    entry_mode: str = "source"
    mode: Mode = Mode.REPLICATION   # replication or a baseline (engine/core/modes.py)
    outage: str = "hold"
    bandwidth_mbps: float | None = None
    bucket_s: float = 60.0
    processing_us: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PROCESSING_US))
    deployment: str = "random"
    manual: dict[str, tuple[str, ...]] = field(default_factory=dict)
    applications: dict[str, str] = field(default_factory=dict)
    entry_replicas: str = "1"   # "1": at the source's server only; "kmax": replicated like operators
    alpha: float = 0.9          # min-cost (Alg. 5): load(s) + load(o) < alpha x capacity(s)
    dmin_ms: float = 30.0       # min-cost: one-way latency between peer replicas above this
    sources: list[SourceSpec] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    coordinator: "CoordinatorSettings | None" = None   # [coordinator]: GC and revival during the run (§V)
    clocks: dict[str, ClockSpec] = field(default_factory=dict)   # [clocks.<server>]: offset and drift


_TOP = {"name", "trace", "query", "servers", "kmax", "seed", "start_s", "duration_s", "drain_s", "punctuation_ms",
        "heartbeat_ms", "peer_timeout_ms", "join_timeout_ms", "retention_items", "entry_mode", "mode", "network",
        "processing_us", "deployment", "sources", "faults", "bucket_s", "coordinator", "clocks"}


def load_scenario(path: str | Path) -> Scenario:
    return parse_scenario(read_toml(path, "scenario", ScenarioError), Path(path))


_get = partial(typed_key, error=ScenarioError)


def _choice(value: str, allowed: tuple, where: str, key: str) -> str:
    if value not in allowed:
        raise ScenarioError(f"{where}: '{key}' must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _unknown(doc: dict, allowed: set, where: str) -> None:
    unknown = set(doc) - allowed
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(allowed)})")


def _positive(value: float, where: str, key: str) -> float:
    if value <= 0:
        raise ScenarioError(f"{where}: '{key}' must be positive, got {value!r}")
    return value


def parse_scenario(doc: dict, path: Path) -> Scenario:
    where, base = str(path), path.parent
    _unknown(doc, _TOP, where)
    number = (int, float)
    servers = _get(doc, "servers", (int, list), where)
    if isinstance(servers, list):
        if not servers or not all(isinstance(s, str) for s in servers) or len(set(servers)) != len(servers):
            raise ScenarioError(f"{where}: 'servers' must be distinct trace node names or a count, got {servers!r}")
        servers = tuple(servers)
    elif servers < 1:
        raise ScenarioError(f"{where}: 'servers' must be at least 1, got {servers}")
    kmax = _get(doc, "kmax", (int, list), where, 1)
    kmax = tuple(kmax) if isinstance(kmax, list) else (kmax,)
    if not kmax or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in kmax):
        raise ScenarioError(f"{where}: 'kmax' must be a positive integer or a list of them, got {doc.get('kmax')!r}")
    scenario = Scenario(
        path=path, name=_get(doc, "name", str, where, path.stem), trace=_get(doc, "trace", str, where),
        query_path=base / _get(doc, "query", str, where), servers=servers, kmax=kmax,
        seed=_get(doc, "seed", int, where, 0), start_s=float(_get(doc, "start_s", number, where, 0.0)),
        duration_s=doc.get("duration_s") and _positive(float(_get(doc, "duration_s", number, where)), where, "duration_s"),
        drain_s=float(_get(doc, "drain_s", number, where, 120.0)),
        punctuation_ms=_positive(float(_get(doc, "punctuation_ms", number, where, 10_000.0)), where, "punctuation_ms"),
        heartbeat_ms=_positive(float(_get(doc, "heartbeat_ms", number, where, 5_000.0)), where, "heartbeat_ms"),
        peer_timeout_ms=_positive(float(_get(doc, "peer_timeout_ms", number, where, 30_000.0)), where, "peer_timeout_ms"),
        join_timeout_ms=_positive(float(_get(doc, "join_timeout_ms", number, where, 10_000.0)), where, "join_timeout_ms"),
        retention_items=int(_positive(float(_get(doc, "retention_items", int, where, 1_000_000)), where,
                                      "retention_items")),
        entry_mode=_choice(_get(doc, "entry_mode", str, where, "source"), MODES, where, "entry_mode"),
        mode=parse_mode(_choice(_get(doc, "mode", str, where, "replication"), ENGINE_MODES, where, "mode")),
        bucket_s=_positive(float(_get(doc, "bucket_s", number, where, 60.0)), where, "bucket_s"),
    )
    _network(scenario, _get(doc, "network", dict, where, {}), f"{where}: [network]")
    processing = _get(doc, "processing_us", dict, where, {})
    for kind, cost in processing.items():
        if isinstance(cost, bool) or not isinstance(cost, number) or cost < 0:
            raise ScenarioError(f"{where}: [processing_us] '{kind}' must be a non-negative number, got {cost!r}")
        scenario.processing_us[kind] = float(cost)
    _deployment(scenario, _get(doc, "deployment", dict, where, {}), f"{where}: [deployment]")
    for i, table in enumerate(_get(doc, "sources", list, where), start=1):
        scenario.sources.append(_source(table, base, f"{where}: [[sources]] #{i}"))
    for i, table in enumerate(_get(doc, "faults", list, where, []), start=1):
        scenario.faults.append(_fault(table, f"{where}: [[faults]] #{i}"))
    for server, table in _get(doc, "clocks", dict, where, {}).items():
        scenario.clocks[server] = _clock(table, f"{where}: [clocks.{server}]")
    if "coordinator" in doc:
        from replicast.simulator.coordinator import parse_coordinator
        scenario.coordinator = parse_coordinator(_get(doc, "coordinator", dict, where), f"{where}: [coordinator]")
    return scenario


def _network(scenario: Scenario, table: dict, where: str) -> None:
    _unknown(table, {"outage", "bandwidth_mbps"}, where)
    scenario.outage = _choice(_get(table, "outage", str, where, "hold"), OUTAGE_MODES, where, "outage")
    if "bandwidth_mbps" in table:
        scenario.bandwidth_mbps = _positive(float(_get(table, "bandwidth_mbps", (int, float), where)), where,
                                            "bandwidth_mbps")


def _clock(table: object, where: str) -> ClockSpec:
    """A server's clock (simulator/clocks.py): ``offset_ms`` ahead of the true time, ``drift_ppm`` fast."""
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}: must be a table with offset_ms and drift_ppm, got {table!r}")
    _unknown(table, {"offset_ms", "drift_ppm"}, where)
    offset = float(_get(table, "offset_ms", (int, float), where, 0.0))
    drift = float(_get(table, "drift_ppm", (int, float), where, 0.0))
    if not -1_000_000 < drift < 1_000_000:
        raise ScenarioError(f"{where}: 'drift_ppm' must be in (-1000000, 1000000), got {drift!r}")
    return ClockSpec(round(offset * 1000), drift)


def _deployment(scenario: Scenario, table: dict, where: str) -> None:
    _unknown(table, {"kind", "manual", "applications", "entry_replicas", "alpha", "dmin_ms"}, where)
    scenario.deployment = _choice(_get(table, "kind", str, where, "random"), DEPLOYMENTS, where, "kind")
    scenario.alpha = float(_get(table, "alpha", (int, float), where, 0.9))
    if not 0 < scenario.alpha <= 1:
        raise ScenarioError(f"{where}: 'alpha' must be in (0, 1], got {scenario.alpha!r}")
    scenario.dmin_ms = float(_get(table, "dmin_ms", (int, float), where, 30.0))
    if not scenario.dmin_ms >= 0:
        raise ScenarioError(f"{where}: 'dmin_ms' must be a latency >= 0 ms, got {scenario.dmin_ms!r}")
    for name, servers in _get(table, "manual", dict, where, {}).items():
        if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
            raise ScenarioError(f"{where}: manual '{name}' must be a non-empty list of servers, got {servers!r}")
        scenario.manual[name] = tuple(servers)
    for app, server in _get(table, "applications", dict, where, {}).items():
        if not isinstance(server, str):
            raise ScenarioError(f"{where}: application '{app}' must name one server, got {server!r}")
        scenario.applications[app] = server
    replicas = _get(table, "entry_replicas", (int, str), where, 1)
    if str(replicas) not in ("1", "kmax"):
        raise ScenarioError(f"{where}: 'entry_replicas' must be 1 or \"kmax\", got {replicas!r}")
    scenario.entry_replicas = str(replicas)


def _source(table: dict, base: Path, where: str) -> SourceSpec:
    _unknown(table, {"kind", "stream", "servers", "period_ms", "events"}, where)
    kind = _choice(_get(table, "kind", str, where), SOURCE_KINDS, where, "kind")
    servers = _get(table, "servers", (str, list), where)
    if isinstance(servers, list):
        servers = tuple(servers)
    elif servers != "all":
        servers = (servers,)
    events = _get(table, "events", str, where, None)
    if kind == "events" and events is None:
        raise ScenarioError(f"{where}: an 'events' source needs 'events' (a JSON-lines events file)")
    period = _positive(float(_get(table, "period_ms", (int, float), where, 10_000.0)), where, "period_ms")
    return SourceSpec(kind, _get(table, "stream", str, where), servers, period, base / events if events else None)


def _fault(table: dict, where: str) -> Fault:
    kinds = [k for k in FAULT_KINDS if k in table]
    if len(kinds) != 1:
        raise ScenarioError(f"{where}: a fault has exactly one of {', '.join(FAULT_KINDS)}")
    kind = kinds[0]
    _unknown(table, {kind, "at_s", "from_s", "to_s", "extra_ms", "factor", "on"}, where)
    target = table[kind]
    if kind == "add":            # a new replica of an operator or entry point, mid-stream (docs/lifecycle.md)
        if not isinstance(target, str) or "#" in target:
            raise ScenarioError(f"{where}: 'add' must name an operator or stream (its new replica joins "
                                f"from a live peer), got {target!r}")
        return Fault(kind, (target, _get(table, "on", str, where)), round(float(_get(table, "at_s", (int, float), where)) * 1e6))
    if "on" in table:
        raise ScenarioError(f"{where}: 'on' only goes with 'add'")
    if kind in ("cut", "congest"):
        if not (isinstance(target, list) and len(target) == 2 and all(isinstance(s, str) for s in target)):
            raise ScenarioError(f"{where}: '{kind}' must be two servers [\"a\", \"b\"], got {target!r}")
        target = tuple(target)
    elif not isinstance(target, str):
        raise ScenarioError(f"{where}: '{kind}' must name a server or a replica (\"name#index\"), got {target!r}")
    else:
        target = (target,)
    if kind == "remove" and "#" not in target[0]:
        raise ScenarioError(f"{where}: 'remove' must name a replica (\"name#index\"), got {target[0]!r}")
    if kind in ("crash", "restart", "remove"):
        at = float(_get(table, "at_s", (int, float), where))
        return Fault(kind, target, round(at * 1e6))
    t1 = float(_get(table, "from_s", (int, float), where))
    t2 = float(_get(table, "to_s", (int, float), where))
    if t2 <= t1:
        raise ScenarioError(f"{where}: 'to_s' ({t2}) must be after 'from_s' ({t1})")
    value = 0.0
    if kind == "congest":
        value = _positive(float(_get(table, "extra_ms", (int, float), where)), where, "extra_ms")
    elif kind == "spike":
        value = _positive(float(_get(table, "factor", (int, float), where)), where, "factor")
    return Fault(kind, target, round(t1 * 1e6), round(t2 * 1e6), value)
