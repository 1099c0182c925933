"""The asyncio driver: runs one node core on real sockets (DESIGN.md §3, §6), aioquic-style.

Rules of this module (the duties live beside it, one module each):

1. **The action loop.**  Every input goes into the core through one method here — a peer's
   message (:meth:`NodeDriver._receive`), a link up or down, a source message
   (:meth:`NodeDriver._on_source`), the timer (:meth:`NodeDriver._on_timer`) — and is followed by
   :meth:`NodeDriver._transmit`, which drains the core's three outputs: messages go to
   :mod:`engine.aio.links` (held for a sink's snapshot by :mod:`engine.aio.snapshot_hold`),
   deliveries to :mod:`engine.aio.deliveries` (files, callbacks) and :mod:`engine.aio.mqtt_outputs`,
   dead letters to the latter, other events to :mod:`engine.aio.event_log`; the single timer is
   re-armed from ``next_timer()``.  A step to add to every input (e.g. persisting state before a
   reply leaves) goes in :meth:`NodeDriver._transmit`, before the messages are written.
2. **Time.** ``now`` is the wall clock in µs (NTP-synchronised on real servers, §II-B).
3. **Crash-only on core bugs** (engine/node.py rules 1–2).  The core is held as a
   :class:`~engine.node.GuardedCore`: its first exception is logged once with its traceback
   (``event: core_failed``), the core refuses everything after, and the node stops; ``replicast
   node`` exits with status 2 so its supervisor (``cluster up``'s keeper, systemd) restarts it and
   it rejoins by snapshot (docs/lifecycle.md).  Bad input from outside never gets that far: the
   links, the source port and the MQTT input refuse and count it.
4. **Supervised tasks** (:mod:`engine.aio.supervise`): the dial loops, the MQTT sessions, the
   metrics refresher, file-output retries; a task in a crash loop stops the node the same way.
5. **Shutdown.** SIGTERM/SIGINT stop the node: links and sinks are closed, files flushed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from replicast.engine.aio.deliveries import Deliveries
from replicast.engine.aio.event_log import EventLog
from replicast.engine.aio.health import SCRAPE_WAIT_S, Health
from replicast.engine.aio.links import PeerLinks
from replicast.engine.aio.metrics import NodeMetrics
from replicast.engine.aio.mqtt_outputs import MqttOutputs
from replicast.engine.aio.snapshot_hold import SnapshotHolds
from replicast.engine.aio.supervise import Supervisor
from replicast.engine.aio.tcp_source import SourceServer
from replicast.engine.aio.trace_service import TraceService, serve as serve_metrics_and_trace
from replicast.engine.aio.vote_store import VoteStore, VoteStoreError, vote_path
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.handshake import shorten
from replicast.engine.messages import Snapshot
from replicast.engine.node import (CoreFailed, DeadLetter, Delivered, GuardedCore, NodeCore, SinkRestarted, Start,
                                   Votes, configure, configure_pinned)
from replicast.engine.wire import encode
from replicast.operators.errors import ReplicastError

__all__ = ["NodeDriver", "NodeFailed", "SCRAPE_WAIT_S", "now_us"]

log = logging.getLogger("replicast.node")


class NodeFailed(ReplicastError):
    """The node stopped because its core failed or a driver task kept failing; the process exits non-zero."""


def now_us() -> int:
    return time.time_ns() // 1000


class NodeDriver:
    """Runs node ``name`` of ``config`` until :meth:`stop` (or SIGTERM), or until its core fails."""

    def __init__(self, config: ClusterConfig, name: str, *,
                 callbacks: dict[str, Callable[[Delivered], None]] | None = None, start: Start = Start.FRESH,
                 state_dir: Path | None = None):
        self.config, self.name = config, name
        self.spec = config.nodes[name]
        #: Why the node stopped on its own (its core failed, a task in a crash loop, votes it could
        #: not store), or None.
        self.failure: str | None = None
        self._stop = asyncio.Event()
        self.metrics = NodeMetrics(name)            # before the core: _core_failed reports on it
        #: The votes of the entry stamper's voter, on disk in ``state_dir`` (none: the core's
        #: volatile votes, engine/core/views.py rule 1).
        self._votes = VoteStore(vote_path(state_dir, name), str(config.path.resolve()), name) \
            if state_dir is not None else None
        self._votes_failed = False
        self.core = GuardedCore(NodeCore(name, config.query, config.options(), now=now_us(),
                                         start=start,
                                         coordination=config.coordination(name),
                                         votes=self._votes.load() if self._votes is not None else Votes()),
                                on_error=self._core_failed)
        if config.min_cost:          # the coordinator deploys the operators (engine.placement_config)
            self.core.apply(configure_pinned(config.query, config.placement, name, config.entry_modes), now=now_us())
        else:
            self.core.apply(configure(config.query, config.placement, name, config.entry_modes, mode=config.mode),
                            now=now_us())
        self.peers = PeerLinks(config, name, self.metrics, on_up=self._on_peer_up, on_message=self._receive,
                               on_read=self._transmit, on_down=self._on_peer_down)
        hosted_apps = [r.name for r in self.core.hosted if r.name in config.query.applications]
        own = config.mqtt.broker_for(name)
        mqtt_apps = {}
        for app in hosted_apps:
            output = config.outputs.get(app)
            if output is None or output.mqtt:
                mqtt_apps[app] = output.brokers if output is not None and output.brokers else (own,)
        self.deliveries = Deliveries(config, name, self.metrics, hosted_apps, callbacks, set(mqtt_apps))
        self.mqtt = MqttOutputs(config, name, self.metrics, mqtt_apps, start=start, on_source=self._on_source,
                                entries=any(r.name in config.query.streams for r in self.core.hosted))
        self.deliveries.publish = self.mqtt.deliver
        self._holds = SnapshotHolds(config.peer_timeout_ms, self.peers.writers.get, self._write_held)
        self._events = EventLog(self.peers.drop)
        self._supervisor = Supervisor(self.metrics.task_failures, self._fatal,
                                      on_down=lambda task: self.metrics.ready.set(0))
        self.health = Health(config, name, self.core, self.metrics, linked=lambda: set(self.peers.writers),
                             tasks_down=lambda: self._supervisor.down, mqtt_connected=lambda: self.mqtt.connected,
                             outputs_failing=lambda: self.deliveries.failing, before_refresh=self._release_held)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: int | None = None

    # -- what tests and benchmarks read -----------------------------------------------------------
    @property
    def links(self) -> dict[str, asyncio.StreamWriter]:
        return self.peers.writers

    @property
    def _sealers(self):
        return self.peers.sealers

    @property
    def refused(self) -> int:
        return self.peers.refused

    @property
    def mqtt_sessions(self):
        return self.mqtt.sessions

    @property
    def mqtt_connected(self) -> bool:
        return self.mqtt.connected

    def is_ready(self) -> bool:
        return self.health.is_ready()

    # -- lifecycle ------------------------------------------------------------------------------
    async def run(self, *, install_signals: bool = True) -> None:
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        server = await asyncio.start_server(self.peers.accept, self.spec.host, self.spec.port, reuse_address=True)
        source_server = None
        if self.spec.source_port is not None:
            source_server = SourceServer(self.config.source_connections, self._on_source, self.metrics,
                                         secret=self.config.secret, tls=self.peers.tls[1] if self.peers.tls else None)
            await source_server.start(self.spec.host, self.spec.source_port)
            log.info("node %s accepts sources on %s:%d", self.name, self.spec.host, self.spec.source_port,
                     extra={"event": "source_listening"})
        metrics_server = None
        self.health.serve_scrapes(loop)
        self.trace = TraceService(self.core, self.config.secret, loop)      # docs/tracing.md
        if self.spec.metrics_port is not None:
            metrics_server = serve_metrics_and_trace(self.spec.host, self.spec.metrics_port, self.metrics.registry,
                                                     self.trace)
        log.info("node %s listening on %s:%d", self.name, self.spec.host, self.spec.port,
                 extra={"event": "listening", "replicas": [str(r) for r in self.core.hosted]})
        supervise = self._supervisor.start
        for peer in sorted(self.config.nodes):
            if peer > self.name:
                supervise(f"dial {peer}", lambda peer=peer: self.peers.dial(peer))
        for task, run in self.mqtt.tasks().items():
            supervise(task, run)
        supervise("metrics", self.health.refresh_forever)
        supervise("trace", self.trace.run)
        if self.deliveries.files:
            supervise("outputs", self.deliveries.retry_outputs)
        try:
            self._transmit()
        except CoreFailed:
            pass                 # logged by _core_failed, which stopped the node
        try:
            await self._stop.wait()
        finally:
            log.info("node %s stopping", self.name, extra={"event": "stopping"})
            server.close()
            if source_server is not None:
                source_server.close()
            await self._supervisor.cancel_all()
            self.peers.close_all()
            if self._timer:
                self._timer.cancel()
            self.deliveries.close()
            if metrics_server is not None:
                metrics_server[0].shutdown()
            self.metrics.refresh(self.core.statistics())
        if self.failure is not None:
            raise NodeFailed(f"node {self.name} stopped: {self.failure}")

    def stop(self) -> None:
        self._stop.set()

    def _fatal(self, reason: str) -> None:
        """A task is in a crash loop: stop, and make the process exit non-zero (engine.aio.supervise)."""
        log.error("node %s stops: %s", self.name, reason, extra={"event": "fatal"})
        self.failure = reason
        self.metrics.ready.set(0)
        self.stop()

    def _core_failed(self, error: BaseException) -> None:
        """The core raised: a bug in it (rule 3).  Log it with its traceback once, and stop."""
        log.error("node %s: the node core failed (%s: %s); it takes no more input and the node stops, for its "
                  "supervisor to restart it", self.name, type(error).__name__, shorten(str(error), 200),
                  exc_info=(type(error), error, error.__traceback__),
                  extra={"event": "core_failed", "error": type(error).__name__})
        self.failure = f"the node core failed: {type(error).__name__}: {shorten(str(error), 200)}"
        self.metrics.ready.set(0)
        self.stop()

    # -- inputs (rule 1) ------------------------------------------------------------------------
    def _receive(self, peer: str, message) -> None:
        """A decoded message from an authenticated peer (engine.aio.links checked it)."""
        self.core.receive(peer, message, now=now_us())

    def _on_peer_up(self, peer: str) -> None:
        self.core.on_peer_up(peer, now=now_us())

    def _on_peer_down(self, peer: str) -> None:
        self.core.on_peer_down(peer, now=now_us())

    def _on_timer(self) -> None:
        self._timer = self._timer_when = None
        try:
            self.core.handle_timer(now=now_us())
            self._transmit()
        except CoreFailed:
            pass                 # logged by _core_failed, which stopped the node

    def _on_source(self, stream: str, payload: bytes, traceparent: str | None = None) -> None:
        """One source message (MQTT or a TCP source line): the core takes it or dead-letters it; an
        MQTT 5 message's W3C ``traceparent`` (a TCP line's ``traceparent`` field) goes with it into the
        trace baggage (docs/tracing.md)."""
        try:
            traced = traceparent is not None and self.core.trace_context(stream, traceparent)
            self.core.on_source(stream, payload, now=now_us())
            if traced:
                self.core.trace_context(None, None)
            self._transmit()
        except CoreFailed:
            pass                 # logged by _core_failed, which stopped the node

    # -- the core's outputs (rule 1) -------------------------------------------------------------
    def _transmit(self) -> None:
        """Store the votes, flush the core's outbox to the links, handle its events, re-arm the timer."""
        if not self._store_votes():
            return
        frames: dict[str, list[bytes]] = defaultdict(list)
        for node, message in self.core.messages_to_send():   # acks come coalesced (engine.core.links)
            if isinstance(message, Snapshot) and message.donor.name in self.mqtt.apps:
                self._holds.hold(node, [self.mqtt.sessions[broker.url] for broker in self.mqtt.apps[message.donor.name]])
            try:
                frames[node].append(encode(message))
            except Exception as error:     # a value the wire cannot carry: a bug upstream, never a crash
                self.metrics.task_failures.labels("encode").inc()
                log.error("cannot encode a %s for %s: %s: %s", type(message).__name__, node, type(error).__name__,
                          shorten(str(error), 200), extra={"event": "encode_failed", "peer": node})
        for node, chunks in frames.items():
            if node in self._holds:
                self._holds.add(node, chunks)
            else:
                self.peers.send(node, chunks)
        letters: dict[str, list[DeadLetter]] = {}
        for event in self.core.events():
            if isinstance(event, Delivered):
                self.deliveries.deliver(event)
            elif isinstance(event, SinkRestarted):
                if not self.deliveries.hosts(event.app):
                    self._sink_deployed(event.app)
                self.deliveries.restart(event)
            elif isinstance(event, DeadLetter):
                letters.setdefault(event.stream, []).append(event)
            else:
                self._events(event)
        for stream, rejected in letters.items():     # one dead letter per source message and stream
            self.mqtt.dead_letter(stream, rejected)
        when = self.core.next_timer()
        if when != self._timer_when:
            if self._timer:
                self._timer.cancel()
            self._timer_when = when
            self._timer = asyncio.get_running_loop().call_later(max(0.0, (when - now_us()) / 1e6), self._on_timer)

    def _sink_deployed(self, app: str) -> None:
        """A sink replica of ``app`` deployed here at run time (the coordinator's Alg. 5 or revival,
        docs/consume.md "Sink replicas"): its outputs as ``[outputs.<app>]`` says, its broker
        sessions and file retries started now; its ids continue its donor's (SinkRestarted)."""
        output = self.config.outputs.get(app)
        if output is None or output.mqtt:
            brokers = output.brokers if output is not None and output.brokers else (self.config.mqtt.broker_for(self.name),)
            self.deliveries.mqtt_apps.add(app)
            for task, run in self.mqtt.add(app, brokers).items():
                self._supervisor.start(task, run)
        had_files = bool(self.deliveries.files)
        self.deliveries.add(app)
        if self.deliveries.files and not had_files:
            self._supervisor.start("outputs", self.deliveries.retry_outputs)
        log.info("sink replica of %s deployed here: publishing its output", app,
                 extra={"event": "sink_deployed", "app": app})

    def _store_votes(self) -> bool:
        """Votes the core asked to keep are on disk before anything it sent with them leaves
        (engine/aio/vote_store.py rule 1); if they cannot be, nothing leaves again and the node stops."""
        if self._votes is None:
            return True
        if self._votes_failed:
            return False
        record = self.core.votes_to_persist()
        if record is not None:
            try:
                self._votes.save(record)
            except VoteStoreError as error:
                self._votes_failed = True
                self._fatal(str(error))
                return False
        return True

    def _release_held(self) -> None:
        if self._holds:
            self._holds.release()          # a hold past its deadline (no acknowledgement came)

    def _write_held(self, node: str, frames: list[bytes], link) -> None:
        if self.peers.writers.get(node) is link and link is not None:    # a new link replays on its own
            self.peers.send(node, frames)

