"""The constraints every new replica must meet, Alg. 5 lines 6-7 (§V-A).

A server ``s`` may host one more replica of operator ``o`` when it is not busy and not close to the
servers ``S(o)`` already running ``o``:

    load(s) + load(o) < α · capacity(s)   ∧   latency(s, s') > dmin  ∀ s' ∈ S(o)

The second test keeps peer replicas out of the same network partition; the paper found 30–70 ms a
good range for ``dmin``.  Alg. 5, its random baseline, refinement, revival and the exact optimum all
use this one test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replicast.placement.errors import PlacementError
from replicast.placement.model import Deployment, Network, Workload


@dataclass(frozen=True)
class DeployConfig:
    """Alg. 5's parameters.  ``dmin_ms``: the paper found 30–70 ms good between peer replicas."""

    kmax: int = 3
    alpha: float = 0.9
    dmin_ms: float = 30.0
    #: Sink replicas of every application (docs/consume.md): Alg. 5 places those beyond its pinned
    #: ones like operator replicas, in its first ``sink_replicas`` phases (1: the pinned ones only).
    sink_replicas: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.kmax, bool) or not isinstance(self.kmax, int) or self.kmax < 1:
            raise PlacementError(f"kmax: expected an integer >= 1, got {self.kmax!r}")
        if isinstance(self.sink_replicas, bool) or not isinstance(self.sink_replicas, int) \
                or not 1 <= self.sink_replicas <= self.kmax:
            raise PlacementError(f"sink_replicas: expected an integer from 1 to kmax = {self.kmax}, "
                                 f"got {self.sink_replicas!r}")
        if not 0 < self.alpha <= 1:
            raise PlacementError(f"alpha: expected 0 < alpha <= 1, got {self.alpha!r}")
        if not self.dmin_ms >= 0:
            raise PlacementError(f"dmin_ms: expected a latency >= 0 ms, got {self.dmin_ms!r}")


def candidates(name: str, deployment: Deployment, network: Network, workload: Workload, config: DeployConfig,
               loads: np.ndarray) -> np.ndarray:
    """Alg. 5 lines 6-7: the servers that may host one more replica of ``name`` (a boolean mask)."""
    ok = loads + workload.load[name] < config.alpha * network.capacity
    peers = deployment.servers_of(name)
    if peers:
        ok &= network.apart_ms[:, peers].min(axis=1) > config.dmin_ms
    return ok
