"""Whether nodes are ready: ``replicast_ready 1`` on their metrics endpoint.

Also ``python -m cluster.readiness TIMEOUT HOST:METRICS_PORT…``, which ``cluster up`` runs inside
the hub namespace of a netem emulation (the host cannot reach the nodes there): exit 0 once every
node reports ready, 1 at the time-out.
"""

from __future__ import annotations

import sys
import time

from replicast.cluster import host_agent


def node_ready(host: str, metrics_port: int) -> bool:
    """Whether the node whose metrics are at ``host:metrics_port`` reports ``replicast_ready 1``."""
    return host_agent.ready(host, metrics_port)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 1:
        print("usage: python -m cluster.readiness TIMEOUT HOST:PORT...", file=sys.stderr)
        return 2
    deadline, waiting = time.monotonic() + float(args[0]), list(args[1:])
    while waiting and time.monotonic() < deadline:
        waiting = [a for a in waiting if not node_ready(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1]))]
        time.sleep(0.1)
    if waiting:
        print("not ready: " + " ".join(waiting), file=sys.stderr)
    return 1 if waiting else 0


if __name__ == "__main__":
    raise SystemExit(main())
