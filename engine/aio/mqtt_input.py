"""MQTT input without second occurrences from QoS-1 redelivery (docs/node.md, "QoS-1 redelivery"; §IV-B).

QoS 1 is at-least-once: when the connection breaks after the broker sent a PUBLISH but before it
got our PUBACK, it sends the message again after we reconnect (same session), with the same packet
identifier and the DUP flag set (MQTT 3.1.1 §4.4, §3.3.1.1).  The entry point cannot tell a
redelivery from a second, identical event, and the duplicate filter counts occurrences per stream
replica (§IV-B), so a redelivery would be delivered twice.

:class:`RedeliveryFilter` drops a message when the broker says it may be a redelivery (DUP set)
*and* one of the last :data:`REMEMBERED` messages had the same packet identifier, topic and
payload.  Limits, also in docs/node.md: a redelivery after more than ``REMEMBERED`` later messages
passes (brokers resend in-flight messages first after a reconnect, so it cannot happen with
mosquitto's default 20 in flight); a message this node handled before it restarted is not
remembered (a restart starts a clean session, so the broker does not redeliver to it anyway); a
message that reached us with DUP set without ever having been handled (its first copy was lost) is
taken, as it must be.

aiomqtt (2.5) drops paho's DUP flag and the CONNACK's session-present flag, and has no public API
for either (its public surface is the client's calls, ``messages`` and the message's topic,
payload, qos, retain, mid and properties).  :class:`DupAwareClient` therefore wraps two of its
callback hooks, and only wraps them: each calls aiomqtt's own hook, which queues the message for
the public ``messages`` iterator as before; the wrapper only notes, beside it, the DUP flag by
packet identifier (:meth:`DupAwareClient.was_dup`, read when the message comes out of the iterator)
and the session-present flag.  ``tests/engine/test_mqtt_input.py`` checks that contract against the
installed aiomqtt, so an upgrade that changes the hooks fails there, not in production.
A redelivery filter belongs to one broker session (packet identifiers are per session).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque

import aiomqtt

#: How many recent messages (packet id, digest) are remembered.
REMEMBERED = 4096


class DupAwareClient(aiomqtt.Client):
    """An aiomqtt client that notes the DUP flag of each PUBLISH it receives (by packet identifier,
    for :meth:`was_dup`) and the CONNACK's ``session_present`` flag (engine.aio.mqtt_session needs it
    to count sessions a broker forgot); messages still come through the public ``messages``."""

    session_present = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: Per packet identifier, the DUP flags of the messages queued for ``messages`` and not yet
        #: read, in arrival order: a broker may reuse an identifier once we acknowledged it (paho
        #: acknowledges when the hook returns, before the message is read), and the queue is FIFO
        #: and unbounded (aiomqtt's default), so the first flag queued is the next message's.
        self._dups: dict[int, deque[bool]] = {}

    def was_dup(self, message: aiomqtt.Message) -> bool:
        """Whether the broker sent ``message`` (the next one from ``messages`` with its packet
        identifier) with DUP set: then it may be a redelivery."""
        flags = self._dups.get(message.mid)
        if not flags:
            return False
        dup = flags.popleft()
        if not flags:
            del self._dups[message.mid]
        return dup

    def _on_connect(self, client, userdata, flags, reason_code, properties=None) -> None:   # aiomqtt's hook
        self.session_present = bool(getattr(flags, "session_present", False))
        super()._on_connect(client, userdata, flags, reason_code, properties)

    def _on_message(self, client, userdata, message) -> None:   # aiomqtt's hook for paho's on_message
        self._dups.setdefault(message.mid, deque()).append(bool(message.dup))
        super()._on_message(client, userdata, message)


class RedeliveryFilter:
    """Recognises QoS-1 redeliveries of messages already handled (module docstring)."""

    def __init__(self, capacity: int = REMEMBERED):
        self._seen: OrderedDict[int, bytes] = OrderedDict()
        self._capacity = capacity
        self.redeliveries = 0

    def is_redelivery(self, mid: int, dup: bool, topic: str, payload: bytes) -> bool:
        """Whether to drop this message; otherwise it is remembered as handled."""
        digest = hashlib.blake2b(topic.encode() + b"\0" + payload, digest_size=16).digest()
        if dup and mid and self._seen.get(mid) == digest:
            self.redeliveries += 1
            return True
        self._seen[mid] = digest
        self._seen.move_to_end(mid)
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return False
