"""Initial, non-replicated placement by spring relaxation (Pietzuch et al., ICDE 2006; §VI-A).

The paper starts from "the best operator placement that has the lowest network cost" found by SBON's
spring relaxation, then replicates (Alg. 5).  In SBON's *cost space* each server is a point (its
network coordinate) and each stream a spring whose stiffness is its data rate; entry points and
applications are pinned to their servers and the operators move freely.  With Hooke springs the
potential ``Σ rate · |x_u - x_v|²`` is minimal where every free operator sits at the rate-weighted
mean of its neighbours — the point SBON's iterative relaxation converges to.  We solve for that
equilibrium directly (one linear system over the graph Laplacian, ``L_ff X_f = -L_fp X_p``),
then map each operator, upstream first, to the nearest server in cost space whose load stays
under ``α · capacity``.  Distances to a server add its Vivaldi height (its access link).
"""

from __future__ import annotations

import numpy as np

from replicast.operators.plan import ReplicaId
from replicast.placement.errors import PlacementError
from replicast.placement.model import Deployment, Network, Workload, connect, pinned_deployment, server_loads

#: Added to the diagonal so operators whose streams all carry rate 0 still have a position.
_REGULARISER = 1e-9


def relax(network: Network, workload: Workload) -> dict[str, np.ndarray]:
    """The equilibrium point of every operator in the Euclidean part of the cost space (seconds)."""
    coordinates = _coordinates(network)
    free = {name: i for i, name in enumerate(workload.operators)}
    dims = coordinates.vec.shape[1]
    laplacian = np.zeros((len(free), len(free)))
    pull = np.zeros((len(free), dims))
    for v in (*workload.operators, *workload.applications):
        for u in workload.inputs[v]:
            weight = float(workload.rate[u])
            for a, b in ((u, v), (v, u)):
                if a in free:
                    laplacian[free[a], free[a]] += weight
                    if b in free:
                        laplacian[free[a], free[b]] -= weight
                    else:
                        pull[free[a]] += weight * coordinates.vec[workload.pinned[b]]
    laplacian[np.diag_indices(len(free))] += _REGULARISER
    positions = np.linalg.solve(laplacian, pull) if free else pull
    return {name: positions[i] for name, i in free.items()}


def initial_placement(network: Network, workload: Workload, alpha: float) -> Deployment:
    """Entry points and applications pinned, replica 0 of every operator on its nearest eligible server."""
    coordinates = _coordinates(network)
    points = relax(network, workload)
    deployment = pinned_deployment(workload)
    loads = server_loads(deployment, network, workload)
    for name in workload.operators:
        distance = coordinates.to_point_ms(points[name])
        eligible = loads + workload.load[name] < alpha * network.capacity
        if not eligible.any():
            raise PlacementError(f"operator '{name}': no server has room for its load {workload.load[name]:g} "
                                 f"under alpha = {alpha:g} x capacity")
        server = int(np.argmin(np.where(eligible, distance, np.inf)))
        deployment.add_replica(ReplicaId(name, 0), server)
        loads[server] += workload.load[name]
        connect(deployment, workload, ReplicaId(name, 0))
    return deployment


def _coordinates(network: Network):
    if network.coordinates is None:
        raise PlacementError("spring relaxation needs network coordinates (placement.coordinates.fit)")
    return network.coordinates
