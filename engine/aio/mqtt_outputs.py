"""The node's MQTT side (DESIGN.md §6): one broker session per broker, applications' output, dead letters.

Rules of this module:

1. One :class:`~engine.aio.mqtt_session.BrokerSession` per broker the node uses: its own broker
   (``[mqtt]``, per node in ``[mqtt.brokers]``), where entry points read ``replicast/in/<stream>``
   and applications and dead letters are published, and any others an application's
   ``[outputs.<app>] brokers`` names.  Persistent sessions, credentials, TLS.
2. Punctuations ride along with records; a bare one is published when the stream closes or
   :data:`~engine.sinks.BARE_PUNCTUATION_EVERY_US` after the last, so a consumer's memory of ids
   stays bounded (docs/consume.md) and subscribers are not flooded every punctuation interval.
3. Each punctuation above the last is also published retained, after the payload on the same
   session, as the frontier a restarted sink reads back: until it has, a restarted node's MQTT
   sinks hold their output (:class:`~engine.sinks.RestartGate`, docs/consume.md "A restarted sink").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import aiomqtt

from replicast.engine.aio.supervise import Backoff
from replicast.engine.aio.mqtt_session import BrokerSession, read_retained
from replicast.engine.aio.trace_service import traceparent_of
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.handshake import shorten
from replicast.engine.node import DeadLetter, Delivered, Start
from replicast.engine.sinks import (BARE_PUNCTUATION_EVERY_US, DEAD_LETTER_TOPIC, FRONTIER_TOPIC, OUT_TOPIC, GateState,
                                    RestartGate, dead_letter_payload, frontier_payload, mqtt_items, mqtt_properties,
                                    parse_frontier)
from replicast.operators.record import CLOSED

log = logging.getLogger("replicast.node")

IN_TOPIC = "replicast/in/+"
#: A restarted sink reading its retained frontier (:func:`~engine.aio.mqtt_session.read_retained`
#: knows "nothing retained" from a marker, not from a time-out): how long it keeps trying a broker
#: that cannot be reached or does not answer before publishing everything (at least once, as
#: without a frontier).  Its output is held meanwhile.
FRONTIER_GIVE_UP_S = 30.0


class MqttOutputs:
    """The broker sessions of node ``name`` and what it publishes (module docstring).

    ``apps`` maps each hosted application published over MQTT to its brokers; ``entries``: the
    node hosts entry points, which read the input topic of its own broker and hand each message to
    ``on_source(stream, payload)``."""

    def __init__(self, config: ClusterConfig, name: str, metrics, apps: dict[str, tuple], *, entries: bool,
                 start: Start, on_source: Callable[[str, bytes], None]):
        self.config, self.name, self.metrics, self.apps = config, name, metrics, apps
        own = config.mqtt.broker_for(name)
        self.own_broker = own.url
        self._names = {app: config.query.schemas[config.query.applications[app].input].names for app in apps}
        #: broker URL -> session; the node's own broker first (input, dead letters), if it needs one (rule 1).
        self.sessions: dict[str, BrokerSession] = {}
        if entries or any(own in brokers for brokers in apps.values()):
            self.sessions[own.url] = BrokerSession(
                own, config.mqtt, name, metrics, topic=IN_TOPIC if entries else None,
                on_message=lambda topic, payload, context=None: on_source(topic.rsplit("/", 1)[-1], payload, context))
        for brokers in apps.values():
            for broker in brokers:
                if broker.url not in self.sessions:
                    self.sessions[broker.url] = BrokerSession(broker, config.mqtt, name, metrics)
        # Rule 3: a sink of a process that continues an earlier one may have published; one added
        # at run time (add) has not, whatever the process — so the gate takes a bool, not a Start.
        self.gates = {app: RestartGate(reading=start is Start.RESTARTED) for app in apps}
        self._retained: dict[str, int] = {}
        self._punctuated: dict[str, int] = {}

    def add(self, app: str, brokers: tuple) -> dict[str, Callable]:
        """A sink replica of ``app`` deployed here at run time publishes to ``brokers``: the tasks
        to supervise for the sessions this node did not have yet.  It joined from a live replica's
        snapshot, so it has published nothing before: no frontier to read back."""
        self.apps[app] = tuple(brokers)
        self._names[app] = self.config.query.schemas[self.config.query.applications[app].input].names
        self.gates[app] = RestartGate(reading=False)
        tasks = {}
        for broker in brokers:
            if broker.url not in self.sessions:
                session = self.sessions[broker.url] = BrokerSession(broker, self.config.mqtt, self.name, self.metrics)
                tasks["mqtt" if broker.url == self.own_broker else f"mqtt {broker.url}"] = session.run
        return tasks

    @property
    def connected(self) -> bool:
        """Every broker session this node needs is up (engine.aio.mqtt_session)."""
        return all(session.connected for session in self.sessions.values())

    def tasks(self) -> dict[str, Callable]:
        """The long-running tasks to supervise, by name: each session, and each frontier to read back."""
        tasks = {"mqtt" if url == self.own_broker else f"mqtt {url}": session.run for url, session in self.sessions.items()}
        for app, gate in self.gates.items():
            if gate.state is GateState.READING:
                tasks[f"frontier {app}"] = lambda app=app: self._read_frontier(app)
        return tasks

    def deliver(self, event: Delivered, ids: list[str] | None) -> None:
        """One delivery of a hosted application, through its restart gate (rules 2, 3)."""
        gate = self.gates[event.app]
        skipped = gate.skipped
        for out, out_ids in gate.offer(event, ids):
            self._publish(out, out_ids)
        if gate.skipped > skipped:
            self.metrics.sink_skipped.labels(event.app).inc(gate.skipped - skipped)

    def dead_letter(self, stream: str, rejected: list[DeadLetter]) -> None:
        """The rejects of one source message: one log line, one bounded dead letter with the count."""
        self.metrics.dead_letter_messages.inc()
        log.info("%d dead letter(s) on %s: %s", len(rejected), shorten(stream), shorten(rejected[0].reason, 200),
                 extra={"event": "dead_letter", "stream": shorten(stream), "count": len(rejected)})
        session = self.sessions.get(self.own_broker)
        if session is not None:          # a dead letter comes from an entry point, whose node has one
            session.publish(DEAD_LETTER_TOPIC, dead_letter_payload(self.name, stream, rejected))

    def _publish(self, event: Delivered, ids: list[str] | None) -> None:
        """One delivery to the application's brokers, then (retained) its punctuation as the frontier
        a restarted sink reads back."""
        app = event.app
        if not (event.records or self._bare_punctuation_due(event)):
            return
        if event.punctuation is not None:
            self._punctuated[app] = event.now
        payload = mqtt_items(self._names[app], event, ids)
        properties = mqtt_properties(app, event, ids or [])
        if event.path:
            properties += traceparent_of(event.path)          # an input's trace goes on (docs/tracing.md)
        retain = event.punctuation is not None and event.punctuation > self._retained.get(app, -1)
        for broker in self.apps[app]:
            session = self.sessions[broker.url]
            session.publish(OUT_TOPIC.format(app=app), payload, properties)
            if retain:       # after the payload on the same session: the broker has that first
                session.publish(FRONTIER_TOPIC.format(app=app), frontier_payload(event.punctuation), retain=True)
        if retain:
            self._retained[app] = event.punctuation

    def _bare_punctuation_due(self, event: Delivered) -> bool:
        if event.punctuation is None:
            return False
        last = self._punctuated.get(event.app)
        return event.punctuation == CLOSED or last is None or event.now - last >= BARE_PUNCTUATION_EVERY_US

    async def _read_frontier(self, app: str) -> None:
        """Read the frontier retained for ``app`` on each of its brokers (the lowest counts: each
        broker holds what was published to it), then let the held deliveries through the gate."""
        frontiers: list[int | None] = []
        deadline = time.monotonic() + FRONTIER_GIVE_UP_S
        for broker in self.apps[app]:
            backoff = Backoff(0.1, 1.0)
            while True:
                try:
                    payload = await read_retained(broker, self.config.mqtt, self.name, FRONTIER_TOPIC.format(app=app),
                                                  give_up_s=max(0.1, deadline - time.monotonic()),
                                                  suffix=f"frontier-{app}")
                    frontiers.append(None if payload is None else parse_frontier(payload))
                    break
                except (aiomqtt.MqttError, TimeoutError) as error:
                    if time.monotonic() >= deadline:
                        log.warning("cannot read %s's frontier from MQTT broker %s (%s): publishing what this "
                                    "restarted sink delivers, repeats included", app, broker.url,
                                    shorten(str(error) or type(error).__name__, 200),
                                    extra={"event": "frontier_unread", "app": app})
                        frontiers.append(None)
                        break
                    await asyncio.sleep(backoff.next())
        frontier = None if None in frontiers or not frontiers else min(frontiers)
        log.info("restarted sink %s: frontier %s retained on its broker(s); records at or below it are not "
                 "published again", app, frontier, extra={"event": "frontier_read", "app": app, "frontier": frontier})
        gate = self.gates[app]
        skipped = gate.skipped
        for out, out_ids in gate.known(frontier):
            self._publish(out, out_ids)
        if gate.skipped > skipped:
            self.metrics.sink_skipped.labels(app).inc(gate.skipped - skipped)
