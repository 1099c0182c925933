"""Trace baggage: what a batch carries for the trace queries that need it (docs/tracing.md, "Baggage").

A baggage path is a tuple of hops ``replica@node@µs`` (when each emission happened), oldest first,
at most :data:`MAX_HOPS`, optionally preceded by ``trace:<trace id>`` (an external producer's W3C
trace, engine/core/tracepoints.py rule 5).  It rides in a batch's ``path`` (engine/messages.py rule
5), so it needs no field of its own in the core; on the wire it is the batch frame's one optional
field (engine/wire.py rule 5).  The simulator's untimed provenance paths (``replica@node``) are
not baggage and stay in-process.  Pure.
"""

from __future__ import annotations

import re

#: Hops a batch's baggage keeps (the newest).
MAX_HOPS = 16
#: Baggage's first entry when the records came with an external trace context.
TRACE_PREFIX = "trace:"
#: A W3C traceparent (version 00), whose trace id it carries.
TRACE_ID = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def hops(path: tuple[str, ...]) -> list[list[str]]:
    """A baggage path's hops as ``[replica@node, µs]`` (its trace id entry left out)."""
    return [hop.rsplit("@", 1) for hop in path if not hop.startswith(TRACE_PREFIX)]


def trace_id(path: tuple[str, ...]) -> str | None:
    """The external trace id a baggage path carries, if any."""
    return path[0][len(TRACE_PREFIX):] if path and path[0].startswith(TRACE_PREFIX) else None


def is_baggage(path: tuple[str, ...]) -> bool:
    """Whether ``path`` is trace baggage (timed hops ``replica@node@µs``) rather than the
    simulator's untimed provenance (``replica@node``, engine/messages.py rule 5)."""
    return bool(path) and path[-1].count("@") == 2 and path[-1].rpartition("@")[2].isdigit()
