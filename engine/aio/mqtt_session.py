"""One node's MQTT session with one broker: QoS 1 in and out, a session the broker keeps while the
node is away, credentials and TLS (docs/node.md, "MQTT"; docs/deploy.md).

Rules:

1. **A stable client id** (``[mqtt] client_id``, default ``replicast-<node>``) and a *persistent*
   session: the broker keeps the node's subscription, and queues the QoS-1 input that arrives while
   the node is away (a broken link, a broker restart with persistence), for ``session_expiry_s``
   (MQTT 5).  Without it, input published between a broker's restart and the node's resubscription
   — 3–4 s measured — was acknowledged to the sources and reached no node.
2. **A clean start once per process**: the first connection discards a session left by an earlier
   run (its queued input belongs to that run: a restarted node's entry points rejoin from a live
   peer, docs/lifecycle.md); every later connection resumes.  The clean start is a connection of
   its own, followed at once by the persistent one: mosquitto writes to its persistence file only
   sessions whose connection did not start clean (so a kill -9 of the broker forgot a node still on
   its first connection), and an MQTT 3.1.1 clean session (the embedded amqtt broker speaks nothing
   newer) is not kept at all.
3. **MQTT 5 first**; a broker that refuses the protocol version is spoken to in 3.1.1 from then on
   (logged once).
4. **What cannot be accounted for is counted**: a resumed connection on which the broker says it
   has no session for us (``session present`` is 0: it restarted without persistence, or the
   session expired) may have lost input; it is logged and counted
   (``replicast_mqtt_sessions_lost_total{broker}``).  A refused subscription (an ACL) is an error
   naming the topic, and the connection is retried.
5. **Output is sent until the broker has it**: a message leaves the outbox only when its PUBACK
   arrives; one in flight when the connection breaks is sent again (at least once).
6. QoS-1 redeliveries of input already handled are dropped (:mod:`engine.aio.mqtt_input`).

Each connection is an :class:`engine.aio.paho_link.Link`: paho-mqtt driven on its public
external-event-loop API, as the consumer's connections are.  aiomqtt 2.5 drops the DUP flag (rule
6) and the CONNACK's session-present flag (rule 4) and has no public API for either; paho reports
both publicly.  (Reading them from aiomqtt meant wrapping its private callback hooks.)  aiomqtt
still serves :func:`read_retained`, through its public API only.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
import time
from collections import deque
from typing import Callable

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from replicast.engine.aio.logs import LogBudget
from replicast.engine.aio.mqtt_input import RedeliveryFilter
from replicast.engine.aio.paho_link import ConnectRefused, Delivery, Link, LinkError, Protocol
from replicast.engine.aio.supervise import Backoff
from replicast.engine.handshake import shorten
from replicast.engine.mqtt_config import BrokerAddress, MqttSettings
from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.node")

#: CONNACK codes for "this protocol version is not spoken here" (MQTT 3.1.1 §3.2.2.3, MQTT 5 §3.2.2.2).
UNSUPPORTED_VERSION = (1, 132)
#: Seconds a CONNECT waits for its CONNACK, and a SUBSCRIBE or PUBLISH for its acknowledgement.
CONNECT_TIMEOUT_S = CALL_TIMEOUT_S = 10
#: Reconnect back-off cap: a broker back after a restart is found within this.
RECONNECT_CAP_S = 1.0
#: Failed connection attempts logged per minute and broker; the rest are counted in one line.
DOWN_LOG_BURST = 5


class SessionState(enum.Enum):
    """Where a broker session stands (rule 2)."""

    NEW = "new"                  # this process has not connected yet: the next connection starts clean
    CONNECTED = "connected"
    AWAY = "away"                # disconnected; the broker should be keeping the session


#: (state, event) -> next state.
TRANSITIONS = {
    (SessionState.NEW, "connected"): SessionState.CONNECTED,
    (SessionState.NEW, "failed"): SessionState.NEW,
    (SessionState.CONNECTED, "lost"): SessionState.AWAY,
    (SessionState.AWAY, "connected"): SessionState.CONNECTED,
    (SessionState.AWAY, "failed"): SessionState.AWAY,
}


class MqttTlsError(ReplicastError):
    """A TLS file of ``[mqtt]`` cannot be used (the node does not start: one line naming it)."""


def tls_context(settings: MqttSettings, node: str) -> ssl.SSLContext:
    """A client context that checks the broker's certificate (against ``ca`` or the system's CAs)
    and its host name, and presents the node's certificate if ``cert``/``key`` are set."""
    files = settings.tls_files(node)
    try:
        context = ssl.create_default_context(cafile=str(files["ca"]) if "ca" in files else None)
    except (OSError, ssl.SSLError) as error:
        raise MqttTlsError(f"[mqtt] ca {files['ca']}: {error.strerror or error}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if "cert" in files:
        try:
            context.load_cert_chain(str(files["cert"]), str(files["key"]))
        except (OSError, ssl.SSLError) as error:
            raise MqttTlsError(f"[mqtt] cert {files['cert']} / key {files['key']}: {error.strerror or error}") from None
    return context


class BrokerSession:
    """Node ``node``'s session with ``broker``: subscribes to ``topic`` (if given) and hands each
    message to ``on_message(topic, payload)``; :meth:`publish` queues output.  :meth:`run` keeps it
    connected for ever (a supervised task).  Each connection is an :class:`engine.aio.paho_link.Link`
    (paho's public API: it gives the DUP and session-present flags, module docstring there)."""

    def __init__(self, broker: BrokerAddress, settings: MqttSettings, node: str, metrics, *,
                 topic: str | None = None, on_message: Callable[[str, bytes], None] | None = None):
        self.broker, self.settings, self.node, self.metrics = broker, settings, node, metrics
        self.topic, self.on_message = topic, on_message
        self.state = SessionState.NEW
        self.outbox: deque[tuple[str, bytes, list | None, bool]] = deque()
        #: Messages queued and acknowledged by the broker since the start (the driver waits on these).
        self.queued = self.acked = 0
        self.on_acked: Callable[[], None] | None = None
        self._wakeup = asyncio.Event()
        self.protocol = Protocol.V311 if broker.url == "embedded" else Protocol.V5
        self.redeliveries = RedeliveryFilter()
        self.sessions_lost = 0
        self._tls = tls_context(settings, node) if broker.tls else None
        self._down_log = LogBudget(log, f"failed connections to MQTT broker {broker.url}", "mqtt_down", DOWN_LOG_BURST)
        #: Messages received (and acknowledged by paho on receipt), not yet handed to ``on_message``:
        #: kept across a lost connection, so none is dropped with it.
        self._inbox: deque[Delivery] = deque()
        self._received = asyncio.Event()
        #: Per connection: the SUBACK's and the PUBACKs' futures (by packet id).
        self._suback: asyncio.Future[None] | None = None
        self._pubacks: dict[int, asyncio.Future[None]] = {}

    @property
    def connected(self) -> bool:
        return self.state is SessionState.CONNECTED

    def _move(self, event: str) -> None:
        self.state = TRANSITIONS[(self.state, event)]

    def publish(self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None = None, *,
                retain: bool = False) -> None:
        """Queue ``payload`` for ``topic`` (QoS 1); sent once connected, kept until acknowledged.
        ``user_properties`` go with it where the broker speaks MQTT 5 (output ids, docs/consume.md);
        ``retain``: the broker keeps it for later subscribers (a sink's frontier)."""
        self.outbox.append((topic, payload, user_properties, retain))
        self.queued += 1
        self._wakeup.set()

    # -- connecting -----------------------------------------------------------------------------
    def _link(self, *, clean: bool) -> Link:
        """A connection starting clean (a session that ends with it) or resuming the persistent
        one (kept ``session_expiry_s`` after it)."""
        settings = self.settings
        return Link(self.broker, settings.identifier(self.node), self.protocol, clean=clean,
                    deliver=self._deliver, on_subscribed=self._subscribed, on_published=self._published,
                    receive_maximum=None, manual_ack=False, session_expiry_s=settings.session_expiry_s,
                    bare_clean_start=True, username=settings.username, password=settings.password,
                    tls_context=self._tls)

    async def _connect(self) -> Link:
        """An open link on a persistent session (rules 2, 3); raises LinkError or OSError."""
        clean = self.state is SessionState.NEW
        while True:
            try:
                if clean:                                 # rule 2: discard, then persist
                    first = self._link(clean=True)
                    await first.open(CONNECT_TIMEOUT_S)
                    first.close()
                link = self._link(clean=False)
                await link.open(CONNECT_TIMEOUT_S)
                return link
            except ConnectRefused as error:               # a refusal in the CONNACK, here
                if error.code in UNSUPPORTED_VERSION and self.protocol is Protocol.V5:
                    log.info("MQTT broker %s does not speak MQTT 5; using 3.1.1", self.broker.url,
                             extra={"event": "mqtt_protocol", "broker": self.broker.url})
                    self.protocol = Protocol.V311
                    continue
                raise

    async def run(self) -> None:
        backoff = Backoff(cap=RECONNECT_CAP_S)
        url = self.broker.url
        while True:
            link = None
            try:
                link = await self._connect()
                if self.state is SessionState.AWAY and not link.session_present:
                    self._session_lost()
                if self.topic is not None:
                    await self._subscribe(link)
                self._move("connected")           # ready only once subscribed (docs/node.md)
                backoff.reset()
                log.info("connected to MQTT broker %s (%s session)", url,
                         "resumed" if link.session_present else "new", extra={"event": "mqtt_up", "broker": url})
                await self._serve(link)
            except (LinkError, OSError) as error:
                if self._down_log.allow(int(time.monotonic() // 60)):
                    log.warning("MQTT broker %s: %s", url, shorten(str(error) or type(error).__name__, 200),
                                extra={"event": "mqtt_down", "broker": url})
            finally:
                if link is not None:
                    link.close()
                self._forget_calls()
                self._move("lost" if self.state is SessionState.CONNECTED else "failed")
            self._hand_out()                      # what came before the link broke, acknowledged already
            await asyncio.sleep(backoff.next())

    def _session_lost(self) -> None:
        """Rule 4: the broker forgot us while we were away; what it took meanwhile is not ours."""
        url = self.broker.url
        self.sessions_lost += 1
        self.metrics.mqtt_sessions_lost.labels(url).inc()
        log.warning("MQTT broker %s kept no session for node %s (it restarted without persistence, or the session "
                    "expired): input published while the node was away is lost to it", url, self.node,
                    extra={"event": "mqtt_session_lost", "broker": url})

    async def _subscribe(self, link: Link) -> None:
        self._suback = asyncio.get_running_loop().create_future()
        link.subscribe(self.topic)
        await self._until(link, self._suback, f"no SUBACK for {self.topic} within {CALL_TIMEOUT_S} s")
        codes = link.granted
        if any(code >= 128 for code in codes):
            raise LinkError(f"the broker refused the subscription to {self.topic} "
                            f"(code {codes[0]}: check the broker's ACL for this user)")

    async def _until(self, link: Link, future: asyncio.Future, late: str) -> None:
        """Wait for ``future`` (a SUBACK, a PUBACK) while ``link`` is open, at most CALL_TIMEOUT_S."""
        done, _ = await asyncio.wait([future, link.closed], timeout=CALL_TIMEOUT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if future in done:
            return
        raise LinkError(f"connection lost ({link.close_reason or 'closed'})" if link.closed.done() else late)

    def _forget_calls(self) -> None:
        for future in [self._suback, *self._pubacks.values()]:
            if future is not None and not future.done():
                future.cancel()
        self._suback, self._pubacks = None, {}

    # -- paho's callbacks (on the event loop's thread) ------------------------------------------
    def _deliver(self, delivery: Delivery) -> None:
        self._inbox.append(delivery)
        self._received.set()

    def _subscribed(self) -> None:
        if self._suback is not None and not self._suback.done():
            self._suback.set_result(None)

    def _published(self, mid: int) -> None:
        future = self._pubacks.get(mid)
        if future is not None and not future.done():
            future.set_result(None)

    # -- a connection's life --------------------------------------------------------------------
    async def _serve(self, link: Link) -> None:
        """Input and output live and die together: whichever ends first ends the connection."""
        tasks = [asyncio.create_task(self._input()), asyncio.create_task(self._output(link)),
                 asyncio.create_task(self._keepalive(link))]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            task.result()                  # re-raise what ended it (LinkError or a bug)

    @staticmethod
    async def _keepalive(link: Link) -> None:
        await link.run()                   # pings until the connection closes
        raise LinkError(f"connection lost ({link.close_reason or 'closed'})")

    async def _input(self) -> None:
        while True:
            self._hand_out()
            self._received.clear()
            await self._received.wait()

    def _hand_out(self) -> None:
        """Hand each received message to ``on_message``, but QoS-1 redeliveries (rule 6)."""
        while self._inbox:
            delivery = self._inbox.popleft()
            topic, payload = delivery.topic, bytes(delivery.payload)
            if self.redeliveries.is_redelivery(delivery.mid, delivery.dup, topic, payload):
                self.metrics.mqtt_redeliveries.inc()
                continue
            if self.on_message is not None:
                traceparent = _traceparent(delivery.properties)
                if traceparent is None:
                    self.on_message(topic, payload)
                else:                          # an external producer's trace (docs/tracing.md)
                    self.on_message(topic, payload, traceparent)

    async def _output(self, link: Link) -> None:
        queue = self.outbox
        loop = asyncio.get_running_loop()
        while True:
            while queue:
                topic, payload, user_properties, retain = queue[0]
                properties = None
                if user_properties and self.protocol is Protocol.V5:
                    properties = Properties(PacketTypes.PUBLISH)
                    properties.UserProperty = user_properties
                future = loop.create_future()
                mid = link.publish(topic, payload, properties=properties, retain=retain)
                self._pubacks[mid] = future
                try:
                    await self._until(link, future, f"no PUBACK for a message to {topic} within {CALL_TIMEOUT_S} s")
                finally:
                    self._pubacks.pop(mid, None)
                queue.popleft()                  # only once the broker has it: never lost on reconnect
                self.acked += 1
                if self.on_acked is not None:
                    self.on_acked()
            self._wakeup.clear()
            await self._wakeup.wait()


async def read_retained(broker: BrokerAddress, settings: MqttSettings, node: str, topic: str, *,
                        give_up_s: float, suffix: str = "frontier") -> bytes | None:
    """The message retained on ``topic`` at ``broker``, or None if nothing is retained there.

    "Nothing retained" is known, not guessed from a time-out: once the subscription to ``topic`` is
    acknowledged, the reader publishes a QoS-1 marker on ``<topic>/read/<client id>``, a topic it
    has also subscribed to.  A broker sends a subscription's retained message while it handles the
    SUBSCRIBE, before it reads the marker's PUBLISH that came later on the same connection
    (mosquitto and amqtt both), so the marker coming back first means nothing is retained; a busy
    node reads both in order however late it gets to them.  A short clean session of its own
    (client id ``<node's>-<suffix>``: distinct per reader, or the broker drops the older
    connection), MQTT 3.1.1 (every broker, amqtt too).  Raises MqttError if the broker cannot be
    reached and TimeoutError if the marker has not come back within ``give_up_s``."""
    tls = tls_context(settings, node) if broker.tls else None
    identifier = f"{settings.identifier(node)}-{suffix}"
    marker = f"{topic}/read/{identifier}"
    async with asyncio.timeout(give_up_s):
        async with aiomqtt.Client(broker.host, broker.port, identifier=identifier,
                                  username=settings.username, password=settings.password, tls_context=tls,
                                  protocol=aiomqtt.ProtocolVersion.V311, clean_session=True, keepalive=10,
                                  timeout=10) as client:
            await client.subscribe(topic, qos=1)
            await client.subscribe(marker, qos=1)
            await client.publish(marker, b"", qos=1)
            async for message in client.messages:
                if message.topic.matches(marker):
                    return None
                if message.retain and message.topic.matches(topic):
                    payload = message.payload
                    return payload if isinstance(payload, bytes) else str(payload or "").encode()
    return None


def _traceparent(properties) -> str | None:
    """The W3C ``traceparent`` user property of an MQTT 5 message (its ``properties``), if it has one."""
    for key, value in getattr(properties, "UserProperty", None) or ():
        if key == "traceparent":
            return value
    return None
