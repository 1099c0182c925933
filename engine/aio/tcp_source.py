"""TCP source connections: the other way records enter an entry point (§II-B), besides MQTT.

A source connects to a node's ``source_port`` and sends newline-terminated lines
``STREAM PAYLOAD``, where ``PAYLOAD`` is exactly what it would publish on MQTT topic
``replicast/in/STREAM``: a JSON item or list of items (``{"ts": µs, field: value, …}`` or
``{"punctuation": p}``).  Every line goes to :meth:`engine.node.NodeCore.on_source`, so
validation, dead letters and counters are the same as for MQTT.  In source-stamped mode the source
connects to every node that hosts a replica of the stream's entry point and sends each of them the
same lines, as MQTT would deliver them to every subscriber.

A line longer than :data:`MAX_LINE` closes the connection (logged); what was accepted before stays
accepted.  The connection is one-way: the node never writes to it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

log = logging.getLogger("replicast.node")

#: Longest accepted line, in bytes (a batch of a few thousand records).
MAX_LINE = 4 * 1024 * 1024


def split_line(line: bytes) -> tuple[str, bytes]:
    """``b"cpu {...}"`` → ``("cpu", b"{...}")``; a line without a space names no stream."""
    stream, _, payload = line.strip().partition(b" ")
    return stream.decode("utf-8", errors="replace"), payload


async def serve_source(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       feed: Callable[[str, bytes], None]) -> None:
    """Read ``STREAM PAYLOAD`` lines from one source connection and hand each to ``feed``."""
    peer = writer.get_extra_info("peername")
    log.info("source connected from %s", peer, extra={"event": "source_up"})
    lines = 0
    try:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                line = end.partial               # the last line may lack its newline
                if not line.strip():
                    break
            except asyncio.LimitOverrunError:
                log.warning("source %s sent a line over %d bytes; closing it", peer, MAX_LINE,
                            extra={"event": "source_refused"})
                break
            if line.strip():
                feed(*split_line(line))
                lines += 1
            if reader.at_eof():
                break
    except ConnectionError as error:
        log.info("source %s dropped: %s", peer, error, extra={"event": "source_down"})
    finally:
        log.info("source %s closed after %d line(s)", peer, lines, extra={"event": "source_down"})
        writer.close()
