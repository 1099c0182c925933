"""TCP source connections: the other way records enter an entry point (§II-B), besides MQTT.

A source connects to a node's ``source_port`` and sends newline-terminated lines
``STREAM PAYLOAD``, where ``PAYLOAD`` is exactly what it would publish on MQTT topic
``replicast/in/STREAM``: a JSON item or list of items (``{"ts": µs, field: value, …}`` or
``{"punctuation": p}``).  Every line goes to :meth:`engine.node.NodeCore.on_source`, so
validation, dead letters and counters are the same as for MQTT.  In source-stamped mode the source
connects to every node that hosts a replica of the stream's entry point and sends each of them the
same lines, as MQTT would deliver them to every subscriber.

A line may carry a W3C trace context as its items' ``"traceparent"`` field
(``{"ts": …, "traceparent": "00-<trace id>-<span id>-<flags>"}``), as an MQTT 5 message carries it
as a user property: the field is taken out of every item before the core sees the line, and the
first one goes with the line into the trace baggage (docs/tracing.md, "External traces").  A line
without the word ``"traceparent"`` is handed on untouched (one substring test).

The port is open to whoever can reach it, so what a source may cost the node is bounded
(``[source_connections]``, :class:`engine.source_protocol.SourceLimits`, docs/node.md):

* at most ``max_connections`` open at once (counting those still in their handshake): one more is
  closed at once;
* at most ``max_line_bytes`` of an unfinished line held per connection; a longer line is refused and
  the connection resynchronises at the next newline (:class:`engine.source_protocol.LineFramer`);
  lines are handed to the core as they complete, so nothing else queues up in the node;
* a connection silent for ``idle_timeout_s`` is closed;
* with ``auth = "secret"`` the source answers a challenge with the cluster secret, with
  ``auth = "tls"`` it shows a client certificate signed by the cluster CA, within
  :data:`HANDSHAKE_TIMEOUT`; before that, nothing it sends reaches the core.

Every refusal is counted in ``replicast_source_refused_total{reason}`` and logged with the peer's
address (once per cause and connection, and at most :data:`REFUSAL_LOG_BURST` lines a minute).  A
refusal closes or skips only what it concerns: accepted lines stay accepted, other sources go on.
Apart from the challenge line, the node never writes to a source.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from typing import Callable

from replicast.engine.aio.logs import LogBudget
from replicast.engine.aio.metrics import NodeMetrics
from replicast.engine.handshake import shorten
from replicast.engine.source_protocol import (MAX_ANSWER_BYTES, NONCE_BYTES, Auth, LineFramer, Phase, Refusal,
                                              SourceLimits, Step, advance, challenge, check_answer, first_phase)

log = logging.getLogger("replicast.node")

#: Seconds a source has to finish its TLS handshake or answer the challenge.
HANDSHAKE_TIMEOUT = 5.0
#: Refusal lines logged per minute; the rest are counted and summed up in one line.
REFUSAL_LOG_BURST = 20


def split_line(line: bytes) -> tuple[str, bytes]:
    """``b"cpu {...}"`` → ``("cpu", b"{...}")``; a line without a space names no stream."""
    stream, _, payload = line.strip().partition(b" ")
    return stream.decode("utf-8", errors="replace"), payload


#: A line holding this may carry a trace context (tested before any JSON is parsed).
_TRACEPARENT = b'"traceparent"'


def trace_field(payload: bytes) -> tuple[bytes, str | None]:
    """``payload`` less its items' ``traceparent`` fields, and the first of them (None: none, or a
    payload that is not JSON, handed on as it is for the core to dead-letter)."""
    if _TRACEPARENT not in payload:
        return payload, None
    try:
        body = json.loads(payload)
    except ValueError:
        return payload, None
    found = None
    for item in body if isinstance(body, list) else [body]:
        if isinstance(item, dict) and "traceparent" in item:
            value = item.pop("traceparent")
            if found is None and isinstance(value, str):
                found = value
    return json.dumps(body).encode(), found


class SourceServer:
    """A node's ``source_port``: accepts source connections within ``limits`` and hands each line
    to ``feed(stream, payload, traceparent)``."""

    def __init__(self, limits: SourceLimits, feed: Callable[[str, bytes, str | None], None], metrics: NodeMetrics, *,
                 secret: bytes, tls: ssl.SSLContext | None = None):
        if limits.auth is Auth.TLS and tls is None:
            raise ValueError("auth = \"tls\" needs the cluster's [tls] files")
        self.limits, self.feed, self.metrics, self.secret, self.tls = limits, feed, metrics, secret, tls
        self.open: set[SourceConnection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self._log = LogBudget(log, "refused sources", "source_refused", REFUSAL_LOG_BURST)
        for reason in Refusal:                       # every reason shows, at 0, from the start
            metrics.source_refused.labels(reason.value)

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: SourceConnection(self), host, port, reuse_address=True,
                                                backlog=max(100, self.limits.max_connections))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.open):
            connection.close()
        for task in list(self._tasks):
            task.cancel()

    def refuse(self, connection: "SourceConnection", reason: Refusal, detail: str, count: int = 1) -> None:
        """Count ``count`` refusals of ``reason``; log the first of each reason on a connection."""
        self.metrics.source_refused.labels(reason.value).inc(count)
        if reason in connection.logged:
            return
        connection.logged.add(reason)
        if self._log.allow(int(time.monotonic() // 60)):
            log.warning("refused source %s: %s", connection.peer, detail,
                        extra={"event": "source_refused", "reason": reason.value, "address": str(connection.peer)})

    def supervise(self, coroutine, what: str) -> None:
        """Run a connection's TLS handshake; an unexpected failure is counted and logged, never lost."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                error = task.exception()
                self.metrics.task_failures.labels(what).inc()
                log.error("%s failed: %s: %s", what, type(error).__name__, shorten(str(error), 200),
                          extra={"event": "task_failed", "task": what})
        task.add_done_callback(done)

    def opened(self, connection: "SourceConnection") -> None:
        self.open.add(connection)
        self.metrics.source_connections.set(len(self.open))

    def closed(self, connection: "SourceConnection") -> None:
        self.open.discard(connection)
        self.metrics.source_connections.set(len(self.open))


