"""The coordinator core: reports in, placement decisions out (§V, DESIGN.md §7).

Rules of this module (as the node core's):

1. No I/O, no clock, no randomness of its own: time enters as ``now`` (int µs, keyword-only), the
   ``random.Random`` for Vivaldi comes from the caller.
2. Driven by calls: :meth:`CoordinatorCore.receive` for each :class:`~placement.reports.ServerReport`,
   :meth:`CoordinatorCore.handle_timer` when :meth:`CoordinatorCore.next_timer` is due.  After either,
   drain :meth:`CoordinatorCore.decisions_to_send` and send each decision as its control message to
   its ``nodes`` (:mod:`placement.decisions`).
3. All state is soft: a newly elected coordinator waits ``settle_us`` (or for every server's
   report), then *adopts* the replicas and stream replicas the reports show, and deploys (Alg. 5)
   only if they show none.  What garbage collection took away is remembered only by the coordinator
   that took it; a successor can still revive by creating.
4. Servers silent for ``expiry_us`` are down: their replicas leave the view (no decision is sent to
   a dead server) and revival no longer uses them.
5. Periodic work: utilities every ``utility_period_us`` (U = 30 s, §V-B), garbage collection every
   ``gc_period_us`` (G = 300 s) while the cost exceeds θ, revival checks every ``revival_period_us``
   for replicas whose inputs are all later than ``revival_threshold_us`` (10 s, §V-C).  Creating new
   upstream replicas is allowed only while the cost is under θ ("the coordinator can also assist").
6. Bad input never raises: unknown servers and unusable values are counted in :attr:`counters`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from operators.plan import StreamReplica
from placement.constraints import DeployConfig
from placement.cost import total_cost
from placement.decisions import Decision, changes
from placement.deployment import min_cost
from placement.errors import PlacementError
from placement.gc import GCConfig, collect
from placement.measurements import Measurements
from placement.model import Deployment, Workload
from placement.reports import ServerReport
from placement.revival import Collected, apply, revive
from placement.utility import Utilities, utilities

_S = 1_000_000


@dataclass(frozen=True)
class CoordinatorConfig:
    deploy: DeployConfig = field(default_factory=DeployConfig)
    gc: GCConfig | None = None                   # None: no garbage collection
    utility_period_us: int = 30 * _S
    gc_period_us: int = 300 * _S
    revival_threshold_us: int = 10 * _S
    revival_period_us: int = 5 * _S
    settle_us: int = 30 * _S
    expiry_us: int = 30 * _S
    refined: bool = True


def elect(alive: Iterable[str]) -> str | None:
    """The coordinator of a logical cluster: its live server with the smallest name (None if none)."""
    return min(alive, default=None)


class CoordinatorCore:
    """Placement for one logical cluster: ``servers`` run ``estimate``'s query (streams, apps pinned)."""

    def __init__(self, estimate: Workload, servers: Sequence[str], *, now: int, rng: Any,
                 config: CoordinatorConfig = CoordinatorConfig()):
        self.servers = tuple(servers)
        self.config = config
        self.measurements = Measurements(self.servers, estimate, rng)
        self.deployment: Deployment | None = None
        self.collected = Collected()
        self.utilities: Utilities | None = None
        self.counters: collections.Counter[str] = collections.Counter()
        self.last_error = ""
        self._reports: dict[str, tuple[ServerReport, int]] = {}
        self._weights_mark: dict[StreamReplica, float] = {}
        self._outbox: list[Decision] = []
        self._settle_at = now + config.settle_us
        self._early = True                           # may deploy before settle_us once every server reported
        self._next_utility = now + config.utility_period_us
        self._next_gc = now + config.gc_period_us
        self._next_revival = now + config.revival_period_us

    # -- inputs ---------------------------------------------------------------------------------
    def receive(self, report: ServerReport, *, now: int) -> None:
        """Take in one server's report."""
        if not isinstance(report, ServerReport) or report.server not in self.servers:
            self.counters["unknown_reports"] += 1
            return
        self.counters["reports"] += 1
        self.counters["bad_values"] += self.measurements.add(report, now=now)
        self._reports[report.server] = (report, now)

    def handle_timer(self, *, now: int) -> None:
        """Do whatever is due at ``now``; then drain :meth:`decisions_to_send`."""
        self._expire(now)
        if self.deployment is None:
            if now >= self._settle_at or (self._early and len(self._reports) == len(self.servers)):
                self._start(now)
            return
        if now >= self._next_utility:
            self._next_utility = now + self.config.utility_period_us
            self._measure_utilities()
        if self.config.gc is not None and now >= self._next_gc:
            self._next_gc = now + self.config.gc_period_us
            self._collect()
        if now >= self._next_revival:
            self._next_revival = now + self.config.revival_period_us
            self._revive()

    def next_timer(self) -> int | None:
        """When :meth:`handle_timer` is next due (µs)."""
        expiries = [at + self.config.expiry_us for _, at in self._reports.values()]
        if self.deployment is None:
            due = [self._settle_at, *expiries]
            if self._early and len(self._reports) == len(self.servers):
                due.append(max(at for _, at in self._reports.values()))
            return min(due)
        due = [self._next_utility, self._next_revival, *expiries]
        if self.config.gc is not None:
            due.append(self._next_gc)
        return min(due)

    def decisions_to_send(self) -> list[Decision]:
        """The decisions made since the last call (drained)."""
        out, self._outbox = self._outbox, []
        return out

    # -- views ----------------------------------------------------------------------------------
    def workload(self) -> Workload:
        return self.measurements.workload()

    def network(self):
        return self.measurements.network(self.deployment, self.workload())

    def cost(self) -> float:
        """The current network cost of the view (§V-A), with measured rates and latencies."""
        return total_cost(self.deployment, self.network(), self.workload()) if self.deployment else 0.0

    def live(self) -> set[int]:
        return {self.servers.index(s) for s in self._reports}

    # -- work -----------------------------------------------------------------------------------
    def _start(self, now: int) -> None:
        hosted = {r: s for s, (report, _) in self._reports.items() for r in report.hosted}
        if hosted:                                                   # rule 3: adopt what runs
            index = {s: i for i, s in enumerate(self.servers)}
            view = Deployment({r: index[s] for r, s in hosted.items()})
            for report, _ in self._reports.values():
                for stream in report.inputs:
                    if stream.source in view.hosts and stream.target in view.hosts:
                        view.add_stream(stream)
            self.deployment = view
            self.counters["adopted"] += 1
            return
        try:
            deployment = min_cost(self.network(), self.workload(), self.config.deploy, refined=self.config.refined)
        except PlacementError as error:
            self.counters["deploy_failures"] += 1
            self.last_error = str(error)
            self._settle_at, self._early = now + self.config.settle_us, False     # retry after settling again
            return
        self._emit(changes(Deployment(), deployment, self.servers, "initial"))
        self.deployment = deployment

    def _expire(self, now: int) -> None:
        for server, (_, at) in list(self._reports.items()):
            if now - at >= self.config.expiry_us:
                del self._reports[server]
                self.counters["expired"] += 1
                if self.deployment is not None:
                    i = self.servers.index(server)
                    for replica in [r for r, s in self.deployment.hosts.items() if s == i]:
                        self.deployment.remove_replica(replica)

    def _weights(self) -> dict[StreamReplica, float]:
        return {s: i.weight for report, _ in self._reports.values() for s, i in report.inputs.items()}

    def _measure_utilities(self) -> None:
        """§V-B: utilities from the weights accumulated since the last computation."""
        now_weights = self._weights()
        window = {s: w - self._weights_mark.get(s, 0.0) if w >= self._weights_mark.get(s, 0.0) else w
                  for s, w in now_weights.items()}
        self._weights_mark = now_weights
        self.utilities = utilities(self.deployment, self.workload(), window)

    def _collect(self) -> None:
        """Alg. 6, once utilities have been measured."""
        if self.utilities is None:
            return
        before = self.deployment.copy()
        discarded = collect(self.deployment, self.network(), self.workload(), self.utilities, self.config.gc)
        for group in discarded:
            self.collected.streams |= group.streams
            self.collected.replicas.update({r: before.hosts[r] for r in group.replicas})
        self.counters["gc_groups"] += len(discarded)
        self._emit(changes(before, self.deployment, self.servers, "gc"))

    def _revive(self) -> None:
        """§V-C for every replica whose reported inputs are all late."""
        delays = {s: i.delay_us for report, _ in self._reports.values() for s, i in report.inputs.items()}
        late = sorted({s.target for s, d in delays.items() if d > self.config.revival_threshold_us})
        if not late:
            return
        network, workload = self.network(), self.workload()
        theta = self.config.gc.theta if self.config.gc is not None else float("inf")
        allow_create = total_cost(self.deployment, network, workload) < theta
        before = self.deployment.copy()
        for replica in late:
            if replica not in self.deployment.hosts:
                continue
            for revival in revive(replica, delays, self.config.revival_threshold_us, self.deployment, self.collected,
                                  self.live(), network, workload, self.config.deploy, allow_create=allow_create):
                self.counters[f"revival_{revival.action.name.lower()}"] += 1
                apply(revival, self.deployment, self.collected)
        self._emit(changes(before, self.deployment, self.servers, "revival"))

    def _emit(self, decisions: list[Decision]) -> None:
        self.counters["decisions"] += len(decisions)
        self._outbox.extend(decisions)
