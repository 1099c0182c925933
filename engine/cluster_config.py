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
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from replicast.engine.entry import MODES
from replicast.engine.handshake import MAX_NAME
from replicast.engine.mqtt_config import BrokerAddress, MqttSettings, parse_broker_url, parse_mqtt
from replicast.engine.node import MODES as ENGINE_MODES, Mode, NodeOptions, parse_mode
from replicast.engine.placement_config import CoordinatorSettings, coordination_setup, parse_coordinator, pinned_placement
from replicast.engine.query_file import load_query
from replicast.engine.source_protocol import SourceLimits, parse_source_limits
from replicast.engine.toml_file import read_toml
from replicast.operators.config_file import convert
from replicast.operators.errors import ReplicastError
from replicast.operators.query import Query


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
                           mode=self.mode, voters=tuple(sorted(self.nodes)),
                           utility=self.coordinator.utility if self.coordinator is not None else "rank")

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


#: Placeholders a source command may use (expanded by ``cluster up``, see docs/node.md).
SOURCE_PLACEHOLDERS = ("python", "dir", "node", "nodes", "broker_host", "broker_port", "punctuation_ms")

# -- the file's schema: every table a msgspec Struct, unknown keys refused (a typo would otherwise be ignored) --
Port = Annotated[int, Meta(ge=1, le=65535, description="a port number (1-65535)")]
Milliseconds = Annotated[float, Meta(gt=0, lt=86_400_000, description="a positive number of milliseconds (below a day)")]
Count = Annotated[int, Meta(gt=0, lt=2**40, description="a positive whole number")]


