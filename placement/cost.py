"""The network cost model of §V-A.

``cost(S) = rate(S) · latency(S)`` for a stream replica ``S`` (a bandwidth-delay product: the
longer data stays in the network the more of it it uses), and ``cost(R) = Σ_{S∈R} cost(S)`` for
a collection.  Units: records/s × ms.  A stream replica between two replicas on the same server
has latency 0 and so costs nothing, and it uses no network bandwidth either.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from replicast.operators.plan import StreamReplica
from replicast.placement.model import Deployment, Network, Workload


def stream_cost(stream: StreamReplica, deployment: Deployment, network: Network, workload: Workload) -> float:
    """``rate(S) · latency(S)``: the rate of the source's stream times the link's one-way delay."""
    hosts = deployment.hosts
    return workload.rate[stream.source.name] * float(network.latency_ms[hosts[stream.source], hosts[stream.target]])


def cost(streams: Iterable[StreamReplica], deployment: Deployment, network: Network, workload: Workload) -> float:
    """``cost(R)``: the sum over the stream replicas ``R``."""
    return sum(stream_cost(s, deployment, network, workload) for s in streams)


def total_cost(deployment: Deployment, network: Network, workload: Workload) -> float:
    """The network cost of a whole deployment: every live stream replica."""
    return cost(deployment.streams, deployment, network, workload)


def bandwidth(deployment: Deployment, workload: Workload) -> float:
    """Records/s crossing the network: the rates of the stream replicas between different servers."""
    hosts = deployment.hosts
    return sum(workload.rate[s.source.name] for s in deployment.streams if hosts[s.source] != hosts[s.target])


def placement_cost(name: str, deployment: Deployment, network: Network, workload: Workload) -> np.ndarray:
    """``cost_s(in(o) ∪ out(o))`` for a new replica of ``name`` on every server ``s`` at once (Alg. 5 line 9).

    ``in(o)`` holds the streams from every deployed replica of each input of ``name``, ``out(o)``
    those to every deployed replica of each consumer: Σ rate·latency(source, s) + Σ rate·latency(s, dest).
    """
    lat = network.latency_ms
    total = np.zeros(network.n)
    for upstream in workload.inputs.get(name, ()):
        servers = deployment.servers_of(upstream)
        if servers:
            total += workload.rate[upstream] * lat[servers].sum(axis=0)
    rate = workload.rate.get(name, 0.0)
    for consumer, _port in workload.consumers.get(name, ()):
        servers = deployment.servers_of(consumer)
        if servers:
            total += rate * lat[:, servers].sum(axis=1)
    return total
