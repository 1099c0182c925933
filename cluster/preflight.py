"""Checks ``cluster up`` makes before starting anything (docs/cluster.md).

Every port a local cluster will listen on — each node's ``port``, ``metrics_port`` and
``source_port``, and the embedded broker's — must be in 1–65535, used once per address, and free
(a bind test, with ``SO_REUSEADDR`` as the node's own listeners, so a port in TIME_WAIT passes).
A failure is one line naming the node and the port, before any process is started.
"""

from __future__ import annotations

import socket

from replicast.cluster.host_agent import bind_problem
from replicast.engine.cluster_config import ClusterConfig
from replicast.cluster.processes import ClusterError

WILDCARDS = {"", "0.0.0.0", "::"}


def listeners(config: ClusterConfig) -> list[tuple[str, str, str, int]]:
    """``(owner, key, host, port)`` for every port the cluster will listen on, in file order."""
    found = []
    for spec in config.nodes.values():
        for key in ("port", "metrics_port", "source_port"):
            port = getattr(spec, key)
            if port is not None:
                found.append((f"node {spec.name}", key, spec.host, port))
    if config.broker == "embedded":
        found.append(("the embedded broker", "[mqtt] port", config.broker_host, config.broker_port))
    return found


def check_ports(config: ClusterConfig, *, bind: bool = True) -> None:
    """Raise :class:`ClusterError` for the first out-of-range, duplicate or (with ``bind``) busy port."""
    where = str(config.path)
    seen: list[tuple[str, int, str]] = []         # (address, port, "node a's port")
    addresses: dict[str, str] = {}
    for owner, key, host, port in listeners(config):
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise ClusterError(f"{where}: {owner}: {key} {port} is out of range (1-65535)")
        if host not in addresses:
            addresses[host] = _address(host, where, owner)
        address = addresses[host]
        for other_address, other_port, other in seen:
            if port == other_port and (address == other_address or WILDCARDS & {address, other_address}):
                raise ClusterError(f"{where}: {owner}: {key} {port} is already {other}")
        seen.append((address, port, f"{owner}'s {key}" if not owner.startswith("the ") else f"{owner}'s port"))
    if bind:
        for owner, key, host, port in listeners(config):
            problem = bind_problem(host, port)
            if problem is not None:
                raise ClusterError(f"{where}: {owner}: {key} {port} on {host} cannot be used: {problem}")


def _address(host: str, where: str, owner: str) -> str:
    if host in WILDCARDS:
        return host
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as error:
        raise ClusterError(f"{where}: {owner}: host {host!r} does not resolve ({error})") from None
