"""Cluster files (TOML): the nodes, the query, the broker, timing, secret and a placement (manual, or
``"min-cost"`` by the placement coordinator, :mod:`engine.placement_config`).

One file describes the whole cluster; every node reads the same file and picks its own part by
name (``replicast node --config cluster.toml --name n1``), and ``replicast cluster up`` starts all
of it on loopback.  Every mistake is a :class:`ClusterConfigError` naming the file and the key.
See ``docs/node.md`` for the format.
"""

from __future__ import annotations

import os
import shutil
import string
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from replicast.engine.core.modes import MODES as ENGINE_MODES, Mode, parse_mode
from replicast.engine.entry import MODES
from replicast.engine.handshake import MAX_NAME
from replicast.engine.mqtt_config import MQTT_KEYS, BrokerAddress, MqttSettings, parse_broker_url, parse_mqtt
from replicast.engine.node import NodeOptions
from replicast.engine.placement_config import CoordinatorSettings, coordination_setup, parse_coordinator, pinned_placement
from replicast.engine.source_protocol import SourceLimits, parse_source_limits
from replicast.operators.config_file import MISSING, read_toml, typed_key
from replicast.operators.errors import ReplicastError
from replicast.operators.query import Query
from replicast.operators.query_file import load_query


class ClusterConfigError(ReplicastError):
    """A cluster or node configuration is malformed."""


@dataclass(frozen=True)
class SshSpec:
    """Where ``replicast cluster up`` reaches a node's host over ssh (``ssh = {…}`` in ``[[nodes]]``,
    docs/cluster.md).  The node itself never reads this."""
    host: str
    user: str | None = None
    port: int = 22
    #: Private key file (None: the ssh agent and ~/.ssh's default keys).
    key: Path | None = None
    #: known_hosts file checked against the host's key (None: ~/.ssh/known_hosts).
    known_hosts: Path | None = None
    #: The host's Python (≥ 3.11), which makes the venv.
    python: str = "python3"
    #: The directory on the host holding the venv, the cluster file, logs and state (relative: to the login's home).
    dir: str = ".replicast-cluster"

    @property
    def destination(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host: str
    port: int
    metrics_port: int | None
    #: TCP port where external sources may connect and send ``STREAM PAYLOAD`` lines (optional).
    source_port: int | None = None
    #: The node's host is reached over ssh by ``cluster up`` (None: a local node).
    ssh: SshSpec | None = None


@dataclass(frozen=True)
class OutputSpec:
    file: Path | None = None
    mqtt: bool = True
    #: Brokers to publish to (``brokers = [...]``); empty: the node's own broker.
    brokers: tuple[BrokerAddress, ...] = ()


@dataclass(frozen=True)
class SourceSpec:
    node: str
    command: list[str]


@dataclass
class ClusterConfig:
    path: Path
    query_path: Path
    nodes: dict[str, NodeSpec]
    placement: dict[str, list[str]]
    secret: bytes
    punctuation_ms: float = 100.0
    heartbeat_ms: float = 500.0
    peer_timeout_ms: float = 3000.0
    join_timeout_ms: float = 3000.0            # docs/lifecycle.md: how long a joining replica waits
    retention_items: int = 1_000_000           # items an output log keeps for a lagging receiver
    entry_modes: dict[str, str] = field(default_factory=dict)
    mode: Mode = Mode.REPLICATION              # replication or a baseline (engine/core/modes.py)
    broker: str = "embedded"                 # "embedded" or mqtt://host:port
    broker_host: str = "127.0.0.1"
    broker_port: int = 1883
    outputs: dict[str, OutputSpec] = field(default_factory=dict)
    sources: list[SourceSpec] = field(default_factory=list)
    tls: dict[str, Path] = field(default_factory=dict)
    #: The placement coordinator's settings (``[coordinator]``), or None: no coordinator.
    coordinator: CoordinatorSettings | None = None
    #: The whole ``[mqtt]`` table (engine.mqtt_config): per-node brokers, credentials, TLS, sessions.
    #: A config built in code may leave it out: it is then the plain broker at broker_host:broker_port.
    mqtt: MqttSettings | None = None
    #: ``placement = "min-cost"``: ``placement`` holds only the pinned entry points and applications.
    min_cost: bool = False
    #: ``[source_connections]``: limits and authentication of every node's ``source_port``.
    source_connections: SourceLimits = field(default_factory=SourceLimits)
    _query: Query | None = None

    def __post_init__(self) -> None:
        if self.mqtt is None:
            address = BrokerAddress(f"mqtt://{self.broker_host}:{self.broker_port}", self.broker_host, self.broker_port)
            self.mqtt = MqttSettings(address)

    @property
    def query(self) -> Query:
        if self._query is None:
            self._query = load_query(self.query_path)
        return self._query

    def options(self) -> NodeOptions:
        # Every node of the cluster votes on who stamps an entry-stamped stream (engine.core.views).
        return NodeOptions(punctuation_us=round(self.punctuation_ms * 1000), heartbeat_us=round(self.heartbeat_ms * 1000),
                           peer_timeout_us=round(self.peer_timeout_ms * 1000), entry_modes=dict(self.entry_modes),
                           join_timeout_us=round(self.join_timeout_ms * 1000), retention_items=self.retention_items,
                           mode=self.mode, voters=tuple(sorted(self.nodes)))

    def coordination(self, node: str):
        """Node ``node``'s part in placement (:class:`engine.core.coordination.CoordinationSetup`), or None."""
        if self.coordinator is None:
            return None
        return coordination_setup(self.coordinator, self.query, list(self.nodes), self.placement, node)

    def mqtt_address(self) -> tuple[str, int]:
        return self.broker_host, self.broker_port

    def tls_files(self, node: str) -> dict[str, Path]:
        """Node ``node``'s ``[tls]`` paths (``cert``, ``key``, ``ca``) with ``{node}`` replaced by its
        name, so one file can give every node its own certificate; empty without ``[tls]``."""
        return {key: Path(str(path).replace("{node}", node)) for key, path in self.tls.items()}


_TOP = {"query", "punctuation_ms", "heartbeat_ms", "peer_timeout_ms", "join_timeout_ms", "retention_items", "secret",
        "secret_env", "entry_mode", "entry_modes", "mode", "mqtt", "nodes", "placement", "outputs", "sources", "tls",
        "name", "coordinator", "source_connections"}
#: The keys each table may hold: anything else is an error (a typo would otherwise be ignored).
_TABLE_KEYS = {"[[nodes]]": {"name", "host", "port", "metrics_port", "source_port", "ssh"}, "[mqtt]": MQTT_KEYS,
               "[outputs.*]": {"file", "mqtt", "brokers"}, "[[sources]]": {"node", "command"}, "[tls]": {"cert", "key", "ca"},
               "ssh": {"host", "user", "port", "key", "known_hosts", "python", "dir"}}     # a node's ssh = {…}
#: Placeholders a source command may use (expanded by ``cluster up``, see docs/node.md).
SOURCE_PLACEHOLDERS = ("python", "dir", "node", "nodes", "broker_host", "broker_port", "punctuation_ms")


def load_cluster(path: str | Path) -> ClusterConfig:
    """Read and check the cluster file at ``path`` (relative paths inside are relative to it)."""
    return parse_cluster(read_toml(path, "cluster file", ClusterConfigError), Path(path))


_get = partial(typed_key, error=ClusterConfigError)


def _keys(table: object, kind: str, where: str) -> dict:
    """``table`` checked to be a table holding only the keys ``kind`` allows."""
    if not isinstance(table, dict):
        raise ClusterConfigError(f"{where}: expected a table, got {table!r}")
    allowed = _TABLE_KEYS.get(kind, _TOP)
    unknown = set(table) - allowed
    if unknown:
        raise ClusterConfigError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(allowed)})")
    return table


