"""The latency objective that bounds garbage collection and triggers revival (§V-B, §V-C).

§V-B collects "while minimally degrading the latency guarantee" down to a target cost ``θ``; a user
does not know a cost, but states a latency: *each application within X % of the static deployment*
(``within_percent``), or *each application within B ms* (``bound_ms``), or both (the tighter one
holds).  The coordinator turns it into decisions with its model of each application's latency:

* **Latency model** (:func:`arrivals`): the earliest arrival of a tuple at every replica over the live
  stream replicas, ``arrival(entry) = 0`` and ``arrival(o) = max over ports p of min over live
  stream replicas S into p of (arrival(S.source) + latency(S))`` (an operator needs every input, the
  duplicate filter passes the first copy, §IV-B).  ``latency(S)`` is the measured one-way delay of
  its link, or the delay the receiver reports for ``S`` (§V-C: how far its punctuations lag) when
  that is larger, so a cut link or a congested one shows up before its RTT does.
* **Over time-aligned frames** (:class:`Objective` with ``frames_ms``): the objective bounds a tail
  (p99), and a replicated deployment's tail is the quantile over time of the *minimum* over its
  paths, well below the minimum of the paths' tails.  So the model is evaluated once per frame of
  the RTTs the servers reported at the same time (``Measurements.frames_ms``), every replica's
  arrival a vector over the frames.  The static deployment's latency is the :data:`QUANTILE` of its
  arrivals over the frames; a collected deployment's is that times the :data:`QUANTILE` over the
  frames of its slowdown against static *in the same frame* — if it is at most ``c`` times static in
  (nearly) every frame, its p99 is at most ``c`` times static's.  Comparing frame by frame keeps a
  moment when every path is slow (a busy server delays every heartbeat it answers) from hiding a
  path that GC removed, which comparing the two tails did (docs/placement.md).
* **Reference** (:func:`reference`): the same model over the *static* deployment, i.e. the live one
  plus every collected stream and operator replica whose server is up, under today's latencies, so
  "within X % of static" follows the network as it changes.
* **GC** (Alg. 6 line 3): a group is discarded only if every application's modelled latency stays
  within its goal afterwards, half-way between static and the bound (:meth:`Objective.admits`).  θ thus comes from the objective: GC goes on,
  least utility per cost first (the measured §V-B utilities rank the groups), until the next group
  would break it; the cost where it stops is the θ the objective implies.
* **Revival** (§V-C): when an application's modelled latency exceeds its bound, the coordinator
  brings back the collected stream replicas (then operator replicas) that bring it back under the
  bound, the one that lowers the worst excess most first (:func:`repair`).

Pure: no clock, no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.placement.model import Deployment, Network, Workload, connect
from replicast.placement.revival import Collected
from replicast.placement.tolerance import Removal

_NOTHING = Removal()
#: The quantile over frames that stands for an application's latency: the objective bounds a p99.
QUANTILE = 0.99


@dataclass(frozen=True)
class LatencyObjective:
    """Each application's latency within ``within_percent`` % of the static deployment's, and/or within
    ``bound_ms``; latencies are the :data:`QUANTILE` over the frames of the last ``window_s`` seconds,
    and garbage collection waits until it has that much history (a p99 of a few frames is no tail)."""

    within_percent: float | None = None
    bound_ms: float | None = None
    window_s: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.window_s, bool) or not isinstance(self.window_s, (int, float)) \
                or not 0 < self.window_s < math.inf:
            raise ValueError(f"latency objective: window_s must be a number > 0, got {self.window_s!r}")
        for key in ("within_percent", "bound_ms"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 <= value < math.inf):
                raise ValueError(f"latency objective: {key} must be a number >= 0, got {value!r}")
        if self.within_percent is None and self.bound_ms is None:
            raise ValueError("latency objective: give within_percent, bound_ms or both")

    def bounds(self, static_ms: Mapping[str, float]) -> dict[str, float]:
        """Each application's bound (ms) given its latency in the static deployment."""
        out = {}
        for app, ms in static_ms.items():
            bound = math.inf
            if self.within_percent is not None:
                bound = min(bound, ms * (1 + self.within_percent / 100))
            if self.bound_ms is not None:
                bound = min(bound, self.bound_ms)
            out[app] = bound
        return out

    @property
    def window_us(self) -> int:
        return round(self.window_s * 1_000_000)

    def describe(self) -> str:
        parts = []
        if self.within_percent is not None:
            parts.append(f"within {self.within_percent:g} % of static")
        if self.bound_ms is not None:
            parts.append(f"at most {self.bound_ms:g} ms")
        return f"each application's p99 over {self.window_s:g} s " + " and ".join(parts)


