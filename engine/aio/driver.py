"""The asyncio driver: runs one :class:`~engine.node.NodeCore` on real sockets (DESIGN.md §3, §6).

Duties, in the order a message flows:

* **Links.** One TCP connection per node pair: the node whose name sorts first dials, the other
  accepts; the dialer retries with exponential back-off.  Both ends run the mutual shared-secret
  handshake of :mod:`engine.handshake` (frames of at most 512 bytes, at most
  :data:`MAX_UNAUTHENTICATED` such connections at once); a peer that fails it is logged (bounded)
  and counted, and disconnected before any frame reaches the core.  Every later frame carries a
  tag checked before it is decoded.  Optional TLS (mutually authenticated, one cluster CA) wraps the same
  bytes; it is started on the accepted/dialled socket by the link code, so a peer that fails it
  (no TLS, an untrusted certificate) is refused, logged and counted like a wrong secret.
* **Frames.** Length-prefixed msgpack (:mod:`engine.wire`); a frame that does not decode closes
  the link (the core replays from the last acknowledged offset when it comes back).
* **Time.** ``now`` is the wall clock in µs (NTP-synchronised on real servers, §II-B); the single
  timer is re-armed from ``next_timer()`` after every call into the core (aioquic's ``transmit``).
* **MQTT.** One :class:`~engine.aio.mqtt_session.BrokerSession` per broker the node uses: its own
  broker (``[mqtt]``, per node in ``[mqtt.brokers]``), where entry points read
  ``replicast/in/<stream>`` and applications and dead letters are published, and any others an
  application's ``[outputs.<app>] brokers`` names.  Persistent sessions, credentials, TLS.
* **Shutdown.** SIGTERM/SIGINT stop the node: links and sinks are closed, files flushed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import ssl
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import aiomqtt

from replicast.engine.aio.logs import LogBudget
from replicast.engine.aio.metrics import NodeMetrics
from replicast.engine.aio.mqtt_session import BrokerSession, read_retained
from replicast.engine.aio.supervise import Backoff, Supervisor
from replicast.engine.aio.tcp_source import SourceServer
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.handshake import NONCE_BYTES, FrameSealer, Handshake, Role, Stage, shorten
from replicast.engine.messages import Hello, Proof, Snapshot
from replicast.engine.node import (ControlRefused, DeadLetter, Decided, Delivered, NodeCore, PeerTimedOut, ProtocolError,
                         ReplicaChanged, StreamCutOff, configure, configure_pinned)
from replicast.engine.sinks import (BARE_PUNCTUATION_EVERY_US, DEAD_LETTER_TOPIC, FRONTIER_TOPIC, OUT_TOPIC,
                                    CallbackSink, FileSink, GateState, OutputIds, OutputState, RestartGate,
                                    dead_letter_payload, frontier_payload, mqtt_items, mqtt_properties,
                                    parse_frontier)
from replicast.operators.errors import ReplicastError
from replicast.operators.record import CLOSED
from replicast.engine.wire import WireError, decode, encode

log = logging.getLogger("replicast.node")


class NodeFailed(ReplicastError):
    """The node stopped because a driver task kept failing; the process exits non-zero."""

HANDSHAKE_TIMEOUT = 5.0
#: How long a metrics scrape waits for the event loop to refresh what it reads (then: the last refresh).
SCRAPE_WAIT_S = 1.0
#: Connections accepted but not yet authenticated; more are refused at once.  Each may hold its
#: stream reader's buffer (128 KiB at most) and one frame of at most 512 bytes, for at most
#: HANDSHAKE_TIMEOUT: strangers can make a node hold at most ~4 MiB.
MAX_UNAUTHENTICATED = 32
#: Refusals logged per minute; the rest are counted and summed up in one line.
REFUSAL_LOG_BURST = 20
#: A peer whose unsent bytes exceed this is disconnected; it is replayed from its acks on return.
MAX_WRITE_BUFFER = 64 * 1024 * 1024
#: Longest a link waits for a sink replica's output to reach its broker before the snapshot goes.
SNAPSHOT_HOLD_S = 1.0
IN_TOPIC = "replicast/in/+"
#: A restarted sink reading its retained frontier: how long after the subscription a retained
#: message may take to arrive, and how long it tries an unreachable broker before publishing
#: everything (at least once, as without a frontier).
FRONTIER_WAIT_S = 0.5
FRONTIER_GIVE_UP_S = 10.0


def now_us() -> int:
    return time.time_ns() // 1000


class NodeDriver:
    """Runs node ``name`` of ``config`` until :meth:`stop` (or SIGTERM)."""

    def __init__(self, config: ClusterConfig, name: str, *,
                 callbacks: dict[str, Callable[[Delivered], None]] | None = None, restarted: bool = False):
        self.config, self.name = config, name
        self.spec = config.nodes[name]
        self.core = NodeCore(name, config.query, config.options(), now=now_us(), restarted=restarted,
                             coordination=config.coordination(name))
        if config.min_cost:          # the coordinator deploys the operators (engine.placement_config)
            self.core.apply(configure_pinned(config.query, config.placement, name, config.entry_modes), now=now_us())
        else:
            self.core.apply(configure(config.query, config.placement, name, config.entry_modes, mode=config.mode),
                            now=now_us())
        self._cpu = (time.monotonic(), time.process_time())     # for the load placement reports carry
        self.links: dict[str, asyncio.StreamWriter] = {}
        self.metrics = NodeMetrics(name)
        self.sinks: dict[str, list] = defaultdict(list)
        self._mqtt_apps: dict[str, tuple] = {}       # app -> the brokers it publishes to
        self._names = {app: config.query.schemas[spec.input].names for app, spec in config.query.applications.items()}
        hosted_apps = [r.name for r in self.core.hosted if r.name in config.query.applications]
        mqtt = config.mqtt
        own = mqtt.broker_for(name)
        for app in hosted_apps:
            output = config.outputs.get(app)
            if output is None or output.mqtt:
                self._mqtt_apps[app] = (output.brokers if output is not None and output.brokers else (own,))
            if output is not None and output.file is not None:
                # ``{node}`` in the path: one file per sink replica where several share a disk
                self.sinks[app].append(FileSink(Path(str(output.file).replace("{node}", name)), app,
                                                self._names[app]))
        for app, function in (callbacks or {}).items():
            self.sinks[app].append(CallbackSink(function))
        #: Output ids per hosted application (docs/consume.md), and when its last punctuation went out.
        self._ids = {app: OutputIds(app) for app in hosted_apps}
        self._punctuated: dict[str, int] = {}
        #: A restarted node's MQTT sinks hold their output until the frontier they published before
        #: is read back (docs/consume.md, "A restarted sink"); the last frontier each retained.
        self._gates = {app: RestartGate(reading=restarted) for app in self._mqtt_apps}
        self._retained: dict[str, int] = {}
        self._files = [sink for sinks in self.sinks.values() for sink in sinks if isinstance(sink, FileSink)]
        #: node -> (deadline, [(session, queued mark)], frames): a link held for a sink's snapshot.
        self._held: dict[str, tuple[float, list, list[bytes], object]] = {}
        self._failing: set[str] = set()
        for sink in self._files:
            self._output_state(sink)
        self._has_entries = any(r.name in config.query.streams for r in self.core.hosted)
        #: broker URL -> session; the node's own broker first (input, dead letters), if it needs one.
        self.mqtt_sessions: dict[str, BrokerSession] = {}
        if self._has_entries or any(own in brokers for brokers in self._mqtt_apps.values()):
            self.mqtt_sessions[own.url] = BrokerSession(
                own, mqtt, name, self.metrics, topic=IN_TOPIC if self._has_entries else None,
                on_message=lambda topic, payload: self._on_source(topic.rsplit("/", 1)[-1], payload))
        for brokers in self._mqtt_apps.values():
            for broker in brokers:
                if broker.url not in self.mqtt_sessions:
                    self.mqtt_sessions[broker.url] = BrokerSession(broker, mqtt, name, self.metrics)
        self._own_broker = own.url
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: int | None = None
        self._stop = asyncio.Event()
        self._supervisor = Supervisor(self.metrics.task_failures, self._fatal,
                                      on_down=lambda task: self.metrics.ready.set(0))
        #: Why the node stopped on its own (a task in a crash loop), or None.
        self.failure: str | None = None
        self.refused = 0
        self._peers = frozenset(config.nodes)
        self._sealers: dict[str, FrameSealer] = {}
        self._unauthenticated = 0
        self._refusal_log = LogBudget(log, "refused connections", "refused", REFUSAL_LOG_BURST)
        self._control_log = LogBudget(log, "refused control messages", "control_refused", REFUSAL_LOG_BURST)
        self._ready_logged = False
        #: TLS contexts (client, server), indexed by "is this the accepting side", or None.
        self._tls = (self._ssl_context(server=False), self._ssl_context(server=True)) if config.tls else None

    # -- lifecycle ------------------------------------------------------------------------------
    async def run(self, *, install_signals: bool = True) -> None:
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        server = await asyncio.start_server(self._accept, self.spec.host, self.spec.port, reuse_address=True)
        source_server = None
        if self.spec.source_port is not None:
            source_server = SourceServer(self.config.source_connections, self._on_source_line, self.metrics,
                                         secret=self.config.secret, tls=self._tls[1] if self._tls else None)
            await source_server.start(self.spec.host, self.spec.source_port)
            log.info("node %s accepts sources on %s:%d", self.name, self.spec.host, self.spec.source_port,
                     extra={"event": "source_listening"})
        metrics_server = None
        self._loop_thread = threading.get_ident()
        self.metrics.before_scrape = lambda: self._refresh_for_scrape(loop)
        if self.spec.metrics_port is not None:
            metrics_server = self.metrics.serve(self.spec.host, self.spec.metrics_port)
        log.info("node %s listening on %s:%d", self.name, self.spec.host, self.spec.port,
                 extra={"event": "listening", "replicas": [str(r) for r in self.core.hosted]})
        supervise = self._supervisor.start
        for peer in sorted(self.config.nodes):
            if peer > self.name:
                supervise(f"dial {peer}", lambda peer=peer: self._dial(peer))
        for url, session in self.mqtt_sessions.items():
            supervise("mqtt" if url == self._own_broker else f"mqtt {url}", session.run)
        supervise("metrics", self._refresh_metrics)
        if self._files:
            supervise("outputs", self._retry_outputs)
        for app, gate in self._gates.items():
            if gate.state is GateState.READING:
                supervise(f"frontier {app}", lambda app=app: self._read_frontier(app))
        self._transmit()
        try:
            await self._stop.wait()
        finally:
            log.info("node %s stopping", self.name, extra={"event": "stopping"})
            server.close()
            if source_server is not None:
                source_server.close()
            await self._supervisor.cancel_all()
            for writer in list(self.links.values()):
                writer.close()
            if self._timer:
                self._timer.cancel()
            for sinks in self.sinks.values():
                for sink in sinks:
                    sink.close()
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
        self.stop()

    def _ssl_context(self, server: bool) -> ssl.SSLContext | None:
        tls = self.config.tls_files(self.name)
        if not tls:
            return None
        purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
        context = ssl.create_default_context(purpose, cafile=str(tls["ca"]))
        context.load_cert_chain(str(tls["cert"]), str(tls["key"]))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False            # nodes are named by the cluster file, not DNS
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    # -- links ----------------------------------------------------------------------------------
    async def _dial(self, peer: str) -> None:
        spec, backoff = self.config.nodes[peer], Backoff()
        while True:
            try:
                reader, writer = await asyncio.open_connection(spec.host, spec.port)
            except OSError:
                await asyncio.sleep(backoff.next())
                continue
            backoff.reset()
            await self._link(reader, writer, expected=peer)
            await asyncio.sleep(backoff.next())

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        # Called inside connection_made, before any byte is read: with TLS, stop reading until
        # start_tls takes the transport over, or the ClientHello would land in the plain reader.
        if self._tls is not None:
            writer.transport.pause_reading()
        return self._accepted(reader, writer)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._unauthenticated >= MAX_UNAUTHENTICATED:
            self._refuse(writer.get_extra_info("peername"),
                         f"{MAX_UNAUTHENTICATED} connections are already in their handshake")
            writer.close()
            return
        self._unauthenticated += 1        # _link counts it down when the handshake ends
        try:
            await self._link(reader, writer, expected=None)
        except asyncio.CancelledError:
            pass          # shutdown: asyncio's server callback would log a cancelled handler as an error

    async def _handshake(self, reader, writer, expected: str | None) -> Handshake:
        """Run the handshake (engine.handshake) to its end; raises WireError if it fails."""
        role = Role.DIALER if expected is not None else Role.ACCEPTOR
        shake = Handshake(self.config.secret, self.name, role, os.urandom(NONCE_BYTES), peers=self._peers,
                          expected=expected)
        writer.write(shake.start())
        while shake.stage is not Stage.DONE:
            writer.write(shake.feed(await reader.read(4096)))
        return shake

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, expected: str | None) -> None:
        address = writer.get_extra_info("peername")
        stage = "handshake"
        try:
            if self._tls is not None:
                # TLS first (the dialer is the TLS client); its failures are refusals like a bad proof.
                stage = "TLS handshake"
                await asyncio.wait_for(writer.start_tls(self._tls[expected is None]), HANDSHAKE_TIMEOUT)
                stage = "handshake"
            shake = await asyncio.wait_for(self._handshake(reader, writer, expected), HANDSHAKE_TIMEOUT)
        except (WireError, asyncio.TimeoutError, OSError) as error:
            if isinstance(error, asyncio.TimeoutError):
                error = f"no {stage} within {HANDSHAKE_TIMEOUT:.0f} s"
            elif isinstance(error, ssl.SSLError):
                error = f"TLS: {error}"
            elif not str(error):
                error = type(error).__name__
            self._refuse(address, str(error))
            writer.close()
            return
        finally:
            if expected is None:
                self._unauthenticated -= 1
        peer = shake.peer
        sealer, opener, decoder, early = shake.link()
        old = self.links.pop(peer, None)
        if old is not None:
            old.close()
            self.core.on_peer_down(peer, now=now_us())
        self.links[peer] = writer
        self._sealers[peer] = sealer
        self.metrics.peer_connected.labels(peer).set(1)
        log.info("link to %s up", peer, extra={"event": "link_up", "peer": peer})
        self.core.on_peer_up(peer, now=now_us())
        try:
            for body in early:
                self._receive(peer, decode(opener.open(body)))
            self._transmit()
            while data := await reader.read(262144):
                for body in decoder.feed(data):
                    self._receive(peer, decode(opener.open(body)))
                self._transmit()
        except WireError as error:
            self.metrics.links_dropped.labels(peer, "bad_frame").inc()
            log.warning("closing link to %s: %s", peer, shorten(str(error), 200),
                        extra={"event": "bad_frame", "peer": peer})
        except OSError:
            pass
        except Exception as error:     # a frame the core could not apply: drop the link, redial later
            self.metrics.links_dropped.labels(peer, "unapplicable").inc()
            log.warning("closing link to %s: a frame could not be applied: %s: %s", peer, type(error).__name__,
                        shorten(str(error), 200), extra={"event": "unapplicable_frame", "peer": peer},
                        exc_info=not isinstance(error, ReplicastError))
        finally:
            writer.close()
            if self.links.get(peer) is writer:
                del self.links[peer]
                del self._sealers[peer]
                self.metrics.peer_connected.labels(peer).set(0)
                log.info("link to %s down", peer, extra={"event": "link_down", "peer": peer})
                self.core.on_peer_down(peer, now=now_us())
                self._transmit()

    def _refuse(self, address, reason: str) -> None:
        """Count a refused connection; log it, at most ``REFUSAL_LOG_BURST`` lines per minute."""
        self.refused += 1
        self.metrics.refused.set(self.refused)
        if self._refusal_log.allow(int(time.monotonic() // 60)):
            log.warning("refused connection from %s: %s", address, shorten(reason, 200),
                        extra={"event": "refused", "address": str(address)})

    def _receive(self, peer: str, message) -> None:
        if isinstance(message, (Hello, Proof)):
            raise WireError("handshake frame after the handshake")
        self.core.receive(peer, message, now=now_us())

    # -- the core's outputs ---------------------------------------------------------------------
    def _transmit(self) -> None:
        """Flush the core's outbox to the links, handle its events, re-arm the timer."""
        frames: dict[str, list[bytes]] = defaultdict(list)
        for node, message in self.core.messages_to_send():   # acks come coalesced (engine.core.links)
            if isinstance(message, Snapshot) and message.donor.name in self._mqtt_apps:
                self._hold_for_output(node, message.donor.name)
            try:
                frames[node].append(encode(message))
            except Exception as error:     # a value the wire cannot carry: a bug upstream, never a crash
                self.metrics.task_failures.labels("encode").inc()
                log.error("cannot encode a %s for %s: %s: %s", type(message).__name__, node, type(error).__name__,
                          shorten(str(error), 200), extra={"event": "encode_failed", "peer": node})
        for node, chunks in frames.items():
            if node in self._held:
                self._held[node][2].extend(chunks)
                continue
            writer = self.links.get(node)
            if writer is None:
                continue                      # replayed by on_peer_up when the link returns
            if writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
                self.metrics.links_dropped.labels(node, "slow_peer").inc()
                log.warning("peer %s is not reading; dropping the link", node, extra={"event": "slow_peer"})
                writer.close()
                continue
            seal = self._sealers[node].seal
            writer.write(b"".join([piece for chunk in chunks for piece in seal(chunk)]))
        letters: dict[str, list[DeadLetter]] = {}
        for event in self.core.events():
            if isinstance(event, DeadLetter):
                letters.setdefault(event.stream, []).append(event)
            else:
                self._on_event(event)
        for stream, rejected in letters.items():     # one dead letter per source message and stream
            self._dead_letter(stream, rejected)
        when = self.core.next_timer()
        if when != self._timer_when:
            if self._timer:
                self._timer.cancel()
            self._timer_when = when
            self._timer = asyncio.get_running_loop().call_later(max(0.0, (when - now_us()) / 1e6), self._on_timer)

    # -- a sink replica's snapshot waits for what it delivered to be published --------------------
    def _hold_for_output(self, node: str, app: str) -> None:
        """A sink replica gives a joining one its snapshot: the joiner will publish only what comes
        after it, so everything this one delivered before must be at the broker first, or a kill
        of this node now would lose it (docs/consume.md).  The frames to ``node`` wait until the
        app's sessions have every message queued so far acknowledged, at most SNAPSHOT_HOLD_S."""
        marks = [(session, session.queued) for broker in self._mqtt_apps[app]
                 if (session := self.mqtt_sessions[broker.url]).acked < session.queued]
        if marks and node not in self._held:
            hold = min(SNAPSHOT_HOLD_S, self.config.peer_timeout_ms / 3000)
            self._held[node] = (time.monotonic() + hold, marks, [], self.links.get(node))
            for session, _ in marks:
                session.on_acked = self._release_held

    def _release_held(self) -> None:
        for node, (deadline, marks, chunks, link) in list(self._held.items()):
            if all(session.acked >= mark for session, mark in marks) or time.monotonic() >= deadline:
                del self._held[node]
                writer = self.links.get(node)
                if writer is not None and writer is link and chunks:    # a new link replays on its own
                    seal = self._sealers[node].seal
                    writer.write(b"".join([piece for chunk in chunks for piece in seal(chunk)]))

    def _on_timer(self) -> None:
        self._timer = self._timer_when = None
        try:
            self.core.handle_timer(now=now_us())
        except Exception:          # a bug: counted and logged; the timer is re-armed below
            self.metrics.task_failures.labels("timer").inc()
            log.exception("the core's timer failed", extra={"event": "task_failed", "task": "timer"})
        self._transmit()

    def _on_event(self, event) -> None:
        if isinstance(event, Delivered):
            if event.punctuation is not None:
                self.metrics.app_punctuation.labels(event.app).set(event.punctuation)
            app = event.app
            ids = self._ids[app].ids(event) if app in self._ids else None
            for sink in self.sinks.get(app, ()):
                try:
                    sink(event, ids)
                except Exception as error:    # a sink that cannot take a delivery must not stop the node
                    self.metrics.sink_errors.labels(app).inc()
                    log.error("%s for %s failed: %s: %s", type(sink).__name__, app, type(error).__name__,
                              shorten(str(error), 200), extra={"event": "sink_failed", "app": app})
                if isinstance(sink, FileSink):
                    self._output_state(sink)
            # Punctuations ride along with records; a bare one is published when the stream closes
            # or BARE_PUNCTUATION_EVERY_US after the last, so a consumer's memory of ids stays
            # bounded (docs/consume.md) and subscribers are not flooded every punctuation interval.
            if app in self._mqtt_apps:
                gate = self._gates[app]
                skipped = gate.skipped
                for out, out_ids in gate.offer(event, ids):
                    self._publish(out, out_ids)
                if gate.skipped > skipped:
                    self.metrics.sink_skipped.labels(app).inc(gate.skipped - skipped)
        elif isinstance(event, PeerTimedOut):
            writer = self.links.get(event.node)
            log.warning("no heartbeat from %s; dropping the link", event.node, extra={"event": "peer_timeout"})
            if writer is not None:
                writer.close()
        elif isinstance(event, ProtocolError):
            writer = self.links.get(event.node)
            log.warning("dropping the link to %s: %s", event.node, event.reason,
                        extra={"event": "protocol_error", "peer": event.node})
            if writer is not None:
                writer.close()
        elif isinstance(event, ReplicaChanged):
            log.info("replica %s: %s -> %s (%s)", event.replica, event.old, event.new, event.reason,
                     extra={"event": "replica_state", "replica": str(event.replica), "state": event.new})
        elif isinstance(event, ControlRefused):
            if self._control_log.allow(int(time.monotonic() // 60)):
                log.warning("refused a control message from %s: %s", shorten(event.node), shorten(event.reason, 200),
                            extra={"event": "control_refused", "peer": shorten(event.node)})
        elif isinstance(event, Decided):
            decision = event.decision
            kind = type(decision).__name__.lower()
            log.info("placement (%s): %s %s on %s", decision.reason, kind, decision.target, ", ".join(decision.nodes),
                     extra={"event": "placement_decision", "reason": decision.reason, "decision": kind,
                            "target": decision.target, "nodes": list(decision.nodes)})
        elif isinstance(event, StreamCutOff):
            log.warning("stream replica %s -> %s on %s lagged past the retention limit (%d items kept); "
                        "its log no longer waits for it", event.stream.source, event.stream.target, event.node,
                        event.retained, extra={"event": "stream_cut", "peer": event.node})

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
        retain = event.punctuation is not None and event.punctuation > self._retained.get(app, -1)
        for broker in self._mqtt_apps[app]:
            session = self.mqtt_sessions[broker.url]
            session.publish(OUT_TOPIC.format(app=app), payload, properties)
            if retain:       # after the payload on the same session: the broker has that first
                session.publish(FRONTIER_TOPIC.format(app=app), frontier_payload(event.punctuation), retain=True)
        if retain:
            self._retained[app] = event.punctuation

    async def _read_frontier(self, app: str) -> None:
        """Read the frontier retained for ``app`` on each of its brokers (the lowest counts: each
        broker holds what was published to it), then let the held deliveries through the gate."""
        frontiers: list[int | None] = []
        deadline = time.monotonic() + FRONTIER_GIVE_UP_S
        for broker in self._mqtt_apps[app]:
            backoff = Backoff(0.1, 1.0)
            while True:
                try:
                    payload = await read_retained(broker, self.config.mqtt, self.name, FRONTIER_TOPIC.format(app=app),
                                                  wait_s=FRONTIER_WAIT_S, suffix=f"frontier-{app}")
                    frontiers.append(None if payload is None else parse_frontier(payload))
                    break
                except aiomqtt.MqttError as error:
                    if time.monotonic() >= deadline:
                        log.warning("cannot read %s's frontier from MQTT broker %s (%s): publishing what this "
                                    "restarted sink delivers, repeats included", app, broker.url,
                                    shorten(str(error), 200), extra={"event": "frontier_unread", "app": app})
                        frontiers.append(None)
                        break
                    await asyncio.sleep(backoff.next())
        frontier = None if None in frontiers or not frontiers else min(frontiers)
        log.info("restarted sink %s: frontier %s retained on its broker(s); records at or below it are not "
                 "published again", app, frontier, extra={"event": "frontier_read", "app": app, "frontier": frontier})
        gate = self._gates[app]
        skipped = gate.skipped
        for out, out_ids in gate.known(frontier):
            self._publish(out, out_ids)
        if gate.skipped > skipped:
            self.metrics.sink_skipped.labels(app).inc(gate.skipped - skipped)

    def _bare_punctuation_due(self, event: Delivered) -> bool:
        if event.punctuation is None:
            return False
        last = self._punctuated.get(event.app)
        return event.punctuation == CLOSED or last is None or event.now - last >= BARE_PUNCTUATION_EVERY_US

    # -- file outputs (engine.sinks.FileSink: whole lines or nothing) ---------------------------
    def _output_state(self, sink: FileSink) -> None:
        """Report a file output's state change: metric, one log line (event), readiness."""
        failing = sink.state is OutputState.FAILING
        self.metrics.output_ready.labels(sink.app).set(0 if failing else 1)
        if failing and sink.app not in self._failing:
            self._failing.add(sink.app)
            log.error("output of %s failing, %d line(s) waiting, retried: %s", sink.app, len(sink.pending),
                      shorten(sink.error or "", 200), extra={"event": "output_failing", "app": sink.app})
        elif not failing and sink.app in self._failing:
            self._failing.discard(sink.app)
            log.info("output of %s writing again", sink.app, extra={"event": "output_recovered", "app": sink.app})

    async def _retry_outputs(self) -> None:
        """Retry failing file outputs with back-off (each application on its own; the others run on)."""
        backoff = Backoff(first=0.1, cap=5.0)
        while True:
            failing = [sink for sink in self._files if sink.state is OutputState.FAILING]
            if not failing:
                backoff.reset()
                await asyncio.sleep(0.2)
                continue
            await asyncio.sleep(backoff.next())
            for sink in failing:
                sink.retry()
                self._output_state(sink)

    def _dead_letter(self, stream: str, rejected: list[DeadLetter]) -> None:
        """The rejects of one source message: one log line, one bounded dead letter with the count."""
        self.metrics.dead_letter_messages.inc()
        log.info("%d dead letter(s) on %s: %s", len(rejected), shorten(stream), shorten(rejected[0].reason, 200),
                 extra={"event": "dead_letter", "stream": shorten(stream), "count": len(rejected)})
        session = self.mqtt_sessions.get(self._own_broker)
        if session is not None:          # a dead letter comes from an entry point, whose node has one
            session.publish(DEAD_LETTER_TOPIC, dead_letter_payload(self.name, stream, rejected))

    # -- sources --------------------------------------------------------------------------------
    def _on_source_line(self, stream: str, payload: bytes) -> None:
        """One line from a TCP source connection: the same path as an MQTT input message."""
        self._on_source(stream, payload)

    def _on_source(self, stream: str, payload: bytes) -> None:
        """One source message (MQTT or TCP line): whatever it holds, the node goes on."""
        try:
            self.core.on_source(stream, payload, now=now_us())
        except Exception as error:         # a bug (the core rejects bad input itself): drop it, loudly
            self.metrics.source_errors.labels(shorten(stream, 40)).inc()
            log.exception("a message on %s could not be handled (%d bytes): %s", shorten(stream), len(payload),
                          type(error).__name__, extra={"event": "source_failed", "stream": shorten(stream)})
        self._transmit()

    # -- MQTT -----------------------------------------------------------------------------------
    @property
    def mqtt_connected(self) -> bool:
        """Every broker session this node needs is up (engine.aio.mqtt_session)."""
        return all(session.connected for session in self.mqtt_sessions.values())

    # -- readiness and metrics ------------------------------------------------------------------
    def is_ready(self) -> bool:
        peers = set(self.config.nodes) - {self.name}
        return (peers <= set(self.links) and not self._supervisor.down
                and self.mqtt_connected and self.core.ready()
                and not self._failing and self._placed())

    def _placed(self) -> bool:
        """With ``placement = "min-cost"``: the coordinator has wired this node's entry points
        (each feeds something) and applications (each is fed), so sources may start."""
        if not self.config.min_cost:
            return True
        core = self.core
        for replica, hosted in core.hosted.items():
            if hosted.kind == "entry" and not hosted.routes:
                return False
            if hosted.kind == "application" and not any(s.target == replica for s in core.inbound):
                return False
        return True

    def _measure_load(self) -> None:
        """The share of a core this process used since the last call, for placement reports."""
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self._cpu[0] >= 1.0:
            self.core.set_load((cpu - self._cpu[1]) / (wall - self._cpu[0]))
            self._cpu = (wall, cpu)

    async def _refresh_metrics(self) -> None:
        while True:
            self._refresh_once()
            await asyncio.sleep(0.2)

    def _refresh_once(self) -> None:
        if self._held:
            self._release_held()          # a hold past its deadline (no acknowledgement came)
        self.metrics.mqtt_connected.set(1 if self.mqtt_connected else 0)
        if self.core.coordination is not None:
            self._measure_load()
        self.metrics.refresh(self.core.statistics())
        ready = self.is_ready()
        self.metrics.ready.set(1 if ready else 0)
        if ready and not self._ready_logged:
            self._ready_logged = True
            log.info("node %s ready", self.name, extra={"event": "ready"})

    def _refresh_for_scrape(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the metrics server's thread: have the event loop refresh what a scrape reads, waiting
        at most :data:`SCRAPE_WAIT_S`.  A busy or stopped loop, or a refresh that fails (the metrics
        task reports that itself), leaves the scrape the last refresh.  Collected on the loop's own
        thread (an embedding application's coroutine), it refreshes at once instead of waiting."""
        if loop.is_running() and threading.get_ident() == self._loop_thread:
            self._refresh_once()
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def refresh() -> None:
            try:
                self._refresh_once()
                done.set_result(None)
            except Exception as error:
                done.set_exception(error)
        try:
            loop.call_soon_threadsafe(refresh)
            done.result(SCRAPE_WAIT_S)
        except Exception:
            pass