class SourceConnection(asyncio.Protocol):
    """One source connection: its phase (:data:`engine.source_protocol.TRANSITIONS`), its line
    framer, and one timer for both the handshake deadline and the idle time-out."""

    def __init__(self, server: SourceServer):
        self.server, self.limits = server, server.limits
        self.phase = Phase.CLOSED
        self.framer = LineFramer(self.limits.max_line_bytes)
        self.logged: set[Refusal] = set()
        self.peer = None
        self.lines = 0
        self.transport: asyncio.BaseTransport | None = None
        self._answer = bytearray()
        self._nonce = b""
        self._timer: asyncio.TimerHandle | None = None
        self._opened_at = self._active_at = 0.0

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport, self.peer = transport, transport.get_extra_info("peername")
        server = self.server
        if len(server.open) >= self.limits.max_connections:
            server.refuse(self, Refusal.TOO_MANY_CONNECTIONS,
                          f"{self.limits.max_connections} source connections are already open")
            transport.abort()
            return
        server.opened(self)
        self.phase = first_phase(self.limits.auth)
        loop = asyncio.get_running_loop()
        self._opened_at = self._active_at = loop.time()
        log.info("source connected from %s", self.peer, extra={"event": "source_up"})
        if self.phase is Phase.CHALLENGED:
            self._nonce = os.urandom(NONCE_BYTES)
            transport.write(challenge(self._nonce))
        elif self.phase is Phase.TLS_HANDSHAKE:
            transport.pause_reading()                # no plain byte may reach this protocol
            server.supervise(self._start_tls(transport), "source TLS handshake")
        self._arm(loop, HANDSHAKE_TIMEOUT if self.phase is not Phase.OPEN else self.limits.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self.phase is Phase.CLOSED:
            return
        self._active_at = asyncio.get_running_loop().time()
        if self.phase is Phase.TLS_HANDSHAKE:
            # Only the TLS layer can call this now (reading was paused until start_tls took over),
            # and it does so once the handshake is done, maybe before _start_tls resumes.
            self.phase = advance(self.phase, Step.TLS_DONE)
        if self.phase is Phase.CHALLENGED:
            data = self._read_answer(data)
            if self.phase is not Phase.OPEN:
                return
        overlong = self.framer.overlong
        for line in self.framer.feed(data):
            self._line(line)
        if self.framer.overlong > overlong:
            self.server.refuse(self, Refusal.LINE_TOO_LONG, f"a line over {self.limits.max_line_bytes} bytes "
                               f"(skipped to the next newline)", self.framer.overlong - overlong)

    def eof_received(self) -> bool:
        if self.phase is Phase.OPEN:
            line = self.framer.finish()                  # the last line may lack its newline
            if line is not None:
                self._line(line)
        return False                                     # let the transport close

    def connection_lost(self, exc) -> None:
        if self.phase is not Phase.CLOSED and self.transport is not None:
            log.info("source %s closed after %d line(s)", self.peer, self.lines, extra={"event": "source_down"})
        self._finish()

    # -- phases ---------------------------------------------------------------------------------
    def close(self) -> None:
        if self.phase is not Phase.CLOSED:
            log.info("source %s closed after %d line(s)", self.peer, self.lines, extra={"event": "source_down"})
        self._finish()
        if self.transport is not None:
            self.transport.close()

    def _fail(self, reason: Refusal, detail: str) -> None:
        if self.phase is not Phase.CLOSED:
            self.server.refuse(self, reason, detail)
            self.close()

    def _finish(self) -> None:
        self.phase = advance(self.phase, Step.CLOSE)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.framer = LineFramer(self.limits.max_line_bytes)   # nothing held after the end
        self.server.closed(self)

    def _read_answer(self, data: bytes) -> bytes:
        """The answer to the challenge out of ``data``; returns what follows it (the first lines)."""
        end = data.find(b"\n")
        if end < 0:
            self._answer += data
            if len(self._answer) > MAX_ANSWER_BYTES:
                self._fail(Refusal.AUTH_FAILED, "no answer to the challenge (the first line is too long)")
            return b""
        line, self._answer = bytes(self._answer) + data[:end], bytearray()
        if len(line) > MAX_ANSWER_BYTES or not check_answer(self.server.secret, self._nonce, line):
            self._fail(Refusal.AUTH_FAILED, f"wrong answer to the challenge: {shorten(line[:80], 100)}")
            return b""
        self.phase = advance(self.phase, Step.ANSWERED)
        log.info("source %s answered the challenge", self.peer, extra={"event": "source_authenticated"})
        return data[end + 1:]

    async def _start_tls(self, transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            secured = await loop.start_tls(transport, self, self.server.tls, server_side=True,
                                           ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        except (ssl.SSLError, OSError, asyncio.TimeoutError, ConnectionError) as error:
            detail = f"TLS: {error}" if str(error) else f"TLS: {type(error).__name__}"
            self._fail(Refusal.TLS_FAILED, detail)
            transport.abort()
            return
        if self.phase is Phase.CLOSED:            # timed out meanwhile
            secured.close()
            return
        self.transport = secured
        if self.phase is Phase.TLS_HANDSHAKE:
            self.phase = advance(self.phase, Step.TLS_DONE)
        subject = dict(pair for rdn in (secured.get_extra_info("peercert") or {}).get("subject", ()) for pair in rdn)
        log.info("source %s presented a certificate for %s", self.peer, shorten(subject.get("commonName")),
                 extra={"event": "source_authenticated"})

    # -- lines and time -------------------------------------------------------------------------
    def _line(self, line: bytes) -> None:
        if line.strip():
            stream, payload = split_line(line)
            self.server.feed(stream, *trace_field(payload))
            self.lines += 1

    def _arm(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self._timer = loop.call_later(max(0.0, delay), self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self.phase is Phase.CLOSED:
            return
        now = loop.time()
        if self.phase is Phase.OPEN:
            deadline = self._active_at + self.limits.idle_timeout_s
            if now >= deadline:
                self._fail(Refusal.IDLE, f"nothing received for {self.limits.idle_timeout_s:g} s")
                return
        else:
            deadline = self._opened_at + HANDSHAKE_TIMEOUT
            if now >= deadline:
                reason = Refusal.AUTH_TIMEOUT if self.phase is Phase.CHALLENGED else Refusal.TLS_FAILED
                what = "answer to the challenge" if self.phase is Phase.CHALLENGED else "TLS handshake"
                self._fail(reason, f"no {what} within {HANDSHAKE_TIMEOUT:g} s")
                return
            # once the handshake is done, the idle time-out takes over from the same timer
        self._arm(loop, deadline - now)