def _port(table: dict, key: str, where: str, default=MISSING, owner: str = "") -> int | None:
    port = _get(table, key, int, where, default)
    if port is not None and not 1 <= port <= 65535:
        raise ClusterConfigError(f"{owner or where}: {key} {port} is out of range (1-65535)")
    return port


def _positive_ms(doc: dict, key: str, where: str, default: float) -> float:
    value = float(_get(doc, key, (int, float), where, default))
    if not 0 < value < 86_400_000:
        raise ClusterConfigError(f"{where}: '{key}' must be a positive number of milliseconds (below a day), "
                                 f"got {doc[key]!r}")
    return value


def _positive_count(doc: dict, key: str, where: str, default: int) -> int:
    value = _get(doc, key, int, where, default)
    if isinstance(value, bool) or not 0 < value < 2**40:
        raise ClusterConfigError(f"{where}: '{key}' must be a positive whole number, got {doc[key]!r}")
    return value


def parse_cluster(doc: dict, path: Path) -> ClusterConfig:
    where, base = str(path), path.parent
    _keys(doc, "top", where)
    nodes: dict[str, NodeSpec] = {}
    for i, table in enumerate(_get(doc, "nodes", list, where), start=1):
        w = f"{where}: [[nodes]] #{i}"
        name = _get(_keys(table, "[[nodes]]", w), "name", str, w)
        if not name or len(name) > MAX_NAME or not name.isprintable():
            raise ClusterConfigError(f"{w}: 'name' must be 1-{MAX_NAME} printable characters, got {name!r}")
        if name in nodes:
            raise ClusterConfigError(f"{w}: node name {name!r} is used twice")
        owner = f"{where}: node {name}"
        host = _get(table, "host", str, w, "127.0.0.1")
        nodes[name] = NodeSpec(name, host, _port(table, "port", w, owner=owner),
                               _port(table, "metrics_port", w, None, owner), _port(table, "source_port", w, None, owner),
                               _ssh(table, host, base, f"{owner}: ssh"))
    placement = {}
    placed = _get(doc, "placement", (dict, str), where)
    if isinstance(placed, str) and placed != "min-cost":
        raise ClusterConfigError(f"{where}: 'placement' must be a table of node lists or \"min-cost\", got {placed!r}")
    for name, value in (placed.items() if isinstance(placed, dict) else ()):
        if not isinstance(value, list) or not value or not all(v in nodes for v in value):
            raise ClusterConfigError(f"{where}: placement.{name}: expected a non-empty list of node names "
                                     f"({', '.join(nodes)}), got {value!r}")
        placement[name] = value
    secret = _secret(doc, where)
    modes = {}
    default_mode = _get(doc, "entry_mode", str, where, "source")
    for stream, mode in {**{"*": default_mode}, **_get(doc, "entry_modes", dict, where, {})}.items():
        if mode not in MODES:
            raise ClusterConfigError(f"{where}: entry mode of {stream!r} must be one of {MODES}, got {mode!r}")
        modes[stream] = mode
    engine_mode = parse_mode(_get(doc, "mode", str, where, Mode.REPLICATION.value))
    if engine_mode is None:
        raise ClusterConfigError(f"{where}: 'mode' must be one of {', '.join(ENGINE_MODES)}, got {doc['mode']!r}")
    mqtt = _keys(_get(doc, "mqtt", dict, where, {}), "[mqtt]", f"{where}: [mqtt]")
    mqtt_settings = parse_mqtt(mqtt, where, base, nodes, ClusterConfigError, _get)
    broker, host, port = mqtt_settings.default.url, mqtt_settings.default.host, mqtt_settings.default.port
    outputs = {}
    for app, table in _get(doc, "outputs", dict, where, {}).items():
        w = f"{where}: [outputs.{app}]"
        file = _get(_keys(table, "[outputs.*]", w), "file", str, w, None)
        publish = _get(table, "mqtt", bool, w, True)
        brokers = tuple(parse_broker_url(url, f"{w} brokers", ClusterConfigError) if isinstance(url, str) else
                        _get({"brokers": url}, "brokers", str, w) for url in _get(table, "brokers", list, w, []))
        if brokers and not publish:
            raise ClusterConfigError(f"{w}: 'brokers' with mqtt = false (nothing would be published)")
        outputs[app] = OutputSpec(base / file if file else None, publish, brokers)
    sources = []
    for i, table in enumerate(_get(doc, "sources", list, where, []), start=1):
        w = f"{where}: [[sources]] #{i}"
        node = _get(_keys(table, "[[sources]]", w), "node", str, w)
        if node not in nodes:
            raise ClusterConfigError(f"{w}: unknown node {node!r}")
        command = [str(a) for a in _get(table, "command", list, w)]
        if not command:
            raise ClusterConfigError(f"{w}: 'command' must not be empty")
        for arg in command:
            _check_placeholders(arg, w)
        sources.append(SourceSpec(node, command))
    tls_table = _keys(_get(doc, "tls", dict, where, {}), "[tls]", f"{where}: [tls]")
    tls = {k: base / _get(tls_table, k, str, f"{where}: [tls]") for k in tls_table}
    if tls and set(tls) != {"cert", "key", "ca"}:
        raise ClusterConfigError(f"{where}: [tls] needs exactly cert, key and ca (paths), got {sorted(tls)}")
    config = ClusterConfig(
        path=path, query_path=base / _get(doc, "query", str, where), nodes=nodes, placement=placement,
        secret=secret, punctuation_ms=_positive_ms(doc, "punctuation_ms", where, 100.0),
        heartbeat_ms=_positive_ms(doc, "heartbeat_ms", where, 500.0),
        peer_timeout_ms=_positive_ms(doc, "peer_timeout_ms", where, 3000.0),
        join_timeout_ms=_positive_ms(doc, "join_timeout_ms", where, 3000.0),
        retention_items=_positive_count(doc, "retention_items", where, 1_000_000), mode=engine_mode,
        broker=broker, broker_host=host, broker_port=port, mqtt=mqtt_settings, outputs=outputs, sources=sources, tls=tls,
        source_connections=parse_source_limits(doc.get("source_connections", {}), f"{where}: [source_connections]",
                                               ClusterConfigError, has_tls=bool(tls)))
    if config.peer_timeout_ms <= config.heartbeat_ms:
        raise ClusterConfigError(f"{where}: 'peer_timeout_ms' ({config.peer_timeout_ms:g}) must be longer than "
                                 f"'heartbeat_ms' ({config.heartbeat_ms:g}), or every link times out")
    query = config.query
    config.entry_modes = {s: modes.get(s, modes["*"]) for s in query.streams}
    if (placed == "min-cost" or "coordinator" in doc) and engine_mode is not Mode.REPLICATION:
        raise ClusterConfigError(f"{where}: placement = \"min-cost\" and [coordinator] need mode \"replication\" "
                                 f"(the coordinator deploys and collects replicated operators), got {engine_mode.value!r}")
    if placed == "min-cost" or "coordinator" in doc:
        config.coordinator = parse_coordinator(doc.get("coordinator", {}), f"{where}: [coordinator]", ClusterConfigError,
                                               nodes=list(nodes), query=query)
    if placed == "min-cost":
        config.min_cost = True
        config.placement = placement = pinned_placement(config.coordinator, query, list(nodes))
    names = [*query.streams, *query.operators, *query.applications]
    # With "min-cost" the placement holds the pinned entry points and applications; the coordinator places the rest.
    missing = [n for n in names if n not in placement and not (config.min_cost and n in query.operators)]
    extra = [n for n in placement if n not in names]
    if missing or extra:
        raise ClusterConfigError(f"{where}: [placement] must list every stream, operator and application of "
                                 f"{config.query_path}" + (f"; missing {missing}" if missing else "")
                                 + (f"; unknown {extra}" if extra else ""))
    for app in query.applications:       # k sink replicas: each publishes, with ids (docs/consume.md)
        if len(set(placement[app])) != len(placement[app]):
            raise ClusterConfigError(f"{where}: placement.{app}: a node holds at most one sink replica of it")
    for app in outputs:
        if app not in query.applications:
            raise ClusterConfigError(f"{where}: [outputs.{app}]: no such application")
    return config


