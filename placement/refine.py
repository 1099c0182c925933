"""Local refinement after Alg. 5: move single replicas while that lowers the network cost.

Alg. 5 is greedy: a replica placed in phase ``i`` never sees the replicas of later phases, and the
first phase inherits the error of the network coordinates used by spring relaxation.  Refinement
re-applies Alg. 5's own rule (lines 6-9) to replicas already placed: take one replica out, find the
candidate server (same ``α`` and ``dmin`` test, against its peers) with the least
``cost_s(in(o) ∪ out(o))``, and move it there if that is cheaper than where it is.  Every move lowers
the total cost by exactly the difference (a replica's streams are ``in(o) ∪ out(o)``), so rounds
stop; ``max_rounds`` bounds them anyway.  It assumes the complete stream graph between neighbours
(what Alg. 5 builds), i.e. it runs before garbage collection.  This is our addition to the paper
(docs/placement.md gives Alg. 5's distance from the optimum with and without it).
"""

from __future__ import annotations

import numpy as np

from replicast.operators.plan import ReplicaId
from replicast.placement.cost import placement_cost
from replicast.placement.constraints import DeployConfig, candidates
from replicast.placement.model import Deployment, Network, Workload, connect, server_loads

_GAIN = 1e-9        # relative improvement below which a move is not worth it


def refine(deployment: Deployment, network: Network, workload: Workload, config: DeployConfig, *,
           max_rounds: int = 20) -> int:
    """Move operator replicas of ``deployment`` (in place) to cheaper candidate servers; returns the moves."""
    loads = server_loads(deployment, network, workload)
    moves = 0
    for _ in range(max_rounds):
        moved = 0
        for name in workload.operators:
            for replica in deployment.replicas_of(name):
                moved += _improve(replica, deployment, network, workload, config, loads)
        moves += moved
        if not moved:
            break
    return moves


def _improve(replica: ReplicaId, deployment: Deployment, network: Network, workload: Workload,
             config: DeployConfig, loads: np.ndarray) -> bool:
    here = deployment.hosts[replica]
    deployment.remove_replica(replica)
    loads[here] -= workload.load[replica.name]
    allowed = candidates(replica.name, deployment, network, workload, config, loads)
    price = placement_cost(replica.name, deployment, network, workload)
    best = int(np.argmin(np.where(allowed, price, np.inf)))
    there = best if allowed[best] and price[best] < price[here] * (1 - _GAIN) else here
    deployment.add_replica(replica, there)
    loads[there] += workload.load[replica.name]
    connect(deployment, workload, replica)
    return there != here
