"""Small placement instances built by hand, and Hypothesis strategies for random ones."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import strategies as st

from replicast.placement.coordinates import Vivaldi
from replicast.placement.model import Deployment, Network, Workload, connect, pinned_deployment, uniform_network


def line_network(positions_ms, capacity: float = 1.0) -> Network:
    """Servers on a line: the one-way latency between two is the distance of their positions."""
    p = np.asarray(positions_ms, dtype=float)
    return uniform_network([f"s{i}" for i in range(len(p))], np.abs(p[:, None] - p[None]), capacity=capacity)


def chain(pinned_entry: int, pinned_app: int, *, rate=1.0, operators=("o",), load=0.1) -> Workload:
    """entry e -> operators in a chain -> application a."""
    names = tuple(operators)
    inputs = {}
    upstream = "e"
    for name in names:
        inputs[name] = (upstream,)
        upstream = name
    inputs["a"] = (upstream,)
    rates = {"e": rate, **{n: rate for n in names}}
    loads = {"e": 0.0, **{n: load for n in names}, "a": 0.0}
    return Workload(("e",), names, ("a",), inputs, rates, loads, {"e": pinned_entry, "a": pinned_app})


def deployed(workload: Workload, placed, without=()) -> Deployment:
    """Pinned entry points and applications, then ``placed`` (replica, server) pairs wired as Alg. 5 does,
    minus the stream replicas ``without``."""
    deployment = pinned_deployment(workload)
    for replica, server in placed:
        deployment.add_replica(replica, server)
        connect(deployment, workload, replica)
    for s in without:
        deployment.remove_stream(s)
    return deployment


@st.composite
def networks(draw, min_servers=3, max_servers=9):
    """Random asymmetric latency matrices (1-200 ms) and capacities."""
    n = draw(st.integers(min_servers, max_servers))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    latency = rng.uniform(1, 200, size=(n, n))
    np.fill_diagonal(latency, 0)
    capacity = rng.choice([0.5, 1.0, 2.0], size=n)
    load = rng.uniform(0, 0.3, size=n)
    vivaldi = Vivaldi(n, random.Random(seed))
    for _ in range(60):               # rough coordinates suffice: relaxation only picks a start
        peers = vivaldi.random_peers()
        vivaldi.observe(np.arange(n), peers, 2 * latency[np.arange(n), peers])
    return Network(tuple(f"s{i}" for i in range(n)), latency, capacity, load, vivaldi.coordinates)


@st.composite
def workloads(draw, n_servers: int, max_operators=5):
    """Random DAGs: 1-2 entry points, operators with 1-2 inputs from earlier nodes, 1-2 applications."""
    streams = tuple(f"e{i}" for i in range(draw(st.integers(1, 2))))
    operators = tuple(f"o{i}" for i in range(draw(st.integers(1, max_operators))))
    applications = tuple(f"a{i}" for i in range(draw(st.integers(1, 2))))
    inputs = {}
    earlier = list(streams)
    for name in operators:
        k = draw(st.integers(1, min(2, len(earlier))))
        inputs[name] = tuple(draw(st.lists(st.sampled_from(earlier), min_size=k, max_size=k, unique=True)))
        earlier.append(name)
    for name in applications:
        inputs[name] = (draw(st.sampled_from(operators)),)
    rate = {x: draw(st.floats(0.1, 10)) for x in (*streams, *operators)}
    load = {x: draw(st.floats(0.0, 0.2)) for x in (*streams, *operators, *applications)}
    pinned = {x: draw(st.integers(0, n_servers - 1)) for x in (*streams, *applications)}
    return Workload(streams, operators, applications, inputs, rate, load, pinned)


def random_min_cost(data, kmax: tuple[int, int]):
    """A random network and workload (Hypothesis ``data``) and Alg. 5's deployment of kmax drawn from
    ``kmax`` (low, high) with α = 1 and dmin = 0; None when the instance has no feasible deployment."""
    from replicast.placement.deployment import DeployConfig, min_cost
    from replicast.placement.errors import PlacementError

    network = data.draw(networks(min_servers=4, max_servers=8))
    workload = data.draw(workloads(network.n))
    k = data.draw(st.integers(*kmax))
    try:
        return network, workload, k, min_cost(network, workload, DeployConfig(kmax=k, alpha=1.0, dmin_ms=0))
    except PlacementError:
        return None
