"""One TCP connection to an MQTT broker on paho-mqtt's public external-event-loop API (the
``on_socket_*`` callbacks, ``loop_read`` / ``loop_write`` / ``loop_misc``), shared by the node's
broker sessions (:mod:`engine.aio.mqtt_session`) and the consumer (:mod:`replicast.consume`).

Why paho and not aiomqtt (2.5): aiomqtt acknowledges a QoS-1 message on receipt with no public way
to defer it, and drops paho's DUP flag and the CONNACK's session-present flag with no public way to
read them.  The consumer needs the first (it acknowledges a message only once its saved position
covers it: otherwise a SIGKILLed consumer loses what it had received and not handed out,
docs/consume.md); the node's input needs the other two (a QoS-1 redelivery is recognised by its
DUP flag, :mod:`engine.aio.mqtt_input`; a session the broker forgot is counted, docs/node.md).
paho exposes all three publicly (``manual_ack``, ``MQTTMessage.dup``, ``ConnectFlags.session_present``).

Rules of this module:

1. A :class:`Delivery` names the TCP connection (:class:`Link`) it came on; it is acknowledged
   only on that connection while it is open.  Acknowledging on a later connection could hit a
   packet id the broker has since reused; a message of a lost connection is sent again anyway.
   A link made with ``manual_ack=False`` (the node's) is acknowledged by paho on receipt.
2. Flow control keeps the consumer's memory bounded while it drains a backlog: the consumer calls
   :meth:`Link.pause` (stop reading the socket: TCP holds the rest back) while its queue is full.
   MQTT 5's Receive Maximum is asked for too, but is not relied on: 3.1.1 has none, and mosquitto
   2.0.11 exceeds it on a resumed session once PUBACKs flow (docs/consume.md).
3. Everything runs on the event loop's thread but ``connect()``, which blocks on the TCP
   connection (and the TLS handshake) and runs in an executor thread: the socket callbacks it
   triggers hop to the loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Callable
import ssl
from typing import Any, NamedTuple

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from replicast.engine.mqtt_config import BrokerAddress

log = logging.getLogger("replicast.mqtt")

SESSION_EXPIRY_S = 3600
#: MQTT 5 Receive Maximum: unacknowledged messages the broker may send this session at once.
RECEIVE_MAXIMUM = 64
KEEPALIVE_S = 10
#: Seconds a CONNECT waits for its CONNACK on the consumer's own session.
CONNACK_TIMEOUT_S = 10


class Protocol(enum.Enum):
    """The MQTT version a session speaks (paho's constants)."""

    V5 = mqtt.MQTTv5
    V311 = mqtt.MQTTv311


class LinkState(enum.Enum):
    """One TCP connection's life."""

    CONNECTING = "connecting"      # CONNECT sent, no CONNACK yet
    OPEN = "open"                  # CONNACK accepted: messages flow, acknowledgements go out
    CLOSED = "closed"              # lost or closed; a new Link replaces it


#: (state, event) -> next state.  A closed link stays closed whatever comes after.
TRANSITIONS = {
    (LinkState.CONNECTING, "connack"): LinkState.OPEN,
    (LinkState.CONNECTING, "closed"): LinkState.CLOSED,
    (LinkState.OPEN, "connack"): LinkState.OPEN,        # paho may report one CONNACK twice
    (LinkState.OPEN, "closed"): LinkState.CLOSED,
    (LinkState.CLOSED, "connack"): LinkState.CLOSED,
    (LinkState.CLOSED, "closed"): LinkState.CLOSED,
}


class LinkError(Exception):
    """A connection to a broker that could not be opened or was lost (the caller reconnects)."""


class ConnectRefused(LinkError):
    """The broker answered CONNECT with a failure reason code (``code``: its number)."""

    def __init__(self, code: int, reason: str):
        super().__init__(f"CONNECT refused: {reason} ({code})")
        self.code = code


class NoConnack(LinkError):
    """No CONNACK came within the time given to :meth:`Link.open`."""


class Delivery(NamedTuple):
    """A message received and not yet acknowledged."""

    payload: bytes
    link: "Link"
    mid: int
    qos: int
    topic: str = ""
    #: The broker set DUP: it may have sent this message before (MQTT 3.1.1 §3.3.1.1).
    dup: bool = False
    #: MQTT 5 properties of the PUBLISH (paho's ``Properties``), or None.
    properties: Any = None


class Link:
    """One TCP connection of a session: a paho client in manual-acknowledgement mode, its socket
    watched by the event loop.  ``deliver`` gets every message; ``on_subscribed`` the SUBACK (its
    reason codes are in :attr:`granted`); ``on_published(mid)`` each PUBACK of :meth:`publish`.

    The node's sessions pass ``manual_ack=False``, their credentials and TLS context,
    ``session_expiry_s`` and ``receive_maximum=None`` (no Receive Maximum), and
    ``bare_clean_start=True``: an MQTT 5 clean start then carries no properties (a 3.1.1-only
    broker such as amqtt refuses that CONNECT by its version, where one with properties leaves it
    waiting for bytes).  :attr:`session_present` is the CONNACK's flag."""

    def __init__(self, broker: BrokerAddress, identifier: str, protocol: Protocol, *, clean: bool,
                 deliver: Callable[[Delivery], None], on_subscribed: Callable[[], None] = lambda: None,
                 on_published: Callable[[int], None] = lambda mid: None,
                 receive_maximum: int | None = RECEIVE_MAXIMUM, manual_ack: bool = True,
                 session_expiry_s: int = SESSION_EXPIRY_S, bare_clean_start: bool = False,
                 username: str | None = None, password: str | None = None,
                 tls_context: ssl.SSLContext | None = None):
        self.broker, self.protocol, self.clean = broker, protocol, clean
        self.receive_maximum = receive_maximum
        self.session_expiry_s, self.bare_clean_start = session_expiry_s, bare_clean_start
        #: The CONNACK's session-present flag: the broker resumed a session it kept for this client id.
        self.session_present = False
        #: The reason codes of the last SUBACK (numbers: 0-2 granted QoS, 128 and above refused).
        self.granted: list[int] = []
        #: Why the connection closed (paho's reason), once it has.
        self.close_reason = ""
        self.state = LinkState.CONNECTING
        self._deliver, self._on_subscribed, self._on_published = deliver, on_subscribed, on_published
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.connack: asyncio.Future[None] = self._loop.create_future()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self._fd: int | None = None
        self._reading = True
        self._writing_now = False          # in ack(): the write is done there, not by the loop's writer
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=identifier, protocol=protocol.value,
                             clean_session=None if protocol is Protocol.V5 else clean,
                             manual_ack=manual_ack, reconnect_on_failure=False)
        if username is not None:
            client.username_pw_set(username, password)
        if tls_context is not None:
            client.tls_set_context(tls_context)
        client.on_connect, client.on_disconnect = self._on_connect, self._on_disconnect
        client.on_message, client.on_subscribe = self._on_message, self._on_subscribe
        client.on_publish = self._on_publish
        client.on_socket_open, client.on_socket_close = self._on_socket_open, self._on_socket_close
        client.on_socket_register_write = self._on_register_write
        client.on_socket_unregister_write = self._on_unregister_write
        self.client = client

    def _move(self, event: str) -> None:
        self.state = TRANSITIONS[self.state, event]

    async def open(self, timeout: float) -> None:
        """Connect and wait (at most ``timeout`` s) for the CONNACK; raises ``OSError``,
        :class:`ConnectRefused` or :class:`NoConnack`."""
        options = {}                             # 3.1.1: clean_session, given to the client
        if self.protocol is Protocol.V5:
            properties = None
            if not (self.clean and self.bare_clean_start):
                properties = Properties(PacketTypes.CONNECT)
                properties.SessionExpiryInterval = 0 if self.clean else self.session_expiry_s
                if self.receive_maximum is not None:
                    properties.ReceiveMaximum = self.receive_maximum
            options = {"clean_start": self.clean, "properties": properties}
        await self._loop.run_in_executor(None, lambda: self.client.connect(
            self.broker.host, self.broker.port, KEEPALIVE_S, **options))
        try:
            await asyncio.wait_for(asyncio.shield(self.connack), timeout)
        except TimeoutError:
            self.close()
            raise NoConnack(f"no CONNACK within {timeout} s") from None
        except BaseException:
            self.close()
            raise

    async def run(self) -> None:
        """Keep the connection alive (pings) until it closes."""
        while self.client.loop_misc() == mqtt.MQTT_ERR_SUCCESS and not self.closed.done():
            await asyncio.wait([self.closed], timeout=1)
        self.close()

    def subscribe(self, topic: str) -> None:
        self.client.subscribe(topic, qos=1)

    def publish(self, topic: str, payload: bytes, *, properties: Properties | None = None,
                retain: bool = False) -> int:
        """Send ``payload`` at QoS 1; returns its packet id, which ``on_published`` gets with the
        PUBACK.  Raises :class:`LinkError` if paho cannot queue it (the link is closed)."""
        info = self.client.publish(topic, payload, qos=1, retain=retain, properties=properties)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise LinkError(f"publish to {topic}: {mqtt.error_string(info.rc)}")
        return info.mid

    def ack(self, delivery: Delivery) -> None:
        """PUBACK ``delivery`` if it came on this link and the link is open (rule 1)."""
        if delivery.link is self and self.state is LinkState.OPEN and delivery.qos > 0:
            # written now, not when the loop next runs the writer: a consumer working through its
            # queue does not yield to the loop, and the broker sends more only as acknowledgements
            # come.  The loop's writer is watched only if this write leaves bytes behind: paho
            # asks to watch it and stops again at once otherwise (two selector calls per message).
            self._writing_now = True
            try:
                self.client.ack(delivery.mid, delivery.qos)
                self._guard(self.client.loop_write)
            finally:
                self._writing_now = False
            if self.client.want_write() and self._fd is not None:
                self._loop.add_writer(self._fd, self._writable)

    def pause(self) -> None:
        """Stop reading the socket (rule 2); the broker's further messages wait in TCP."""
        if self._reading and self._fd is not None:
            self._loop.remove_reader(self._fd)
        self._reading = False

    def resume(self) -> None:
        if not self._reading and self._fd is not None and self.state is not LinkState.CLOSED:
            self._loop.add_reader(self._fd, self._readable)
        self._reading = True

    def close(self) -> None:
        """Send DISCONNECT if open (the session stays on the broker), then drop the socket."""
        if self.state is LinkState.OPEN:
            self._move("closed")
            self.client.disconnect()
            self._guard(self.client.loop_write)  # best effort: paho closes the socket once it is sent
        self._move("closed")
        sock = self.client.socket()              # still open: not sent, or no CONNACK yet
        self._forget_socket()
        if sock is not None:
            sock.close()
        if not self.closed.done():
            self.closed.set_result(None)

    # -- paho callbacks -----------------------------------------------------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            if not self.connack.done():
                self.connack.set_exception(ConnectRefused(reason_code.value, str(reason_code)))
            return
        self._move("connack")
        self.session_present = bool(flags.session_present)
        if not self.connack.done():
            self.connack.set_result(None)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._move("closed")
        self.close_reason = str(reason_code)
        if not self.connack.done():
            self.connack.set_exception(ConnectionError(f"connection closed before CONNACK ({reason_code})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _on_message(self, client, userdata, message: mqtt.MQTTMessage) -> None:
        self._deliver(Delivery(message.payload, self, message.mid, message.qos, message.topic, bool(message.dup),
                               getattr(message, "properties", None)))

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        self.granted = [code.value for code in reason_codes]
        self._on_subscribed()

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        self._on_published(mid)

    def _on_socket_open(self, client, userdata, sock) -> None:
        self._in_loop(self._watch, sock.fileno())

    def _on_socket_close(self, client, userdata, sock) -> None:
        self._in_loop(self._forget_socket)

    def _on_register_write(self, client, userdata, sock) -> None:
        if not self._writing_now:
            self._in_loop(self._add_writer, sock.fileno())

    def _on_unregister_write(self, client, userdata, sock) -> None:
        if not self._writing_now:
            self._in_loop(self._remove_writer)

    # -- the event loop's side ------------------------------------------------------------------

    def _in_loop(self, function, *args) -> None:
        """Call ``function`` on the loop's thread (rule 3)."""
        if threading.get_ident() == self._loop_thread:
            function(*args)
        else:
            self._loop.call_soon_threadsafe(function, *args)

    def _watch(self, fd: int) -> None:
        if self.state is LinkState.CLOSED:
            return
        self._fd = fd
        if self._reading:
            self._loop.add_reader(fd, self._readable)

    def _forget_socket(self) -> None:
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
            self._loop.remove_writer(self._fd)
            self._fd = None

    def _add_writer(self, fd: int) -> None:
        if self._fd == fd:
            self._loop.add_writer(fd, self._writable)

    def _remove_writer(self) -> None:
        if self._fd is not None:
            self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        self._guard(self.client.loop_read)

    def _writable(self) -> None:
        self._guard(self.client.loop_write)

    def _guard(self, step) -> None:
        """A read or write that raises (a broken pipe, a protocol error) closes the link."""
        try:
            step()
        except Exception as error:        # noqa: BLE001 -- any failure of the socket ends this link
            log.warning("broker %s: %s", self.broker.url, error)
            self.close()
