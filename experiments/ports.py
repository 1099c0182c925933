"""Free loopback ports for the local clusters experiments and integration tests start.

A port the kernel hands out for ``bind(0)`` lies in its ephemeral range, and once released any outgoing
connection on the machine (a node dialling, an MQTT client, a delay relay) can take it as its local port
before the process meant to listen on it binds it: "address already in use".  Ports chosen *below* that
range are taken only by explicit binds, so one chosen here stays free until its listener binds it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_loopback_ports(n: int, taken: set[int] | None = None) -> list[int]:
    """``n`` distinct loopback ports nothing listens on, below the ephemeral range and not in
    ``taken`` (which then holds them too, when given)."""
    low = ephemeral_low()
    chooser = random.Random()                 # seeded from the OS: concurrent processes choose apart
    ports: list[int] = []
    while len(ports) < n:
        port = chooser.randrange(max(1024, low - 20_000), low)
        if port in ports or (taken is not None and port in taken):
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    if taken is not None:
        taken.update(ports)
    return ports