def arrivals(deployment: Deployment, network: Network, workload: Workload,
             delays_ms: Mapping[StreamReplica, float] | None = None, without: Removal = _NOTHING,
             down: frozenset[int] = frozenset(), latency_ms: np.ndarray | None = None) -> dict[str, float | np.ndarray]:
    """Modelled latency (ms) of every application: the earliest arrival over the live paths (module docstring).

    ``latency_ms`` (default ``network.latency_ms``, n × n) may be n × n × F, one one-way delay per
    time-aligned frame: then every arrival, and each application's latency, is a vector over the F
    frames (a reported delay is a floor in every frame: it is what the receiver sees now)."""
    lat, hosts = (network.latency_ms if latency_ms is None else latency_ms), deployment.hosts
    later, earlier = (max, min) if lat.ndim == 2 else (np.maximum, np.minimum)
    delays_ms = delays_ms or {}
    arrival: dict[ReplicaId, float | np.ndarray] = {}
    for name in workload.nodes():                                         # upstream first
        ports = workload.inputs.get(name, ())
        for replica in deployment.replicas_of(name):
            if replica in without.replicas or hosts[replica] in down:
                continue
            best = [math.inf] * len(ports)
            for s in deployment.in_streams(replica):
                if s in without.streams or s.source not in arrival:
                    continue
                at = later(arrival[s.source] + lat[hosts[s.source], hosts[replica]], delays_ms.get(s, 0.0))
                best[s.port] = earlier(best[s.port], at)
            arrival[replica] = functools.reduce(later, best, 0.0)
    return {app: functools.reduce(earlier, (arrival.get(r, math.inf) for r in deployment.replicas_of(app)), math.inf)
            for app in workload.applications}


