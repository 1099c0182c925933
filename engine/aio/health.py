"""A node's readiness and metrics (docs/node.md "Metrics"): what ``replicast_ready`` says, and when.

Rules of this module:

1. A node is ready when it has a link to every peer, no driver task is down, every broker session
   it needs is up, its core says every hosted replica is live (and is not in ERROR), no file output
   fails, and — with ``placement = "min-cost"`` — the coordinator has wired its entry points and
   applications (so sources may start).  "ready" is logged once.
2. The metrics are refreshed every :data:`REFRESH_S` by a supervised task, and on each scrape: the
   metrics server's thread asks the event loop to refresh, waiting at most :data:`SCRAPE_WAIT_S`
   (then the scrape reads the last refresh).
3. With a placement coordinator, the share of a core this process used is handed to the core for
   the reports it sends (§V-A loads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Callable

from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.node import CoreFailed, GuardedCore, ReplicaKind

log = logging.getLogger("replicast.node")

#: How long a metrics scrape waits for the event loop to refresh what it reads (then: the last refresh).
SCRAPE_WAIT_S = 1.0
REFRESH_S = 0.2


class Health:
    """Readiness and metrics of one node; the other conditions of rule 1 come as callables."""

    def __init__(self, config: ClusterConfig, name: str, core: GuardedCore, metrics, *,
                 linked: Callable[[], set[str]], tasks_down: Callable[[], set[str]],
                 mqtt_connected: Callable[[], bool], outputs_failing: Callable[[], set[str]],
                 before_refresh: Callable[[], None] = lambda: None):
        self.config, self.name, self.core, self.metrics = config, name, core, metrics
        self._linked, self._tasks_down, self._mqtt_connected = linked, tasks_down, mqtt_connected
        self._outputs_failing, self._before_refresh = outputs_failing, before_refresh
        self._cpu = (time.monotonic(), time.process_time())
        self._ready_logged = False
        self._loop_thread: int | None = None

    def is_ready(self) -> bool:
        peers = set(self.config.nodes) - {self.name}
        return (peers <= self._linked() and not self._tasks_down() and self._mqtt_connected()
                and self.core.ready() and not self._outputs_failing() and self._placed())

    def _placed(self) -> bool:
        """With ``placement = "min-cost"``: the coordinator has wired this node's entry points
        (each feeds something) and applications (each is fed), so sources may start."""
        if not self.config.min_cost:
            return True
        core = self.core
        for replica, hosted in core.hosted.items():
            if hosted.kind is ReplicaKind.ENTRY and not hosted.routes:
                return False
            if hosted.kind is ReplicaKind.APPLICATION and not any(s.target == replica for s in core.inbound):
                return False
        return True

    def _measure_load(self) -> None:
        """The share of a core this process used since the last call, for placement reports (rule 3)."""
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self._cpu[0] >= 1.0:
            try:
                self.core.set_load((cpu - self._cpu[1]) / (wall - self._cpu[0]))
            except CoreFailed:
                pass                 # logged where it failed; the node is stopping
            self._cpu = (wall, cpu)

    async def refresh_forever(self) -> None:
        while True:
            self.refresh()
            await asyncio.sleep(REFRESH_S)

    def refresh(self) -> None:
        self._before_refresh()
        self.metrics.mqtt_connected.set(1 if self._mqtt_connected() else 0)
        self._measure_load()                     # the core's placement plug-in takes it or drops it
        self.metrics.refresh(self.core.statistics())
        ready = self.is_ready()
        self.metrics.ready.set(1 if ready else 0)
        if ready and not self._ready_logged:
            self._ready_logged = True
            log.info("node %s ready", self.name, extra={"event": "ready"})

    def serve_scrapes(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have each scrape refresh first (rule 2); call on the event loop's thread."""
        self._loop_thread = threading.get_ident()
        self.metrics.before_scrape = lambda: self._refresh_for_scrape(loop)

    def _refresh_for_scrape(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the metrics server's thread: have the event loop refresh what a scrape reads, waiting
        at most :data:`SCRAPE_WAIT_S`.  A busy or stopped loop, or a refresh that fails (the metrics
        task reports that itself), leaves the scrape the last refresh.  Collected on the loop's own
        thread (an embedding application's coroutine), it refreshes at once instead of waiting."""
        if loop.is_running() and threading.get_ident() == self._loop_thread:
            self.refresh()
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def refresh() -> None:
            try:
                self.refresh()
                done.set_result(None)
            except Exception as error:
                done.set_exception(error)
        try:
            loop.call_soon_threadsafe(refresh)
            done.result(SCRAPE_WAIT_S)
        except Exception:
            pass
