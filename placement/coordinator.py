"""The coordinator core: reports in, placement decisions out (§V, DESIGN.md §7).

Rules of this module (as the node core's):

1. No I/O, no clock, no randomness of its own: time enters as ``now`` (int µs, keyword-only), the
   ``random.Random`` for Vivaldi comes from the caller.
2. Driven by calls: :meth:`CoordinatorCore.receive` for each :class:`~placement.reports.ServerReport`,
   :meth:`CoordinatorCore.handle_timer` when :meth:`CoordinatorCore.next_timer` is due.  After either,
   drain :meth:`CoordinatorCore.decisions_to_send` and send each decision as its control message to
   its ``nodes`` (:mod:`placement.decisions`).
3. All state is soft: a newly elected coordinator waits ``settle_us`` (or until every server has
   reported and every pair of servers has a measured RTT), then *adopts* the replicas and stream
   replicas the reports show if they show an operator replica, and otherwise deploys (Alg. 5) on top
   of the entry points and applications they show (nodes run those from their own configuration).
   What garbage collection took away is remembered only by the coordinator that took it; a
   successor can still revive by creating.  Afterwards the view follows the reports: a server's
   report that lacks replicas or input stream replicas the view gives it, or shows ones the view
   lacks (a node restarted, a decision lost), corrects the view — unless the coordinator sent that
   server a decision within ``settle_us`` (the report may predate it).  What the report shows and
   the view lacks joins the view; what the view places there and the report lacks is re-issued
   (rule 7).
4. Servers silent for ``expiry_us`` are down: their replicas leave the view (no decision is sent to
   a dead server) and revival no longer uses them.
5. Periodic work, counted from the deployment (adopted or made): utilities every
   ``utility_period_us`` (U = 30 s, §V-B), garbage collection every ``gc_period_us`` (G = 300 s)
   while the cost exceeds θ, revival checks every ``revival_period_us``
   for replicas whose inputs are all later than ``revival_threshold_us`` (10 s, §V-C).  Creating new
   upstream replicas is allowed only while the cost is under θ ("the coordinator can also assist").
6. Bad input never raises: unknown servers and unusable values are counted in :attr:`counters`.
7. A live server that lacks what the view places on it — replicas, input stream replicas, routes
   (a node restarted after a crash runs only what its own configuration says; a decision was lost)
   — gets it again: ``restore`` decisions deploy the replicas where they were and connect every
   stream replica it lacks at both ends.  The view was chosen under the fault-tolerance invariant
   (:mod:`placement.tolerance`); the server is up again, so putting back what it ran restores it.
   A server silent for ``expiry_us`` left the view (rule 4): then only revival brings back what it
   hosted, and on its return only its routes (of pinned replicas the view takes back) are restored.
8. A coordinator decides nothing while at most half of the servers report to it (``no_quorum``):
   a partial partition can make a group of servers that lost the coordinator's server elect another
   one while the rest keep the first; the minority's coordinator sees only its group's part of the
   deployment, and would deploy a second one or collect against a partial view.  Servers down for
   good count against the quorum, so a cluster that lost half its servers is left as it runs.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from replicast.operators.plan import StreamReplica
from replicast.placement.constraints import DeployConfig
from replicast.placement.cost import total_cost
from replicast.placement.decisions import Decision, changes
from replicast.placement.deployment import min_cost
from replicast.placement.errors import PlacementError
from replicast.placement.gc import GCConfig, collect
from replicast.placement.measurements import Measurements
from replicast.placement.model import Deployment, Workload
from replicast.placement.objective import LatencyObjective, Objective, repair
from replicast.placement.reports import ServerReport
from replicast.placement.revival import Collected, allowed_servers, apply, revive, sink_revivals
from replicast.placement.tolerance import violations
from replicast.placement.utility import Utilities, utilities

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
    objective: LatencyObjective | None = None    # None: GC down to θ, revival only past the threshold
    revival: bool = True                         # False: never revive (GC alone)

    @classmethod
    def in_seconds(cls, deploy: DeployConfig, *, gc: bool, kmin: int, theta: float, utility_period_s: float,
                   gc_period_s: float, revival_threshold_s: float, revival_period_s: float, settle_s: float,
                   expiry_s: float, objective: LatencyObjective | None = None,
                   revival: bool = True) -> "CoordinatorConfig":
        """A configuration from the seconds a cluster file or a scenario gives (``gc`` False: no GC)."""
        return cls(deploy, GCConfig(kmin=kmin, theta=theta) if gc else None, round(utility_period_s * _S),
                   round(gc_period_s * _S), round(revival_threshold_s * _S), round(revival_period_s * _S),
                   round(settle_s * _S), round(expiry_s * _S), objective=objective, revival=revival)


def elect(alive: Iterable[str]) -> str | None:
    """The coordinator of a logical cluster: its live server with the smallest name (None if none)."""
    return min(alive, default=None)


class CoordinatorCore:
    """Placement for one logical cluster: ``servers`` run ``estimate``'s query (streams, apps pinned)."""

    def __init__(self, estimate: Workload, servers: Sequence[str], *, now: int, rng: Any,
                 config: CoordinatorConfig = CoordinatorConfig()):
        self.servers = tuple(servers)
        self.config = config
        self.measurements = Measurements(self.servers, estimate, rng,
                                         window_us=config.objective.window_us if config.objective else 0)
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
        self._told: dict[int, int] = {}              # server -> when it was last sent a decision (rule 3)
        self._next_utility = now + config.utility_period_us
        self._next_gc = now + config.gc_period_us
        self._next_revival = now + config.revival_period_us
        #: The latency objective as last evaluated: each application's bound and modelled latency (ms).
        self.objective_view: dict[str, dict[str, float]] = {}
        #: Per application, the highest sink replica index placed so far (placement.revival.sink_revivals).
        self._sink_indices: dict[str, int] = {}

    # -- inputs ---------------------------------------------------------------------------------
    def receive(self, report: ServerReport, *, now: int) -> None:
        """Take in one server's report."""
        if not isinstance(report, ServerReport) or report.server not in self.servers:
            self.counters["unknown_reports"] += 1
            return
        self.counters["reports"] += 1
        self.counters["bad_values"] += self.measurements.add(report, now=now)
        self._reports[report.server] = (report, now)
        if self.deployment is not None and self.quorum():
            self._reconcile(report, now)

    def quorum(self) -> bool:
        """Rule 8: whether more than half of the servers report to this coordinator (recently enough
        not to have expired)."""
        return 2 * len(self._reports) > len(self.servers)

    def handle_timer(self, *, now: int) -> None:
        """Do whatever is due at ``now``; then drain :meth:`decisions_to_send`."""
        self._expire(now)
        if not self.quorum():
            self.counters["no_quorum"] += 1
            if self.deployment is None:
                self._settle_at = max(self._settle_at, now + self.config.settle_us)
            else:                                    # what falls due is skipped, not run later at once
                if now >= self._next_utility:
                    self._next_utility = now + self.config.utility_period_us
                if now >= self._next_gc:
                    self._next_gc = now + self.config.gc_period_us
                if now >= self._next_revival:
                    self._next_revival = now + self.config.revival_period_us
            return
        if self.deployment is None:
            if now >= self._settle_at or self._ready_early():
                self._start(now)
            return
        if now >= self._next_utility:
            self._next_utility = now + self.config.utility_period_us
            self._measure_utilities()
        if self.config.gc is not None and now >= self._next_gc:
            self._next_gc = now + self.config.gc_period_us
            self._collect(now)
        if self.config.revival and now >= self._next_revival:
            self._next_revival = now + self.config.revival_period_us
            self._revive(now)

    def next_timer(self) -> int | None:
        """When :meth:`handle_timer` is next due (µs)."""
        expiries = [at + self.config.expiry_us for _, at in self._reports.values()]
        if self.deployment is None:
            due = [self._settle_at, *expiries]
            if self._ready_early():
                due.append(max(at for _, at in self._reports.values()))
            return min(due)
        due = [self._next_utility, *expiries]
        if self.config.revival:
            due.append(self._next_revival)
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
    def _ready_early(self) -> bool:
        return self._early and len(self._reports) == len(self.servers) and self.measurements.complete()

    def _start(self, now: int) -> None:
        index = {s: i for i, s in enumerate(self.servers)}
        workload = self.workload()
        view = Deployment()
        for server, (report, _) in self._reports.items():
            for replica in report.hosted:
                if replica.name in workload.pinned or replica.name in workload.operators:
                    if replica not in view.hosts:
                        view.add_replica(replica, index[server])
        for report, _ in self._reports.values():
            for stream in report.inputs:
                if stream.source in view.hosts and stream.target in view.hosts and _wired(stream, workload):
                    view.add_stream(stream)
        # Utilities and garbage collection count from the moment there is a deployment.
        self._next_utility = now + self.config.utility_period_us
        self._next_gc = now + self.config.gc_period_us
        if any(r.name in workload.operators for r in view.hosts):      # rule 3: adopt what runs
            self.deployment = view
            self.counters["adopted"] += 1
            return
        # Further replicas of pinned entry points and applications (a pin to several servers,
        # docs/placement.md) run where the nodes put them; Alg. 5 wires them like replica 0 (§III) and
        # counts their stream replicas in every operator replica's cost (§V-A).
        extra = {r: s for r, s in view.hosts.items() if r.name in workload.pinned and r.index > 0}
        try:
            deployment = min_cost(self.network(), workload, self.config.deploy, refined=self.config.refined,
                                  pinned_replicas=extra)
        except PlacementError as error:
            self.counters["deploy_failures"] += 1
            self.last_error = str(error)
            self._settle_at, self._early = now + self.config.settle_us, False     # retry after settling again
            return
        # Entry points and applications already running where the workload pins them stay as they are.
        before = Deployment({r: s for r, s in view.hosts.items() if deployment.hosts.get(r) == s},
                            [s for s in view.streams if s in deployment.streams])
        self._emit(changes(before, deployment, self.servers, "initial"), now)
        self.deployment = deployment

    def _reconcile(self, report: ServerReport, now: int) -> None:
        """Rule 3: correct the view of ``report.server`` from what it says it runs, and give it back
        what the view places there and it lost (rule 7)."""
        i = self.servers.index(report.server)
        if now - self._told.get(i, -self.config.settle_us - 1) <= self.config.settle_us:
            return
        view, workload = self.deployment, self.workload()
        hosted = set(report.hosted)
        known = set(workload.pinned) | set(workload.operators)
        for replica in sorted(hosted - set(view.hosts)):
            if replica.name in known:
                view.add_replica(replica, i)
                self.collected.replicas.pop(replica, None)
                self.counters["appeared_replicas"] += 1
        inputs = set(report.inputs)
        for stream in sorted(inputs - view.streams, key=lambda s: (s.source, s.target, s.port)):
            if stream.source in view.hosts and view.hosts.get(stream.target) == i and _wired(stream, workload):
                view.add_stream(stream)
                self.collected.streams.discard(stream)
                self.counters["appeared_streams"] += 1
        self._reissue(now)

    def _reissue(self, now: int) -> None:
        """Rule 7: the replicas the view places on a server that its last report lacks, and the
        stream replicas that the last report of either end lacks (as an input of a hosted replica,
        or as a route of one), are deployed and connected again — at both ends, so the other end
        asks for the stream replica again (a restarted node's entry points have none of the routes
        the coordinator had connected, and their receivers would otherwise wait for them for ever).
        Only a report received more than ``settle_us`` after the last decision sent to its server
        counts (an earlier one may predate the decision), and a stream replica only when both its
        ends' reports count;
        all of them are looked at together, so a replica and its stream replicas go in one batch."""
        view = self.deployment
        settled = {}
        for server, (report, at) in self._reports.items():
            i = self.servers.index(server)
            if at - self._told.get(i, -self.config.settle_us - 1) > self.config.settle_us:
                settled[i] = (set(report.hosted), set(report.inputs), set(report.routes))
        lost_replicas = {r for r, i in view.hosts.items() if i in settled and r not in settled[i][0]}

        def lacks(stream) -> bool:
            source, target = view.hosts[stream.source], view.hosts[stream.target]
            return source in settled and target in settled and \
                (stream not in settled[target][1] or stream not in settled[source][2])
        lost_streams = [s for s in view.streams if lacks(s)]
        if not lost_replicas and not lost_streams:
            return
        actual = view.copy()
        for replica in lost_replicas:
            actual.remove_replica(replica)
        for stream in lost_streams:
            if stream in actual.streams:
                actual.remove_stream(stream)
        self.counters["reissued_replicas"] += len(lost_replicas)
        self.counters["reissued_streams"] += len(view.streams) - len(actual.streams)
        self._emit(changes(actual, view, self.servers, "restore"), now)

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

    def _collect(self, now: int) -> None:
        """Alg. 6, once utilities have been measured."""
        if self.utilities is None:
            return
        before = self.deployment.copy()
        network, workload, kmin = self.network(), self.workload(), self.config.gc.kmin
        admissible = None
        if self.config.objective is not None:
            if self.measurements.history_us(now) < self.config.objective.window_us:
                self.counters["gc_waiting_history"] += 1     # the objective's p99 needs its whole window
                return
            objective = self._objective(network, workload)
            if objective.excess(objective.latencies()) > 0:     # already violated: revival's turn, not GC's
                self.counters["gc_skipped_objective"] += 1
                return

            def admissible(removal) -> bool:
                ok = objective.admits(removal)
                self.counters["gc_groups_kept_objective"] += not ok
                return ok
        discarded = collect(self.deployment, network, workload, self.utilities, self.config.gc,
                            keep=self._last_timely(), admissible=admissible)
        # The fault-tolerance invariant (placement.tolerance), checked again before any decision leaves.
        if not violations(self.deployment, workload, kmin) <= violations(before, workload, kmin):
            self.counters["gc_refused_tolerance"] += 1
            self.deployment = before
            return
        for group in discarded:
            self.collected.streams |= group.streams
            self.collected.replicas.update({r: before.hosts[r] for r in group.replicas})
        self.counters["gc_groups"] += len(discarded)
        self._emit(changes(before, self.deployment, self.servers, "gc"), now)

    def _delays(self) -> dict[StreamReplica, int]:
        return {s: i.delay_us for report, _ in self._reports.values() for s, i in report.inputs.items()}

    def _last_timely(self) -> frozenset[StreamReplica]:
        """Stream replicas that are the only ones on time into their port (every other one is late
        past the revival threshold): garbage collection leaves them alone, or revival would bring
        one back at once and GC take it again, round after round."""
        delays, threshold = self._delays(), self.config.revival_threshold_us
        ports: dict[tuple, list[StreamReplica]] = {}
        for stream in self.deployment.streams:
            ports.setdefault((stream.target, stream.port), []).append(stream)
        keep = set()
        for streams in ports.values():
            timely = [s for s in streams if delays.get(s, 0) <= threshold]
            if len(timely) == 1 and len(streams) > 1:
                keep.add(timely[0])
        return frozenset(keep)

    def _revive(self, now: int) -> None:
        """§V-C for every replica whose reported inputs are all late; and sink replicas, like
        operator replicas, brought back up to ``deploy.sink_replicas``."""
        self._revive_sinks(now)
        delays = self._delays()
        late = sorted({s.target for s, d in delays.items() if d > self.config.revival_threshold_us})
        if not late and self.config.objective is None:
            return
        network, workload = self.network(), self.workload()
        theta = self.config.gc.theta if self.config.gc is not None else float("inf")
        allow_create = bool(late) and total_cost(self.deployment, network, workload) < theta
        before = self.deployment.copy()
        for replica in late:
            if replica not in self.deployment.hosts:
                continue
            for revival in revive(replica, delays, self.config.revival_threshold_us, self.deployment, self.collected,
                                  self.live(), network, workload, self.config.deploy, allow_create=allow_create):
                self.counters[f"revival_{revival.action.name.lower()}"] += 1
                apply(revival, self.deployment, self.collected)
        if self.config.objective is not None:
            self._revive_for_objective(network, workload)
        self._emit(changes(before, self.deployment, self.servers, "revival"), now)

    def _revive_sinks(self, now: int) -> None:
        if self.config.deploy.sink_replicas <= 1:
            return
        before = self.deployment.copy()
        for replica in before.hosts:
            if replica.name in self.workload().applications:
                self._sink_indices[replica.name] = max(self._sink_indices.get(replica.name, -1), replica.index)
        for revival in sink_revivals(self.deployment, self.live(), self.network(), self.workload(),
                                     self.config.deploy, self._sink_indices):
            self.counters["revival_sink"] += 1
            apply(revival, self.deployment, self.collected)
            self._sink_indices[revival.replica.name] = revival.replica.index
        self._emit(changes(before, self.deployment, self.servers, "revival"), now)

    def _objective(self, network, workload) -> Objective:
        delays_ms = {s: d / 1000 for s, d in self._delays().items()}
        # The model over the last frames of reported RTTs, each application's p99 over them (placement.objective).
        objective = Objective.now(self.config.objective, self.deployment, self.collected, network, workload,
                                  self.live(), delays_ms, self.measurements.frames_ms(network))
        latencies = objective.latencies()
        self.objective_view = {app: {"bound_ms": objective.bounds[app], "model_ms": latencies[app]}
                               for app in latencies}
        return objective

    def _revive_for_objective(self, network, workload) -> None:
        """§V-C driven by the latency objective: an application over its bound gets back what helps most."""
        objective = self._objective(network, workload)
        self.counters["objective_checks"] += 1
        if objective.excess(objective.latencies()) <= 0:
            return
        self.counters["objective_violations"] += 1
        names = {r.name for r in self.collected.replicas}
        allowed = {name: dict(enumerate(allowed_servers(name, self.deployment, self.live(), network, workload,
                                                           self.config.deploy).tolist())) for name in names}
        steps = repair(objective, self.collected, self.live(), allowed)
        if not steps:
            self.counters["objective_unrepaired"] += 1
            return
        for what, _ in steps:
            kind = "stream" if isinstance(what, StreamReplica) else "replica"
            self.counters[f"revival_objective_{kind}"] += 1
        self.deployment = steps[-1][1]
        self.collected.streams -= self.deployment.streams
        for replica in self.deployment.hosts:
            self.collected.replicas.pop(replica, None)

    def _emit(self, decisions: list[Decision], now: int) -> None:
        self.counters["decisions"] += len(decisions)
        self._outbox.extend(decisions)
        index = {s: i for i, s in enumerate(self.servers)}
        for decision in decisions:
            for server in decision.nodes:
                self._told[index[server]] = now


def _wired(stream: StreamReplica, workload: Workload) -> bool:
    """Whether the query feeds ``stream.source``'s node into that port of ``stream.target``'s (entry
    points' peer streams in entry-stamped mode are the nodes' own business, not placement's)."""
    inputs = workload.inputs.get(stream.target.name, ())
    return stream.port < len(inputs) and inputs[stream.port] == stream.source.name
