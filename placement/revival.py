"""Revival of collected replicas (§V-C), as a pure decision.

"If an operator replica observes delays longer than a threshold (say 10 seconds) across its input
streams, it first finds garbage-collected input streams that connect to functioning upstream
replicas.  If there is such one, it revives the stream replica.  Otherwise, it revives a
garbage-collected upstream operator replica and acquires a new connection from that one."  If the
coordinator's cost is under ``θ`` it may also *create* an upstream replica.

:func:`revive` takes one hindered replica and returns what to bring back, per input port whose live
stream replicas are *all* late (a port with no live stream counts as late):

1. ``STREAM``: the cheapest collected stream replica into that port whose source replica is deployed
   on a live server;
2. ``REPLICA``: else the cheapest collected replica of the upstream node whose old server is live and
   still passes Alg. 5's ``α``/``dmin`` test, redeployed there, fed by every live replica of its own
   inputs, and connected to the hindered replica (it joins mid-stream through the replica lifecycle);
3. ``CREATE`` (only with ``allow_create``): a new replica of the upstream node on the cheapest live
   candidate server, wired the same way;
4. ``NONE``: nothing to do (e.g. the upstream is a pinned entry point with no collected stream).

"Cheapest" is the cost (§V-A) of the streams added.  Entry points are pinned, so never revived or
created here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.constraints import DeployConfig, candidates
from replicast.placement.cost import placement_cost
from replicast.placement.model import Deployment, Network, Workload, server_loads


class Action(enum.Enum):
    STREAM = "revive stream replica"
    REPLICA = "revive operator replica"
    SINK = "create sink replica"
    CREATE = "create operator replica"
    NONE = "nothing to revive"


@dataclass
class Collected:
    """What garbage collection took away (the coordinator's soft state): streams, and replicas with their last server."""

    streams: set[StreamReplica] = field(default_factory=set)
    replicas: dict[ReplicaId, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Revival:
    """Bring back ``streams`` (and first deploy ``replica`` on ``server``) for input ``port`` of ``hindered``."""

    hindered: ReplicaId
    port: int
    action: Action
    streams: tuple[StreamReplica, ...] = ()
    replica: ReplicaId | None = None
    server: int | None = None


def late_ports(replica: ReplicaId, deployment: Deployment, workload: Workload, delays_us: Mapping[StreamReplica, int],
               threshold_us: int) -> list[int]:
    """Input ports of ``replica`` whose every live stream replica is delayed past ``threshold_us``."""
    late = []
    for port in range(len(workload.inputs.get(replica.name, ()))):
        live = [s for s in deployment.in_streams(replica) if s.port == port]
        if all(delays_us.get(s, 0) > threshold_us for s in live):
            late.append(port)
    return late


def revive(replica: ReplicaId, delays_us: Mapping[StreamReplica, int], threshold_us: int, deployment: Deployment,
           collected: Collected, live: set[int], network: Network, workload: Workload, config: DeployConfig, *,
           allow_create: bool = False) -> list[Revival]:
    """What to revive for ``replica`` (one :class:`Revival` per late port; pure: nothing is changed)."""
    out = []
    for port in late_ports(replica, deployment, workload, delays_us, threshold_us):
        upstream = workload.inputs[replica.name][port]
        out.append(_stream(replica, port, deployment, collected, live, network, workload)
                   or _replica(replica, port, upstream, deployment, collected, live, network, workload, config)
                   or (allow_create and _create(replica, port, upstream, deployment, collected, live, network, workload,
                                                config))
                   or Revival(replica, port, Action.NONE))
    return out


def _stream(replica, port, deployment, collected, live, network, workload) -> Revival | None:
    usable = [s for s in collected.streams
              if s.target == replica and s.port == port and deployment.hosts.get(s.source) in live]
    if not usable:
        return None
    lat = network.latency_ms
    best = min(usable, key=lambda s: (workload.rate[s.source.name] * lat[deployment.hosts[s.source], deployment.hosts[replica]],
                                      s.source))
    return Revival(replica, port, Action.STREAM, (best,))


def _feeds(upstream: ReplicaId, replica: ReplicaId, port: int, deployment: Deployment, workload: Workload) -> tuple[StreamReplica, ...]:
    inputs = [StreamReplica(u, upstream, p) for p, name in enumerate(workload.inputs.get(upstream.name, ()))
              for u in deployment.replicas_of(name)]
    return (*inputs, StreamReplica(upstream, replica, port))


def _price(upstream: str, target_server: int, deployment: Deployment, network: Network, workload: Workload) -> np.ndarray:
    """Cost, for every server, of feeding a new replica of ``upstream`` there and sending its output to ``target_server``."""
    lat = network.latency_ms
    price = workload.rate[upstream] * lat[:, target_server]
    for name in workload.inputs.get(upstream, ()):
        for s in deployment.servers_of(name):
            price = price + workload.rate[name] * lat[s]
    return price


def _replica(replica, port, upstream, deployment, collected, live, network, workload, config) -> Revival | None:
    if workload.kind(upstream) != "operator":
        return None
    allowed = _allowed(upstream, deployment, live, network, workload, config)
    price = _price(upstream, deployment.hosts[replica], deployment, network, workload)
    usable = [(price[s], r, s) for r, s in collected.replicas.items() if r.name == upstream and allowed[s]
              and r not in deployment.hosts]
    if not usable:
        return None
    _, best, server = min(usable)
    return Revival(replica, port, Action.REPLICA, _feeds(best, replica, port, deployment, workload), best, server)


def _create(replica, port, upstream, deployment, collected, live, network, workload, config) -> Revival | None:
    if workload.kind(upstream) != "operator":
        return None
    allowed = _allowed(upstream, deployment, live, network, workload, config)
    if not allowed.any():
        return None
    price = _price(upstream, deployment.hosts[replica], deployment, network, workload)
    server = int(np.argmin(np.where(allowed, price, np.inf)))
    used = [r.index for r in collected.replicas if r.name == upstream]      # a new index, never a collected one's
    new = ReplicaId(upstream, max([deployment.next_index(upstream), *(i + 1 for i in used)]))
    return Revival(replica, port, Action.CREATE, _feeds(new, replica, port, deployment, workload), new, server)


def sink_revivals(deployment: Deployment, live: set[int], network: Network, workload: Workload,
                  config: DeployConfig, used: Mapping[str, int]) -> list[Revival]:
    """Sink replicas are revived like operator replicas (docs/consume.md): an application with
    fewer than ``config.sink_replicas`` replicas in ``deployment`` (a server of one went silent,
    coordinator rule 4) gets a new one on the live candidate server where its input streams cost
    least (Alg. 5 lines 6–9), fed by every replica of its input; it joins from a live sink
    replica's snapshot, so it publishes with the same output ids.  ``used``: per application, the
    highest replica index ever placed (a new replica never takes the index of one that may return)."""
    revivals = []
    for app in workload.applications:
        if not 0 < deployment.count(app) < config.sink_replicas:
            continue
        allowed = _allowed(app, deployment, live, network, workload, config)
        if not allowed.any():
            continue
        server = int(np.argmin(np.where(allowed, placement_cost(app, deployment, network, workload), np.inf)))
        new = ReplicaId(app, max(deployment.next_index(app), used.get(app, -1) + 1))
        feeds = tuple(StreamReplica(u, new, port) for port, name in enumerate(workload.inputs[app])
                      for u in deployment.replicas_of(name))
        revivals.append(Revival(new, 0, Action.SINK, feeds, new, server))
    return revivals


def allowed_servers(name: str, deployment: Deployment, live: set[int], network: Network, workload: Workload,
                    config: DeployConfig) -> np.ndarray:
    """Live servers that may host one more replica of ``name`` (Alg. 5's α and dmin), as a boolean mask."""
    return _allowed(name, deployment, live, network, workload, config)


def _allowed(name, deployment, live, network, workload, config) -> np.ndarray:
    mask = candidates(name, deployment, network, workload, config, server_loads(deployment, network, workload))
    up = np.zeros(network.n, dtype=bool)
    up[sorted(live)] = True
    return mask & up


def apply(revival: Revival, deployment: Deployment, collected: Collected) -> None:
    """Carry out ``revival`` on the coordinator's view (and forget what it brought back from ``collected``)."""
    if revival.replica is not None and revival.replica not in deployment.hosts:
        deployment.add_replica(revival.replica, revival.server)
        collected.replicas.pop(revival.replica, None)
    for s in revival.streams:
        if s not in deployment.streams:
            deployment.add_stream(s)
        collected.streams.discard(s)
