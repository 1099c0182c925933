"""The coordinator's measured picture of the network and the workload, rebuilt from reports.

* Latency: each pair keeps the last 3 RTTs a server reported (a moving median, as Serf's latency
  filter); the one-way latency is half the median.  Pairs never measured (or measured only the other
  way) take the reverse direction, else the Vivaldi prediction, so Alg. 5 always has a full matrix.
* Coordinates: Vivaldi (:mod:`placement.coordinates`) over the measured matrix, :data:`ROUNDS`
  rounds (each node probes one random measured peer) whenever a pair has been measured for the first
  time since the last fit, so a coordinator whose every pair is measured fits them once.  (Feeding
  every reported RTT to Vivaldi one at a time cost a simulated coordinator of 16 servers half its run:
  one numpy update per sample.)
* Rates: a replica's ``records_out`` counter differentiated over report times; a logical node's rate
  is the fastest of its replicas (they all emit the same stream, §III); the estimate until measured.
* Loads: a server's background load is what it reports minus the expected load of the replicas the
  coordinator believes it hosts, so Alg. 5's ``load(s)`` (background + hosted) matches the report.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from replicast.operators.plan import ReplicaId
from replicast.placement.coordinates import Vivaldi
from replicast.placement.from_trace import fill
from replicast.placement.model import Deployment, Network, Workload
from replicast.placement.reports import ServerReport

_FILTER = 3
#: Vivaldi rounds per fit of the coordinates.
ROUNDS = 300


class Measurements:
    """Latencies, coordinates, rates and loads of ``servers``, updated one report at a time."""

    def __init__(self, servers: tuple[str, ...], estimate: Workload, rng: Any):
        n = len(servers)
        self.servers = servers
        self._index = {s: i for i, s in enumerate(servers)}
        self.estimate = estimate
        self._rtt = np.full((n, n, _FILTER), np.nan)
        self._rtt_count = np.zeros((n, n), dtype=np.int64)
        self.vivaldi = Vivaldi(n, rng)
        self._fitted = -1                                 # measured pairs at the last fit
        self._reported_load = np.zeros(n)
        self.capacity = np.ones(n)
        self._outputs: dict[ReplicaId, tuple[int, int]] = {}
        self._replica_rate: dict[ReplicaId, float] = {}

    def add(self, report: ServerReport, *, now: int) -> int:
        """Take in ``report``; returns how many of its values were unusable (unknown peers, bad numbers)."""
        i = self._index[report.server]
        bad = 0
        for peer, rtt in report.rtt_ms.items():
            j = self._index.get(peer)
            if j is None or j == i or not isinstance(rtt, (int, float)) or not 0 <= rtt < float("inf"):
                bad += 1
                continue
            self._rtt[i, j, self._rtt_count[i, j] % _FILTER] = rtt
            self._rtt_count[i, j] += 1
        if _number(report.load) and _number(report.capacity) and report.capacity > 0:
            self._reported_load[i], self.capacity[i] = report.load, report.capacity
        else:
            bad += 1
        for replica, count in report.records_out.items():
            before = self._outputs.get(replica)
            if before is not None and now > before[1] and count >= before[0]:
                self._replica_rate[replica] = (count - before[0]) * 1e6 / (now - before[1])
            self._outputs[replica] = (count, now)
        return bad

    def workload(self) -> Workload:
        """The estimate with every measured rate in place of the guess."""
        rate = dict(self.estimate.rate)
        measured: dict[str, float] = {}
        for replica, r in self._replica_rate.items():
            measured[replica.name] = max(measured.get(replica.name, 0.0), r)
        rate.update({name: r for name, r in measured.items() if name in rate})
        return dataclasses.replace(self.estimate, rate=rate)

    def _median_rtt(self) -> np.ndarray:
        filled = np.minimum(self._rtt_count, _FILTER)
        ordered = np.sort(self._rtt, axis=2)                          # NaN (unfilled) slots sort last
        rtt = np.take_along_axis(ordered, (filled // 2)[..., None], axis=2)[..., 0]
        rtt[filled == 0] = np.nan
        return rtt

    def coordinates(self):
        """Vivaldi coordinates of the servers, refitted when a pair was measured for the first time."""
        measured = self.measured_pairs()
        if measured != self._fitted:
            self._fitted = measured
            rtt = self._median_rtt()
            everyone = np.arange(len(self.servers))
            for _ in range(ROUNDS if measured else 0):
                peers = self.vivaldi.random_peers()
                self.vivaldi.observe(everyone, peers, rtt[everyone, peers])
        return self.vivaldi.coordinates

    def network(self, deployment: Deployment | None, workload: Workload) -> Network:
        coordinates = self.coordinates()
        rtt = fill(self._median_rtt(), coordinates)
        hosted = np.zeros(len(self.servers))
        for replica, server in (deployment.hosts.items() if deployment else ()):
            hosted[server] += workload.load.get(replica.name, 0.0)
        background = np.maximum(self._reported_load - hosted, 0.0)
        return Network(self.servers, rtt / 2.0, self.capacity.copy(), background, coordinates)

    def tail_latency_ms(self, network: Network) -> np.ndarray:
        """One-way latencies from the *largest* of each pair's last reported RTTs (``network``'s where
        none): the latency objective bounds a tail (p99), which the median hides."""
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                worst = np.nanmax(self._rtt, axis=2) / 2.0
        return np.where(np.isnan(worst), network.latency_ms, np.maximum(worst, network.latency_ms))

    def measured_pairs(self) -> int:
        return int((self._rtt_count > 0).sum())

    def complete(self) -> bool:
        """Whether every pair of servers has an RTT measured in at least one direction."""
        measured = self._rtt_count > 0
        measured |= measured.T
        np.fill_diagonal(measured, True)
        return bool(measured.all())


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")
