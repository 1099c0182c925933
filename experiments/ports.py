"""Free loopback ports for the local clusters experiments and integration tests start.

A port the kernel hands out for ``bind(0)`` lies in its ephemeral range, and once released any outgoing
connection on the machine (a node dialling, an MQTT client, a delay relay) can take it as its local port
before the process meant to listen on it binds it: "address already in use".  Ports chosen *below* that
range are taken only by explicit binds, so one chosen here stays free until its listener binds it —
unless another process chose it meanwhile: test workers and experiments choose dozens of ports each,
seconds before their clusters bind them.  So each port chosen is also leased, for :data:`LEASE_S`, by a
file created exclusively in :data:`LEASES`; other processes skip a port under a live lease.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: How many ports below the ephemeral range are chosen from.
SPAN = 20_000
#: Where the leases are: one empty file per port, its modification time the lease's start.
LEASES = Path(tempfile.gettempdir()) / "replicast-port-leases"
#: How long a chosen port stays the chooser's: longer than any cluster takes to start.
LEASE_S = 600.0


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
        port = chooser.randrange(max(1024, low - SPAN), low)
        if port in ports or (taken is not None and port in taken):
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        if not _lease(port):
            continue
        ports.append(port)
    if taken is not None:
        taken.update(ports)
    return ports


def _lease(port: int) -> bool:
    """Whether ``port`` is now leased to this process: its lease file was created here, or the one
    found had expired and was replaced."""
    LEASES.mkdir(parents=True, exist_ok=True)
    path = LEASES / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return True
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < LEASE_S:
                    return False
                path.unlink()
            except FileNotFoundError:
                pass
    return False
