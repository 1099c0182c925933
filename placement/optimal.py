"""The exact optimum of the replicated deployment problem, for small instances (the yardstick for Alg. 5).

Alg. 5 is greedy.  To see how far it lands from the best deployment under the same constraints we
solve the problem exactly as an integer program with ``scipy.optimize.milp`` (HiGHS):

* ``x[o, s] ∈ {0, 1}``: server ``s`` hosts a replica of operator ``o``; ``Σ_s x[o, s] = kmax``;
* ``dmin``: ``x[o, s] + x[o, t] ≤ 1`` for every pair of servers no more than ``dmin`` apart;
* ``α``: ``Σ_o load(o) x[o, s] ≤ α · capacity(s) − load(s) − ε`` (Alg. 5's ``<``; ``load(s)``
  counts the pinned entry points and applications), and no replica at all on a server already at
  ``α · capacity``;
* every stream replica is deployed (the complete graph between neighbouring replica sets, as Alg. 5
  builds it), so an edge ``u → v`` between operators costs ``Σ_{s,t} rate(u)·lat(s,t)·x[u,s]·x[v,t]``.
  The product is ``y[e, s, t] ∈ [0, 1]`` with the reformulation-linearisation constraints
  ``Σ_t y[e, s, t] = kmax · x[u, s]`` and ``Σ_s y[e, s, t] = kmax · x[v, t]``, which force ``y`` to
  the product for binary ``x`` and keep the LP relaxation tight.  Edges from entry points and to
  applications (pinned) are linear in ``x``.

Variables grow as (edges × servers²): fine for the ≤ 20-server instances it is meant for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

from replicast.operators.plan import ReplicaId
from replicast.placement.constraints import DeployConfig
from replicast.placement.errors import PlacementError
from replicast.placement.model import Deployment, Network, Workload, complete, pinned_deployment, server_loads

_STRICT = 1e-9      # turns Alg. 5's "load < α·capacity" into a ≤ constraint


@dataclass(frozen=True)
class Optimum:
    deployment: Deployment
    cost: float
    gap: float          # HiGHS' relative MIP gap at the end (0 when proven optimal)
    proven: bool


def optimal(network: Network, workload: Workload, config: DeployConfig, *, time_limit_s: float = 60.0) -> Optimum:
    """The minimum-cost deployment of ``kmax`` replicas of every operator under ``α`` and ``dmin``."""
    n, k, ops = network.n, config.kmax, workload.operators
    lat = network.latency_ms
    x_at = {o: i * n for i, o in enumerate(ops)}
    edges = [(u, v) for v in ops for u in workload.inputs[v] if u in x_at]
    y0 = len(ops) * n
    n_vars = y0 + len(edges) * n * n
    c = np.zeros(n_vars)
    pinned = pinned_deployment(workload)
    for v in (*ops, *workload.applications):
        for u in workload.inputs[v]:
            if u in x_at and v in x_at:
                continue
            if v in x_at:                                      # entry point u -> operator v
                c[x_at[v]:x_at[v] + n] += workload.rate[u] * lat[pinned.servers_of(u)].sum(axis=0)
            elif u in x_at:                                    # operator u -> application v
                c[x_at[u]:x_at[u] + n] += workload.rate[u] * lat[:, pinned.servers_of(v)].sum(axis=1)
    for e, (u, v) in enumerate(edges):
        c[y0 + e * n * n:y0 + (e + 1) * n * n] = workload.rate[u] * lat.ravel()

    rows, cols, vals, lo, hi = [], [], [], [], []

    def constrain(terms: list[tuple[int, float]], lower: float, upper: float) -> None:
        r = len(lo)
        for col, val in terms:
            rows.append(r), cols.append(col), vals.append(val)
        lo.append(lower), hi.append(upper)

    for o in ops:
        constrain([(x_at[o] + s, 1.0) for s in range(n)], k, k)
    close = np.argwhere(np.triu(network.apart_ms <= config.dmin_ms, 1))
    for o in ops:
        for s, t in close:
            constrain([(x_at[o] + s, 1.0), (x_at[o] + t, 1.0)], 0, 1)
    room = config.alpha * network.capacity - server_loads(pinned, network, workload) - _STRICT
    upper = np.ones(n_vars)
    for s in range(n):
        if room[s] < 0:                                        # already busy: no replica at all, even a free one
            upper[[x_at[o] + s for o in ops]] = 0
        else:
            constrain([(x_at[o] + s, workload.load[o]) for o in ops], -np.inf, room[s])
    for e, (u, v) in enumerate(edges):
        base = y0 + e * n * n
        for s in range(n):
            constrain([(base + s * n + t, 1.0) for t in range(n)] + [(x_at[u] + s, -k)], 0, 0)
            constrain([(base + t * n + s, 1.0) for t in range(n)] + [(x_at[v] + s, -k)], 0, 0)
    matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(lo), n_vars))
    integrality = np.zeros(n_vars)
    integrality[:y0] = 1
    result = optimize.milp(c, constraints=optimize.LinearConstraint(matrix, lo, hi), integrality=integrality,
                           bounds=optimize.Bounds(0, upper), options={"time_limit": time_limit_s})
    if result.x is None:
        raise PlacementError(f"optimal: no deployment of kmax = {k} replicas satisfies alpha = {config.alpha:g} "
                             f"and dmin = {config.dmin_ms:g} ms ({result.message})")
    deployment = pinned
    for o in ops:
        for index, s in enumerate(np.flatnonzero(result.x[x_at[o]:x_at[o] + n] > 0.5)):
            deployment.add_replica(ReplicaId(o, index), int(s))
    complete(deployment, workload)
    gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
    return Optimum(deployment, float(result.fun), gap, result.status == 0)
