"""Where an application's deliveries go on a node (DESIGN.md §6 "Sinks"): files, callbacks, MQTT.

Rules of this module:

1. Every delivery of a hosted application gets its output ids (docs/consume.md) and goes to each of
   its sinks: a :class:`~engine.sinks.FileSink` (``[outputs.<app>] file``; ``{node}`` in the path
   gives one file per sink replica where several share a disk), a callback, and its MQTT brokers
   (:mod:`engine.aio.mqtt_outputs`).
2. A sink that cannot take a delivery must not stop the node: counted
   (``replicast_sink_errors_total{app}``), logged, and the next deliveries go on.
3. A file output writes whole lines or nothing; a failing one is retried with back-off, each
   application on its own, and the node is not ready while one fails (one log line on each change).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable

from replicast.engine.aio.supervise import Backoff
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.handshake import shorten
from replicast.engine.node import Delivered, SinkRestarted
from replicast.engine.sinks import CallbackSink, FileSink, OutputIds, OutputState

log = logging.getLogger("replicast.node")


class Deliveries:
    """The sinks of the applications node ``name`` hosts (module docstring)."""

    def __init__(self, config: ClusterConfig, name: str, metrics, hosted_apps: list[str],
                 callbacks: dict[str, Callable[[Delivered], None]] | None, mqtt_apps: set[str]):
        self.metrics = metrics
        self.sinks: dict[str, list] = {}
        self.mqtt_apps = mqtt_apps
        #: Set by the driver once its MQTT side exists: ``publish(event, ids)``.
        self.publish: Callable[[Delivered, list[str] | None], None] = lambda event, ids: None
        self.config, self.name = config, name
        self._ids: dict[str, OutputIds] = {}
        self.files: list[FileSink] = []
        self.failing: set[str] = set()
        for app in hosted_apps:
            self.add(app)
        for app, function in (callbacks or {}).items():
            self.sinks.setdefault(app, []).append(CallbackSink(function))

    def hosts(self, app: str) -> bool:
        """Whether ``app`` has a sink replica here (its outputs are open)."""
        return app in self._ids

    def add(self, app: str) -> None:
        """Open ``app``'s outputs here: its file, if ``[outputs.<app>]`` names one, and its ids —
        at start, or when a sink replica of it is deployed here at run time."""
        output, query = self.config.outputs.get(app), self.config.query
        if output is not None and output.file is not None:
            names = query.schemas[query.applications[app].input].names
            sink = FileSink(Path(str(output.file).replace("{node}", self.name)), app, names)
            self.sinks.setdefault(app, []).append(sink)
            self.files.append(sink)
            self._output_state(sink)
        self._ids[app] = OutputIds(app)

    def deliver(self, event: Delivered) -> None:
        """Rule 1 and 2."""
        app = event.app
        if event.punctuation is not None:
            self.metrics.app_punctuation.labels(app).set(event.punctuation)
        ids = self._ids[app].ids(event) if app in self._ids else None
        for sink in self.sinks.get(app, ()):
            try:
                sink(event, ids)
            except Exception as error:    # rule 2
                self.metrics.sink_errors.labels(app).inc()
                log.error("%s for %s failed: %s: %s", type(sink).__name__, app, type(error).__name__,
                          shorten(str(error), 200), extra={"event": "sink_failed", "app": app})
            if isinstance(sink, FileSink):
                self._output_state(sink)
        if app in self.mqtt_apps:
            self.publish(event, ids)

    def restart(self, event: SinkRestarted) -> None:
        """A hosted sink starts a new incarnation: its ids continue the counts it restored (docs/consume.md)."""
        if event.app in self._ids:
            self._ids[event.app].restart(event.punctuation, event.delivered)

    def close(self) -> None:
        for sinks in self.sinks.values():
            for sink in sinks:
                sink.close()

    # -- file outputs (rule 3) --------------------------------------------------------------------
    def _output_state(self, sink: FileSink) -> None:
        """Report a file output's state change: metric, one log line (event), readiness."""
        failing = sink.state is OutputState.FAILING
        self.metrics.output_ready.labels(sink.app).set(0 if failing else 1)
        if failing and sink.app not in self.failing:
            self.failing.add(sink.app)
            log.error("output of %s failing, %d line(s) waiting, retried: %s", sink.app, len(sink.pending),
                      shorten(sink.error or "", 200), extra={"event": "output_failing", "app": sink.app})
        elif not failing and sink.app in self.failing:
            self.failing.discard(sink.app)
            log.info("output of %s writing again", sink.app, extra={"event": "output_recovered", "app": sink.app})

    async def retry_outputs(self) -> None:
        """Retry failing file outputs with back-off (each application on its own; the others run on)."""
        backoff = Backoff(first=0.1, cap=5.0)
        while True:
            failing = [sink for sink in self.files if sink.state is OutputState.FAILING]
            if not failing:
                backoff.reset()
                await asyncio.sleep(0.2)
                continue
            await asyncio.sleep(backoff.next())
            for sink in failing:
                sink.retry()
                self._output_state(sink)