def _ssh(table: dict, host: str, base: Path, where: str) -> SshSpec | None:
    """A node's ``ssh = { host, user, port, key, known_hosts, python, dir }`` (all optional: ``ssh = {}``
    reaches the node's own ``host`` on port 22 as the current user); key files are relative to the file."""
    if "ssh" not in table:
        return None
    ssh = _keys(table["ssh"], "ssh", where)
    files = {k: base / Path(_get(ssh, k, str, where)).expanduser() for k in ("key", "known_hosts") if k in ssh}
    return SshSpec(host=_get(ssh, "host", str, where, host), user=_get(ssh, "user", str, where, None),
                   port=_port(ssh, "port", where, 22), python=_get(ssh, "python", str, where, "python3"),
                   dir=_get(ssh, "dir", str, where, ".replicast-cluster"), **files)


def _check_placeholders(arg: str, where: str) -> None:
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(arg) if name is not None]
    except ValueError as error:
        raise ClusterConfigError(f"{where}: command argument {arg!r}: {error} (write {{{{ and }}}} for braces)") from None
    unknown = [name for name in names if name not in SOURCE_PLACEHOLDERS]
    if unknown:
        raise ClusterConfigError(f"{where}: command argument {arg!r}: unknown placeholder {{{unknown[0]}}} "
                                 f"(known: {', '.join('{' + p + '}' for p in SOURCE_PLACEHOLDERS)})")


def check_source_commands(config: ClusterConfig) -> None:
    """Every ``[[sources]]`` program exists here (``cluster up`` runs them; a node alone does not,
    so :func:`parse_cluster` leaves this out).  ``{python}`` and ``{dir}`` are expanded first."""
    for i, source in enumerate(config.sources, start=1):
        program = source.command[0].replace("{python}", sys.executable).replace("{dir}", str(config.path.parent))
        if "{" not in program and shutil.which(program) is None:
            raise ClusterConfigError(f"{config.path}: [[sources]] #{i}: command {source.command[0]!r} not found "
                                     f"(not an executable file, nor a program on PATH)")


def _secret(doc: dict, where: str) -> bytes:
    if "secret_env" in doc:
        value = os.environ.get(doc["secret_env"])
        if not value:
            raise ClusterConfigError(f"{where}: secret_env names ${doc['secret_env']}, which is not set")
        return value.encode()
    secret = _get(doc, "secret", str, where)
    if len(secret) < 8:
        raise ClusterConfigError(f"{where}: 'secret' must have at least 8 characters")
    return secret.encode()
