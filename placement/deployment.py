"""Replica deployment, Alg. 5 (§V-A), and the random baseline under the same constraints.

Alg. 5 runs ``kmax`` phases; each phase gives every operator ``o`` (upstream first) one more
replica, on a server ``s`` of the candidate set

    C = {s : load(s) + load(o) < α · capacity(s)  ∧  latency(s, s') > dmin  ∀ s' ∈ S(o)}   (lines 6-7)

that minimises ``cost_s(in(o) ∪ out(o))`` (lines 8-9), and wires it to every replica of its
inputs and consumers.  Following §VI-A, phase 1 is the spring-relaxation placement (the best
non-replicated deployment), so :func:`min_cost` runs Alg. 5 for phases 2 … kmax on top of it
(``start`` overrides the first phase, e.g. with :func:`placement.model.pinned_deployment` to run all
``kmax`` phases of Alg. 5 from nothing).

Decisions where the paper is silent (docs/placement.md): latency between peer replicas is the
smaller of the two one-way delays; ties go to the lowest server index; a replica with no
candidate is an error naming the operator and the constraint, never a silent skip.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np

from replicast.operators.plan import ReplicaId
from replicast.placement.constraints import DeployConfig, candidates
from replicast.placement.cost import placement_cost
from replicast.placement.errors import PlacementError
from replicast.placement.model import Deployment, Network, Workload, connect, server_loads
from replicast.placement.refine import refine
from replicast.placement.relaxation import initial_placement

__all__ = ["DeployConfig", "candidates", "deploy_phase", "min_cost", "random_deployment"]

Chooser = Callable[[str, np.ndarray, Deployment], int]


def deploy_phase(deployment: Deployment, network: Network, workload: Workload, config: DeployConfig,
                 choose: Chooser, replicas: int, names: Iterable[str] | None = None) -> list[ReplicaId]:
    """Alg. 5 ``deploy(Q)``: bring every operator with fewer than ``replicas`` replicas up by one —
    and every placed application with fewer than ``min(replicas, config.sink_replicas)`` sink
    replicas, placed the same way (its cost is that of its inputs).  ``names``: only these."""
    loads = server_loads(deployment, network, workload)
    added = []
    for name in (*workload.operators, *workload.applications) if names is None else names:
        # an application's replica 0 is pinned, not Alg. 5's to place: only further ones are
        wanted = replicas if name in workload.operators else \
            min(replicas, config.sink_replicas) if deployment.count(name) else 0
        if deployment.count(name) >= wanted:
            continue
        allowed = candidates(name, deployment, network, workload, config, loads)
        if not allowed.any():
            where = ", ".join(network.servers[s] for s in deployment.servers_of(name)) or "none"
            raise PlacementError(
                f"{workload.kind(name)} '{name}', replica {deployment.count(name) + 1} of "
                f"{config.kmax if name in workload.operators else config.sink_replicas}: no server has "
                f"load + {workload.load[name]:g} < alpha ({config.alpha:g}) x capacity and is more than "
                f"dmin = {config.dmin_ms:g} ms from the servers already running it ({where}); "
                f"lower kmax, dmin or the load, or add servers")
        server = choose(name, allowed, deployment)
        replica = ReplicaId(name, deployment.next_index(name))
        deployment.add_replica(replica, server)
        loads[server] += workload.load[name]
        connect(deployment, workload, replica)
        added.append(replica)
    return added


def min_cost(network: Network, workload: Workload, config: DeployConfig, *,
             start: Deployment | None = None, refined: bool = True,
             pinned_replicas: Mapping[ReplicaId, int] | None = None) -> Deployment:
    """Alg. 5: ``kmax`` replicas of every operator, each where it adds the least network cost.

    With ``refined`` (the default) single replicas then move while that lowers the cost
    (:mod:`placement.refine`); ``refined=False`` is the paper's Alg. 5 alone.  ``pinned_replicas``:
    further replicas of pinned entry points and applications (a pin to several servers, replica
    ``i ≥ 1`` on its server), deployed and wired before the phases, so that ``cost_s(in(o) ∪ out(o))``
    of every operator replica counts their stream replicas too.
    """
    def cheapest(name: str, allowed: np.ndarray, deployment: Deployment) -> int:
        price = placement_cost(name, deployment, network, workload)
        return int(np.argmin(np.where(allowed, price, np.inf)))          # line 9; ties: lowest index
    if pinned_replicas:
        start = start.copy() if start is not None else initial_placement(network, workload, config.alpha)
        _add_pinned(start, workload, pinned_replicas)
    deployment = _phases(network, workload, config, start, cheapest)
    if refined:
        refine(deployment, network, workload, config)
    return deployment


def random_deployment(network: Network, workload: Workload, config: DeployConfig, rng: Any, *,
                      start: Deployment | None = None) -> Deployment:
    """The baseline: each new replica on a uniformly random server of the same candidate set ``C``."""
    def any_candidate(name: str, allowed: np.ndarray, deployment: Deployment) -> int:
        return int(rng.choice(np.flatnonzero(allowed).tolist()))
    return _phases(network, workload, config, start, any_candidate)


def _add_pinned(deployment: Deployment, workload: Workload, pinned_replicas: Mapping[ReplicaId, int]) -> None:
    """Deploy the further replicas of pinned names where they are pinned, wired like replica 0 (§III)."""
    for replica, server in sorted(pinned_replicas.items()):
        if replica.name not in workload.pinned:
            raise PlacementError(f"{replica}: only entry points and applications are pinned, "
                                 f"'{replica.name}' is neither")
        if replica not in deployment.hosts:
            deployment.add_replica(replica, server)
    for replica in sorted(pinned_replicas):
        connect(deployment, workload, replica)          # a stream replica added twice is one (sets)


def _phases(network: Network, workload: Workload, config: DeployConfig, start: Deployment | None,
            choose: Chooser) -> Deployment:
    deployment = start.copy() if start is not None else initial_placement(network, workload, config.alpha)
    for phase in range(1, config.kmax + 1):                               # line 1
        deploy_phase(deployment, network, workload, config, choose, phase)
    return deployment