class _Table(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A table of the cluster file."""


class SshTable(_Table):
    """A node's ``ssh = { host, user, port, key, known_hosts, python, dir }`` (all optional)."""
    host: str | None = None
    user: str | None = None
    port: Port = 22
    key: str | None = None
    known_hosts: str | None = None
    python: str = "python3"
    dir: str = ".replicast-cluster"


class NodeTable(_Table):
    name: str
    port: Port
    host: str = "127.0.0.1"
    metrics_port: Port | None = None
    source_port: Port | None = None
    ssh: SshTable | None = None


class OutputTable(_Table):
    file: str | None = None
    mqtt: bool = True
    brokers: list[str] = []


class SourceTable(_Table):
    node: str
    command: list[Any]                 # each argument as its text (str(5) is "5")


class TlsTable(_Table):
    cert: str | None = None
    key: str | None = None
    ca: str | None = None


class ClusterFile(_Table):
    """The whole file (docs/node.md).  ``[mqtt]``, ``[coordinator]`` and ``[source_connections]`` are
    checked by their own modules; ``placement`` is node lists or ``"min-cost"``."""
    query: str
    nodes: list[NodeTable]
    placement: dict[str, Any] | str
    secret: str | None = None
    secret_env: str | None = None
    punctuation_ms: Milliseconds = 100.0
    heartbeat_ms: Milliseconds = 500.0
    peer_timeout_ms: Milliseconds = 3000.0
    join_timeout_ms: Milliseconds = 3000.0
    retention_items: Count = 1_000_000
    entry_mode: str = "source"
    entry_modes: dict[str, str] = {}
    mode: str = Mode.REPLICATION.value
    mqtt: dict[str, Any] = {}
    outputs: dict[str, OutputTable] = {}
    sources: list[SourceTable] = []
    tls: TlsTable | None = None
    name: Any = None
    coordinator: dict[str, Any] | None = None
    source_connections: dict[str, Any] = {}


def load_cluster(path: str | Path) -> ClusterConfig:
    """Read and check the cluster file at ``path`` (relative paths inside are relative to it)."""
    return parse_cluster(read_toml(path, "cluster file", ClusterConfigError), Path(path))


def parse_cluster(doc: dict, path: Path) -> ClusterConfig:
    where, base = str(path), path.parent
    file = convert(doc, ClusterFile, where, error=ClusterConfigError, named_by="name")
    nodes = _nodes(file, where, base)
    placement = {}
    placed = file.placement
    if isinstance(placed, str) and placed != "min-cost":
        raise ClusterConfigError(f"{where}: 'placement' must be a table of node lists or \"min-cost\", got {placed!r}")
    for name, value in (placed.items() if isinstance(placed, dict) else ()):
        if not isinstance(value, list) or not value or not all(v in nodes for v in value):
            raise ClusterConfigError(f"{where}: placement.{name}: expected a non-empty list of node names "
                                     f"({', '.join(nodes)}), got {value!r}")
        placement[name] = value
    secret = _secret(file, where)
    modes = {}
    for stream, mode in {"*": file.entry_mode, **file.entry_modes}.items():
        if mode not in MODES:
            raise ClusterConfigError(f"{where}: entry mode of {stream!r} must be one of {MODES}, got {mode!r}")
        modes[stream] = mode
    engine_mode = parse_mode(file.mode)
    if engine_mode is None:
        raise ClusterConfigError(f"{where}: 'mode' must be one of {', '.join(ENGINE_MODES)}, got {file.mode!r}")
    mqtt_settings = parse_mqtt(file.mqtt, where, base, nodes, ClusterConfigError)
    broker, host, port = mqtt_settings.default.url, mqtt_settings.default.host, mqtt_settings.default.port
    outputs = {}
    for app, table in file.outputs.items():
        w = f"{where}: [outputs.{app}]"
        brokers = tuple(parse_broker_url(url, f"{w} brokers", ClusterConfigError) for url in table.brokers)
        if brokers and not table.mqtt:
            raise ClusterConfigError(f"{w}: 'brokers' with mqtt = false (nothing would be published)")
        outputs[app] = OutputSpec(base / table.file if table.file else None, table.mqtt, brokers)
    sources = []
    for i, table in enumerate(file.sources, start=1):
        w = f"{where}: [[sources]] #{i}"
        if table.node not in nodes:
            raise ClusterConfigError(f"{w}: unknown node {table.node!r}")
        command = [str(a) for a in table.command]
        if not command:
            raise ClusterConfigError(f"{w}: 'command' must not be empty")
        for arg in command:
            _check_placeholders(arg, w)
        sources.append(SourceSpec(table.node, command))
    tls = {k: base / v for k in ("cert", "key", "ca") if file.tls is not None and (v := getattr(file.tls, k)) is not None}
    if tls and set(tls) != {"cert", "key", "ca"}:
        raise ClusterConfigError(f"{where}: [tls] needs exactly cert, key and ca (paths), got {sorted(tls)}")
    config = ClusterConfig(
        path=path, query_path=base / file.query, nodes=nodes, placement=placement, secret=secret,
        punctuation_ms=file.punctuation_ms, heartbeat_ms=file.heartbeat_ms, peer_timeout_ms=file.peer_timeout_ms,
        join_timeout_ms=file.join_timeout_ms, retention_items=file.retention_items, mode=engine_mode,
        broker=broker, broker_host=host, broker_port=port, mqtt=mqtt_settings, outputs=outputs, sources=sources, tls=tls,
        source_connections=parse_source_limits(file.source_connections, f"{where}: [source_connections]",
                                               ClusterConfigError, has_tls=bool(tls)))
    if config.peer_timeout_ms <= config.heartbeat_ms:
        raise ClusterConfigError(f"{where}: 'peer_timeout_ms' ({config.peer_timeout_ms:g}) must be longer than "
                                 f"'heartbeat_ms' ({config.heartbeat_ms:g}), or every link times out")
    query = config.query
    config.entry_modes = {s: modes.get(s, modes["*"]) for s in query.streams}
    coordinated = placed == "min-cost" or file.coordinator is not None
    if coordinated and engine_mode is not Mode.REPLICATION:
        raise ClusterConfigError(f"{where}: placement = \"min-cost\" and [coordinator] need mode \"replication\" "
                                 f"(the coordinator deploys and collects replicated operators), got {engine_mode.value!r}")
    if coordinated:
        config.coordinator = parse_coordinator(file.coordinator or {}, f"{where}: [coordinator]", ClusterConfigError,
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


def _nodes(file: ClusterFile, where: str, base: Path) -> dict[str, NodeSpec]:
    nodes: dict[str, NodeSpec] = {}
    for i, table in enumerate(file.nodes, start=1):
        w, name = f"{where}: [[nodes]] #{i}", table.name
        if not name or len(name) > MAX_NAME or not name.isprintable():
            raise ClusterConfigError(f"{w}: 'name' must be 1-{MAX_NAME} printable characters, got {name!r}")
        if name in nodes:
            raise ClusterConfigError(f"{w}: node name {name!r} is used twice")
        nodes[name] = NodeSpec(name, table.host, table.port, table.metrics_port, table.source_port,
                               _ssh(table.ssh, table.host, base))
    return nodes


def _ssh(ssh: SshTable | None, host: str, base: Path) -> SshSpec | None:
    """A node's ssh table as an :class:`SshSpec` (``ssh = {}`` reaches the node's own ``host`` on port 22
    as the current user); key files are relative to the file."""
    if ssh is None:
        return None
    files = {k: base / Path(v).expanduser() for k in ("key", "known_hosts") if (v := getattr(ssh, k)) is not None}
    return SshSpec(host=ssh.host if ssh.host is not None else host, user=ssh.user, port=ssh.port, python=ssh.python,
                   dir=ssh.dir, **files)


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


def _secret(file: ClusterFile, where: str) -> bytes:
    if file.secret_env is not None:
        value = os.environ.get(file.secret_env)
        if not value:
            raise ClusterConfigError(f"{where}: secret_env names ${file.secret_env}, which is not set")
        return value.encode()
    if file.secret is None:
        raise ClusterConfigError(f"{where}: missing key 'secret'")
    if len(file.secret) < 8:
        raise ClusterConfigError(f"{where}: 'secret' must have at least 8 characters")
    return file.secret.encode()
