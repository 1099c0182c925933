"""A node core's part in placement (§V, DESIGN.md §7): reporting to the coordinator, and being it when elected.

Rules of this module:

1. A node core made with a :class:`CoordinationSetup` elects its coordinator among the servers it
   can reach: itself and its connected peers, the smallest name (:func:`placement.coordinator.elect`,
   re-run whenever a link comes up or goes down).  For ``settle_us`` after it starts it also counts
   the servers it has not heard from yet as alive, so a node whose links are still coming up does
   not coordinate a cluster alone for a moment.  Every ``report_us`` it sends that coordinator
   a :class:`~engine.messages.Report` (:func:`engine.core.stats.server_report`); when the elected
   node changes it reports at once, so a new coordinator rebuilds its soft state from a full round
   of reports.  The node also tells its control policy (:mod:`engine.core.control_policy`) whom it
   elected: control messages from that node are applied like its own configuration, and only those.
2. The elected node runs a :class:`~placement.coordinator.CoordinatorCore`, made when it is elected
   and dropped when it is not any more: its own report goes straight in, the others come as Report
   messages, each accepted only from the server it names.  Decisions go out as the control messages
   they map to, to the nodes they name, from :meth:`Coordination._send` — the one place control
   leaves a coordinator (a decision for this node goes through its local queue, like any message
   to itself).  A decision for a node that is not connected is lost and counted: that node is down
   or cut off, and the coordinator's view loses it when its reports stop.
3. Anything wrong in a report (sent to a node that does not coordinate, naming another server,
   values out of range) is counted, never raised: nothing a peer sends stops a node.
4. The core has no clock to measure CPU with: the driver tells it the load it measured
   (:meth:`Coordination.set_load`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from replicast.engine.core.events import Decided
from replicast.engine.decision_messages import control_message
from replicast.engine.messages import Report
from replicast.placement.coordinator import CoordinatorConfig, CoordinatorCore, elect
from replicast.placement.model import Workload

if TYPE_CHECKING:
    from replicast.engine.core.outbox import Outbox
    from replicast.placement.reports import ServerReport


@dataclass(frozen=True)
class CoordinationSetup:
    """What a driver gives a node core to take part in placement.

    ``servers``: the logical cluster (every node name); ``estimate``: the query's workload before
    anything is measured, entry points and applications pinned (:func:`placement.workload.from_query`);
    ``rng``: a ``random.Random`` for the coordinator's Vivaldi coordinates (this node's own).
    """

    servers: tuple[str, ...]
    estimate: Workload
    rng: Any = field(compare=False)
    config: CoordinatorConfig = CoordinatorConfig()
    report_us: int = 5_000_000


class Coordination:
    """Reports, election and (when elected) the coordinator core of one node.  It reads the
    outbox's connection set, sends through it, asks the node for its ``server_report`` and tells
    it whom the cluster elected (``set_coordinator``: control rule 5)."""

    def __init__(self, outbox: "Outbox", setup: CoordinationSetup, now: int, *,
                 server_report: "Callable[[int, float, float], ServerReport]",
                 set_coordinator: Callable[[str | None], None]):
        self.out, self.setup = outbox, setup
        self.server_report, self.set_coordinator = server_report, set_coordinator
        self.servers = frozenset(setup.servers)
        self.elected: str | None = None
        self.coordinator: CoordinatorCore | None = None
        self.counters: collections.Counter[str] = collections.Counter()
        self.load, self.capacity = 0.0, 1.0
        self._report_at = now
        self._presumed = set(self.servers) - {outbox.name}          # rule 1: not heard from yet
        self._presume_until = now + setup.config.settle_us
        self.elect(now)

    # -- inputs -----------------------------------------------------------------------------------
    def set_load(self, load: float, capacity: float = 1.0) -> None:
        """The CPU this server uses and has, in cores, as the driver measured it (rule 4)."""
        self.load, self.capacity = load, capacity

    def elect(self, now: int) -> None:
        """Rule 1: (re-)elect among this node and its connected peers of the cluster."""
        self._presumed -= self.out.connected
        if self._presumed and now >= self._presume_until:
            self._presumed.clear()
        elected = elect({self.out.name} | (self.out.connected & self.servers) | self._presumed)
        if elected == self.elected:
            return
        if self.elected is not None:
            self.counters["elections"] += 1
        self.elected = elected
        self.set_coordinator(elected)                # its control messages are applied (control rule 5)
        if elected == self.out.name and self.coordinator is None:
            setup = self.setup
            self.coordinator = CoordinatorCore(setup.estimate, setup.servers, now=now, rng=setup.rng,
                                               config=setup.config)
            self.counters["coordinating"] += 1
        elif elected != self.out.name and self.coordinator is not None:
            self.coordinator = None
            self.counters["stepped_down"] += 1
        self._report_at = now                        # report to the new coordinator at once

    def on_report(self, src: str, message: Report, now: int) -> None:
        report = message.report
        if self.coordinator is None:
            self.counters["reports_not_coordinating"] += 1
        elif report.server != src:
            self.counters["reports_misnamed"] += 1   # a node reports for itself only (rule 3)
        else:
            self.coordinator.receive(report, now=now)
            self._decide(now)

    def on_timer(self, now: int) -> None:
        if self._presumed and now >= self._presume_until:
            self.elect(now)
        if now >= self._report_at:
            self._report_at = now + self.setup.report_us
            self._report(now)
        if self.coordinator is not None:
            when = self.coordinator.next_timer()
            if when is not None and now >= when:
                self.coordinator.handle_timer(now=now)
            self._decide(now)

    def next_timer(self) -> int:
        when = self.coordinator.next_timer() if self.coordinator is not None else None
        due = self._report_at if when is None else min(self._report_at, when)
        return min(due, self._presume_until) if self._presumed else due

    # -- outputs ----------------------------------------------------------------------------------
    def _report(self, now: int) -> None:
        report = self.server_report(now, self.load, self.capacity)
        self.counters["reports_sent"] += 1
        if self.elected == self.out.name:
            self.coordinator.receive(report, now=now)
            self._decide(now)
        elif self.elected in self.out.connected:
            self.out.send(self.elected, Report(report))

    def _decide(self, now: int) -> None:
        for decision in self.coordinator.decisions_to_send():
            self._send(decision)

    def _send(self, decision) -> None:
        """Rule 2: a decision as its control message to each node it names (the one place control is sent)."""
        message = control_message(decision)
        self.counters[f"decisions_{decision.reason}"] += 1
        self.out.event(Decided(decision))
        for node in decision.nodes:
            if self.out.reachable(node):
                self.out.send(node, message)
            else:
                self.counters["decisions_undelivered"] += 1

    # -- statistics -------------------------------------------------------------------------------
    def placement_statistics(self) -> dict[str, Any]:
        """This node's entry in ``NodeCore.statistics()``: ``{"placement": statistics()}``."""
        return {"placement": self.statistics()}

    def statistics(self) -> dict[str, Any]:
        """Plain data for ``NodeCore.statistics()["placement"]``."""
        out: dict[str, Any] = {"coordinator": self.elected, "coordinating": self.coordinator is not None,
                               **self.counters}
        coordinator = self.coordinator
        if coordinator is not None:
            out["core"] = dict(coordinator.counters)
            out["deployed"] = coordinator.deployment is not None
            out["cost"] = round(coordinator.cost(), 3) if coordinator.deployment is not None else None
            out["last_error"] = coordinator.last_error
        return out