def slowdown(latency: np.ndarray, static: np.ndarray, quantile: float = QUANTILE) -> float:
    """The ``quantile`` over frames of ``latency / static`` (1 in a frame where both are 0 or static is
    unreachable, inf where only ``latency`` is)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(static) & (static > 0), latency / static,
                         np.where(np.isfinite(latency) | ~np.isfinite(static), 1.0, np.inf))
    return float(np.quantile(ratio, quantile, method="higher"))


def tail(latencies: Mapping[str, float | np.ndarray], quantile: float = QUANTILE) -> dict[str, float]:
    """Each application's latency as one number: itself, or its ``quantile`` over frames (the higher
    of two neighbouring frames, never an interpolation, so an outage frame (inf) counts as inf)."""
    return {app: float(np.quantile(v, quantile, method="higher")) if np.ndim(v) else float(v)
            for app, v in latencies.items()}


def static_deployment(deployment: Deployment, collected: Collected, workload: Workload,
                      live: set[int]) -> Deployment:
    """The deployment before garbage collection, as far as it can still run: the live one plus every
    collected operator replica whose server is up (wired as Alg. 5 wires) and every collected stream
    replica between deployed replicas."""
    full = deployment.copy()
    for replica, server in sorted(collected.replicas.items()):
        if server in live and replica not in full.hosts:
            full.add_replica(replica, server)
            connect(full, workload, replica)
    for s in collected.streams:
        if s not in full.streams and s.source in full.hosts and s.target in full.hosts:
            full.add_stream(s)
    return full


def reference(deployment: Deployment, collected: Collected, network: Network, workload: Workload, live: set[int],
              delays_ms: Mapping[StreamReplica, float] | None = None,
              frames_ms: np.ndarray | None = None) -> dict[str, float | np.ndarray]:
    """Each application's modelled latency in the static deployment (:func:`static_deployment`); over
    ``frames_ms`` (n × n × F), one per frame."""
    return arrivals(static_deployment(deployment, collected, workload, live), network, workload, delays_ms,
                    latency_ms=frames_ms)


@dataclass(frozen=True)
class Objective:
    """A :class:`LatencyObjective` evaluated at one moment: the model's inputs and each application's
    bound.  With ``frames_ms`` (n × n × F one-way delays, one per time-aligned frame) every latency
    is the :data:`QUANTILE` over the frames; without, the model runs on ``network.latency_ms``."""

    objective: LatencyObjective
    deployment: Deployment
    network: Network
    workload: Workload
    delays_ms: Mapping[StreamReplica, float]
    bounds: Mapping[str, float]
    static: Mapping[str, float]
    frames_ms: np.ndarray | None = None
    static_frames: Mapping[str, np.ndarray] | None = None     # the static latency per frame

    def goals(self) -> dict[str, float]:
        """What revival aims at: half-way between the static latency and the bound, so that the next
        small change of the network does not break the objective again at once (hysteresis)."""
        return {a: (self.static[a] + self.bounds[a]) / 2 if math.isfinite(self.bounds[a]) else self.bounds[a]
                for a in self.bounds}

    @classmethod
    def now(cls, objective: LatencyObjective, deployment: Deployment, collected: Collected, network: Network,
            workload: Workload, live: set[int], delays_ms: Mapping[StreamReplica, float],
            frames_ms: np.ndarray | None = None) -> "Objective":
        per_frame = reference(deployment, collected, network, workload, live, delays_ms, frames_ms)
        static = tail(per_frame)
        return cls(objective, deployment, network, workload, delays_ms, objective.bounds(static), static, frames_ms,
                   per_frame if frames_ms is not None else None)

    def latencies(self, without: Removal = _NOTHING, deployment: Deployment | None = None) -> dict[str, float]:
        """Each application's modelled latency in ``deployment`` (default: this one) less ``without``:
        over frames, its static latency times its :func:`slowdown` against static frame by frame."""
        modelled = arrivals(self.deployment if deployment is None else deployment, self.network, self.workload,
                            self.delays_ms, without, latency_ms=self.frames_ms)
        if self.static_frames is None:
            return tail(modelled)
        return {app: self.static[app] * slowdown(v, self.static_frames[app]) if math.isfinite(self.static[app])
                else tail({app: v})[app] for app, v in modelled.items()}

    def excess(self, latencies: Mapping[str, float], bounds: Mapping[str, float] | None = None) -> float:
        """How far (ms) the worst application is over its bound; ≤ 0 when the objective holds."""
        bounds = self.bounds if bounds is None else bounds
        return max((latencies[a] - bounds[a] for a in latencies), default=-math.inf)

    def admits(self, removal: Removal) -> bool:
        """Whether discarding ``removal`` keeps every application within its goal (Alg. 6 line 3): GC
        stops short of the bound by as much as revival restores below it, so that the model's noise
        around the bound does not make GC and revival undo each other round after round."""
        return self.excess(self.latencies(removal), self.goals()) <= 0


def repair(objective: Objective, collected: Collected, live: set[int], allowed: Mapping[str, object],
           *, max_steps: int = 16) -> list[tuple[StreamReplica | ReplicaId, Deployment]]:
    """§V-C for the objective: what to bring back, one step at a time, until every application is within
    its goal (:meth:`Objective.goals`, inside the bound; or nothing collected helps).  Each step is the collected stream replica between deployed
    replicas on live servers, or else the collected operator replica on its old live server (where
    ``allowed[name][server]`` says Alg. 5's α/dmin still allow it, wired to every live neighbour),
    that lowers the worst excess most (ties: the cheaper, then the first).  Returns each step with
    the deployment after it; ``objective.deployment`` is not changed."""
    current = objective.deployment.copy()
    lat, hosts = objective.network.latency_ms, current.hosts
    steps: list[tuple[StreamReplica | ReplicaId, Deployment]] = []
    streams, replicas = set(collected.streams), dict(collected.replicas)
    goals = objective.goals()

    def excess_of(deployment: Deployment) -> float:
        return objective.excess(objective.latencies(deployment=deployment), goals)

    excess = excess_of(current)
    while excess > 0 and len(steps) < max_steps:
        best = None
        for s in sorted(streams, key=lambda s: (s.source, s.target, s.port)):
            if s in current.streams or s.source not in hosts or s.target not in hosts:
                continue
            if hosts[s.source] not in live or hosts[s.target] not in live:
                continue
            trial = current.copy()
            trial.add_stream(s)
            after = excess_of(trial)
            price = objective.workload.rate.get(s.source.name, 0.0) * lat[hosts[s.source], hosts[s.target]]
            if after < excess and (best is None or (after, price) < best[0]):
                best = ((after, price), s, trial)
        if best is None:
            for replica, server in sorted(replicas.items()):
                if replica in current.hosts or server not in live or not allowed.get(replica.name, {}).get(server, False):
                    continue
                trial = current.copy()
                trial.add_replica(replica, server)
                connect(trial, objective.workload, replica)
                after = excess_of(trial)
                if after < excess and (best is None or after < best[0][0]):
                    best = ((after, 0.0), replica, trial)
        if best is None:
            break
        (excess, _), what, current = best
        streams.discard(what) if isinstance(what, StreamReplica) else replicas.pop(what, None)
        steps.append((what, current))
        hosts = current.hosts
    return steps
