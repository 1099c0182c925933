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
* Frames (the latency objective, :mod:`placement.objective`): the RTTs reported within one
  :data:`FRAME_US` of time make one frame — every pair's latest RTT as of then — and the frames of
  the objective's window (``window_us``) are kept, so the objective sees the network's tail as it was
  at each moment (a replicated deployment's tail is the tail of a minimum over paths, which no
  per-pair summary gives).
"""

from __future__ import annotations

import collections
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
#: Reports received within this span of time make one frame of RTTs (the default report period).
FRAME_US = 5_000_000


class Measurements:
    """Latencies, coordinates, rates and loads of ``servers``, updated one report at a time; frames
    of RTTs over the last ``window_us`` (none when 0)."""

    def __init__(self, servers: tuple[str, ...], estimate: Workload, rng: Any, *, window_us: int = 0):
        n = len(servers)
        self.servers = servers
        self._index = {s: i for i, s in enumerate(servers)}
        self.estimate = estimate
        self._rtt = np.full((n, n, _FILTER), np.nan)
        self._rtt_count = np.zeros((n, n), dtype=np.int64)
        self._latest = np.full((n, n), np.nan)             # every pair's last reported RTT
        self._frames: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self._window_frames = -(-window_us // FRAME_US)     # frames of time kept (ceiling)
        self._first_report: int | None = None
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
            self._latest[i, j] = rtt
        if self._first_report is None:
            self._first_report = now
        if self._window_frames:
            self._frame(now)
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

    def _frame(self, now: int) -> None:
        """The frame of ``now`` becomes the latest RTTs known (a later report of the same frame overwrites it)."""
        at = now // FRAME_US
        if self._frames and self._frames[-1][0] == at:
            self._frames[-1] = (at, self._latest.copy())
        else:
            self._frames.append((at, self._latest.copy()))
        while self._frames[0][0] <= at - self._window_frames:
            self._frames.popleft()

    def history_us(self, now: int) -> int:
        """How long this coordinator has been receiving reports (what its frames can cover)."""
        return 0 if self._first_report is None else now - self._first_report

    def frames_ms(self, network: Network) -> np.ndarray | None:
        """One-way latencies per frame, n × n × F (oldest frame first): a pair's RTT of that frame,
        else its reverse direction's, else ``network``'s (median or Vivaldi), halved; None before any
        report."""
        if not self._frames:
            return None
        rtt = np.stack([frame for _, frame in self._frames])                 # F × n × n
        rtt = np.where(np.isnan(rtt), np.swapaxes(rtt, 1, 2), rtt)
        one_way = np.where(np.isnan(rtt), network.latency_ms[None], rtt / 2.0)
        n = len(self.servers)
        one_way[:, np.arange(n), np.arange(n)] = 0.0
        return np.ascontiguousarray(np.moveaxis(one_way, 0, 2))

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
