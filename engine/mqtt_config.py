"""The ``[mqtt]`` table of a cluster file: brokers, credentials, TLS and sessions (docs/node.md, "MQTT").

* ``broker``: ``"embedded"`` (the amqtt broker ``cluster up`` starts on ``host``:``port``),
  ``mqtt://host[:1883]`` or ``mqtts://host[:8883]`` (TLS).  Every node uses it unless
  ``[mqtt.brokers]`` gives the node its own: one broker per site, so no broker is a single point of
  failure (each entry-point replica reads its own site's broker; sources publish to every broker
  of their stream's entry replicas; the duplicate filters make the result exact, §IV-B).
* ``username`` and ``password_env`` (the *name* of an environment variable holding the password:
  never the password itself, in the file or on a command line).
* ``ca`` (the CA file that signed the broker's certificate; default: the system's CAs), ``cert``
  and ``key`` (optional client certificate); ``{node}`` in a path is the node's name.
* ``client_id`` (default ``"replicast-{node}"``: stable, so the broker keeps the node's session
  while it is away) and ``session_expiry_s`` (how long the broker keeps it, MQTT 5).

Pure: no sockets.  Every mistake is raised as the caller's error class, naming file, table, key and value
(types and ranges checked by msgspec against :class:`MqttTable`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import msgspec
from msgspec import Meta

from replicast.operators.config_file import convert

#: URL schemes: scheme -> (TLS?, default port).
SCHEMES = {"mqtt": (False, 1883), "tcp": (False, 1883), "mqtts": (True, 8883), "ssl": (True, 8883)}
DEFAULT_SESSION_EXPIRY_S = 3600


@dataclass(frozen=True)
class BrokerAddress:
    """Where one broker listens; ``url`` is how the cluster file wrote it (used in logs)."""

    url: str
    host: str
    port: int
    tls: bool = False


@dataclass(frozen=True)
class MqttSettings:
    """The parsed ``[mqtt]`` table (module docstring)."""

    default: BrokerAddress
    #: node name -> its own broker ([mqtt.brokers]); nodes not listed use ``default``.
    node_brokers: dict[str, BrokerAddress] = field(default_factory=dict)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    password_env: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    client_id: str = "replicast-{node}"
    session_expiry_s: int = DEFAULT_SESSION_EXPIRY_S

    def broker_for(self, node: str) -> BrokerAddress:
        """The broker node ``node`` reads its input from and publishes to by default."""
        return self.node_brokers.get(node, self.default)

    def identifier(self, node: str) -> str:
        return self.client_id.replace("{node}", node)

    def tls_files(self, node: str) -> dict[str, Path]:
        """``ca``, ``cert``, ``key`` that are set, with ``{node}`` replaced by the node's name."""
        files = {"ca": self.ca, "cert": self.cert, "key": self.key}
        return {k: Path(str(p).replace("{node}", node)) for k, p in files.items() if p is not None}


def parse_broker_url(url: str, where: str, error: type[Exception]) -> BrokerAddress:
    """``mqtt://host:port`` or ``mqtts://host:port`` as a :class:`BrokerAddress`."""
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES or not parsed.hostname or parsed.path not in ("", "/"):
        raise error(f"{where}: broker must be \"embedded\", mqtt://host:port or mqtts://host:port, got {url!r}")
    if parsed.username or parsed.password:
        raise error(f"{where}: broker {url!r}: put the user in 'username' and the password in the environment "
                    f"('password_env'), not in the URL")
    tls, default_port = SCHEMES[parsed.scheme]
    try:
        port = parsed.port or default_port
    except ValueError:                 # urllib: "Port out of range 0-65535"
        raise error(f"{where}: broker {url!r}: the port must be in 1-65535") from None
    return BrokerAddress(url, parsed.hostname, port, tls)


class MqttTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The ``[mqtt]`` table as written (module docstring); :func:`parse_mqtt` checks what types cannot."""

    broker: str = "embedded"
    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=1, le=65535, description="a port number (1-65535)")] = 1883
    brokers: dict[str, Any] = {}
    username: str | None = None
    password_env: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    client_id: str = "replicast-{node}"
    session_expiry_s: Annotated[int, Meta(gt=0, lt=2**32, description="a positive whole number of seconds below 2^32")] \
        = DEFAULT_SESSION_EXPIRY_S


def parse_mqtt(table: dict, where: str, base: Path, nodes, error: type[Exception]) -> MqttSettings:
    """Check and read ``[mqtt]`` (``table``, as read from the file ``where``)."""
    w = f"{where}: [mqtt]"
    mqtt = convert(table, MqttTable, w, error=error)
    if mqtt.broker == "embedded":
        default = BrokerAddress("embedded", mqtt.host, mqtt.port)
    else:
        default = parse_broker_url(mqtt.broker, w, error)
    node_brokers = {}
    for node, url in mqtt.brokers.items():
        if node not in nodes:
            raise error(f"{w}.brokers: unknown node {node!r} (nodes: {', '.join(nodes)})")
        if not isinstance(url, str):
            raise error(f"{w}.brokers.{node}: expected a broker URL, got {url!r}")
        node_brokers[node] = parse_broker_url(url, f"{w}.brokers.{node}", error)
    password = None
    if mqtt.password_env is not None:
        password = os.environ.get(mqtt.password_env)
        if not password:
            raise error(f"{w}: password_env names ${mqtt.password_env}, which is not set")
    if password is not None and mqtt.username is None:
        raise error(f"{w}: password_env without username")
    paths = {k: base / v for k in ("ca", "cert", "key") if (v := getattr(mqtt, k)) is not None}
    if ("cert" in paths) != ("key" in paths):
        raise error(f"{w}: a client certificate needs both 'cert' and 'key', got only {'cert' if 'cert' in paths else 'key'!r}")
    uses_tls = default.tls or any(b.tls for b in node_brokers.values())
    if paths and not uses_tls:
        raise error(f"{w}: {', '.join(sorted(paths))} given but no broker is mqtts:// (TLS)")
    if not mqtt.client_id or len(mqtt.client_id.replace("{node}", "n" * 64)) > 200:
        raise error(f"{w}: 'client_id' must be 1-200 characters, got {mqtt.client_id!r}")
    return MqttSettings(default, node_brokers, mqtt.username, password, mqtt.password_env, paths.get("ca"),
                        paths.get("cert"), paths.get("key"), mqtt.client_id, mqtt.session_expiry_s)
