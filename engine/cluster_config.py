"""Cluster files (TOML): the nodes, the query, the broker, timing, secret and a manual placement.

One file describes the whole cluster; every node reads the same file and picks its own part by
name (``replicast node --config cluster.toml --name n1``), and ``replicast cluster up`` starts all
of it on loopback.  Every mistake is a :class:`ClusterConfigError` naming the file and the key.
See ``docs/node.md`` for the format.
"""

from __future__ import annotations

from functools import partial

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from engine.entry import MODES
from engine.node import NodeOptions
from operators.config_file import read_toml, typed_key
from operators.errors import ReplicastError
from operators.query import Query
from operators.query_file import load_query


class ClusterConfigError(ReplicastError):
    """A cluster or node configuration is malformed."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host: str
    port: int
    metrics_port: int | None
    #: TCP port where external sources may connect and send ``STREAM PAYLOAD`` lines (optional).
    source_port: int | None = None


@dataclass(frozen=True)
class OutputSpec:
    file: Path | None = None
    mqtt: bool = True


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
    entry_modes: dict[str, str] = field(default_factory=dict)
    broker: str = "embedded"                 # "embedded" or mqtt://host:port
    broker_host: str = "127.0.0.1"
    broker_port: int = 1883
    outputs: dict[str, OutputSpec] = field(default_factory=dict)
    sources: list[SourceSpec] = field(default_factory=list)
    tls: dict[str, Path] = field(default_factory=dict)
    _query: Query | None = None

    @property
    def query(self) -> Query:
        if self._query is None:
            self._query = load_query(self.query_path)
        return self._query

    def options(self) -> NodeOptions:
        return NodeOptions(punctuation_us=round(self.punctuation_ms * 1000), heartbeat_us=round(self.heartbeat_ms * 1000),
                           peer_timeout_us=round(self.peer_timeout_ms * 1000), entry_modes=dict(self.entry_modes))

    def mqtt_address(self) -> tuple[str, int]:
        return self.broker_host, self.broker_port

    def tls_files(self, node: str) -> dict[str, Path]:
        """Node ``node``'s ``[tls]`` paths (``cert``, ``key``, ``ca``) with ``{node}`` replaced by its
        name, so one file can give every node its own certificate; empty without ``[tls]``."""
        return {key: Path(str(path).replace("{node}", node)) for key, path in self.tls.items()}


_TOP = {"query", "punctuation_ms", "heartbeat_ms", "peer_timeout_ms", "secret", "secret_env", "entry_mode",
        "entry_modes", "mqtt", "nodes", "placement", "outputs", "sources", "tls", "name"}


def load_cluster(path: str | Path) -> ClusterConfig:
    """Read and check the cluster file at ``path`` (relative paths inside are relative to it)."""
    return parse_cluster(read_toml(path, "cluster file", ClusterConfigError), Path(path))


_get = partial(typed_key, error=ClusterConfigError)


def parse_cluster(doc: dict, path: Path) -> ClusterConfig:
    where, base = str(path), path.parent
    unknown = set(doc) - _TOP
    if unknown:
        raise ClusterConfigError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(_TOP)})")
    nodes: dict[str, NodeSpec] = {}
    for i, table in enumerate(_get(doc, "nodes", list, where), start=1):
        w = f"{where}: [[nodes]] #{i}"
        name = _get(table, "name", str, w)
        port = _get(table, "port", int, w)
        if name in nodes:
            raise ClusterConfigError(f"{w}: node name {name!r} is used twice")
        nodes[name] = NodeSpec(name, _get(table, "host", str, w, "127.0.0.1"), port,
                               _get(table, "metrics_port", int, w, None), _get(table, "source_port", int, w, None))
    placement = {}
    for name, value in _get(doc, "placement", dict, where).items():
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
    mqtt = _get(doc, "mqtt", dict, where, {})
    broker = _get(mqtt, "broker", str, f"{where}: [mqtt]", "embedded")
    host, port = _get(mqtt, "host", str, f"{where}: [mqtt]", "127.0.0.1"), _get(mqtt, "port", int, f"{where}: [mqtt]", 1883)
    if broker != "embedded":
        url = urlparse(broker)
        if url.scheme not in ("mqtt", "tcp") or not url.hostname:
            raise ClusterConfigError(f"{where}: [mqtt] broker must be \"embedded\" or mqtt://host:port, got {broker!r}")
        host, port = url.hostname, url.port or 1883
    outputs = {}
    for app, table in _get(doc, "outputs", dict, where, {}).items():
        w = f"{where}: [outputs.{app}]"
        file = _get(table, "file", str, w, None)
        outputs[app] = OutputSpec(base / file if file else None, _get(table, "mqtt", bool, w, True))
    sources = []
    for i, table in enumerate(_get(doc, "sources", list, where, []), start=1):
        w = f"{where}: [[sources]] #{i}"
        node = _get(table, "node", str, w)
        if node not in nodes:
            raise ClusterConfigError(f"{w}: unknown node {node!r}")
        sources.append(SourceSpec(node, [str(a) for a in _get(table, "command", list, w)]))
    tls_table = _get(doc, "tls", dict, where, {})
    tls = {k: base / _get(tls_table, k, str, f"{where}: [tls]") for k in tls_table}
    if tls and set(tls) != {"cert", "key", "ca"}:
        raise ClusterConfigError(f"{where}: [tls] needs exactly cert, key and ca (paths), got {sorted(tls)}")
    config = ClusterConfig(
        path=path, query_path=base / _get(doc, "query", str, where), nodes=nodes, placement=placement,
        secret=secret, punctuation_ms=float(_get(doc, "punctuation_ms", (int, float), where, 100.0)),
        heartbeat_ms=float(_get(doc, "heartbeat_ms", (int, float), where, 500.0)),
        peer_timeout_ms=float(_get(doc, "peer_timeout_ms", (int, float), where, 3000.0)),
        broker=broker, broker_host=host, broker_port=port, outputs=outputs, sources=sources, tls=tls)
    query = config.query
    config.entry_modes = {s: modes.get(s, modes["*"]) for s in query.streams}
    names = [*query.streams, *query.operators, *query.applications]
    missing = [n for n in names if n not in placement]
    extra = [n for n in placement if n not in names]
    if missing or extra:
        raise ClusterConfigError(f"{where}: [placement] must list every stream, operator and application of "
                                 f"{config.query_path}" + (f"; missing {missing}" if missing else "")
                                 + (f"; unknown {extra}" if extra else ""))
    for app in query.applications:
        if len(placement[app]) != 1:
            raise ClusterConfigError(f"{where}: placement.{app}: an application runs on exactly one node")
    for app in outputs:
        if app not in query.applications:
            raise ClusterConfigError(f"{where}: [outputs.{app}]: no such application")
    return config


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
