"""The node's TCP links to its peers (DESIGN.md §4, §6): dial, accept, authenticate, frame.

Rules of this module:

1. One TCP connection per node pair: the node whose name sorts first dials, the other accepts; the
   dialer retries with exponential back-off (:class:`~engine.aio.supervise.Backoff`).
2. Both ends run the mutual shared-secret handshake of :mod:`engine.handshake` (frames of at most
   512 bytes, at most :data:`MAX_UNAUTHENTICATED` such connections at once); a peer that fails it
   is logged (bounded) and counted, and disconnected before any frame reaches the core.  Optional
   TLS (mutually authenticated, one cluster CA) wraps the same bytes and fails the same way.
3. Every later frame carries a tag checked before it is decoded (:mod:`engine.wire`); a frame that
   does not decode closes the link (the core replays from the last acknowledged offset when it
   comes back).  Bad input from a peer is refused here, never raised into the core.
4. The module knows nothing of the core: it reports ``on_up(peer)``, ``on_message(peer, message)``,
   ``on_read()`` (after each read: flush the core's outputs) and ``on_down(peer)`` to its owner.
   A :class:`~engine.node.CoreFailed` raised by those ends the link quietly: the driver logged it
   and is stopping (engine/node.py rule 2).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from typing import Callable

from replicast.engine.aio.logs import LogBudget
from replicast.engine.aio.supervise import Backoff
from replicast.engine.cluster_config import ClusterConfig
from replicast.engine.handshake import NONCE_BYTES, FrameSealer, Handshake, Role, Stage, shorten
from replicast.engine.messages import Hello, Proof
from replicast.engine.node import CoreFailed
from replicast.engine.wire import WireError, decode

log = logging.getLogger("replicast.node")

HANDSHAKE_TIMEOUT = 5.0
#: Connections accepted but not yet authenticated; more are refused at once.  Each may hold its
#: stream reader's buffer (128 KiB at most) and one frame of at most 512 bytes, for at most
#: HANDSHAKE_TIMEOUT: strangers can make a node hold at most ~4 MiB.
MAX_UNAUTHENTICATED = 32
#: Refusals logged per minute; the rest are counted and summed up in one line.
REFUSAL_LOG_BURST = 20
#: A peer whose unsent bytes exceed this is disconnected; it is replayed from its acks on return.
MAX_WRITE_BUFFER = 64 * 1024 * 1024


class PeerLinks:
    """The authenticated links of node ``name`` (module docstring)."""

    def __init__(self, config: ClusterConfig, name: str, metrics, *, on_up: Callable[[str], None],
                 on_message: Callable[[str, object], None], on_read: Callable[[], None],
                 on_down: Callable[[str], None]):
        self.config, self.name, self.metrics = config, name, metrics
        self._on_up, self._on_message, self._on_read, self._on_down = on_up, on_message, on_read, on_down
        #: peer -> the writer of its authenticated link, and the sealer that tags its frames.
        self.writers: dict[str, asyncio.StreamWriter] = {}
        self.sealers: dict[str, FrameSealer] = {}
        self.refused = 0
        self._peers = frozenset(config.nodes)
        self._unauthenticated = 0
        self._refusal_log = LogBudget(log, "refused connections", "refused", REFUSAL_LOG_BURST)
        #: TLS contexts (client, server), indexed by "is this the accepting side", or None.
        self.tls = (self._ssl_context(server=False), self._ssl_context(server=True)) if config.tls else None

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

    # -- sending ----------------------------------------------------------------------------------
    def send(self, peer: str, frames: list[bytes]) -> None:
        """Seal and write ``frames`` to ``peer``; nothing if it has no link (the core replays on
        :meth:`on_up`); a peer that does not read is disconnected (rule 3)."""
        writer = self.writers.get(peer)
        if writer is None:
            return
        if writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            self.metrics.links_dropped.labels(peer, "slow_peer").inc()
            log.warning("peer %s is not reading; dropping the link", peer, extra={"event": "slow_peer"})
            writer.close()
            return
        seal = self.sealers[peer].seal
        writer.write(b"".join([piece for frame in frames for piece in seal(frame)]))

    def drop(self, peer: str) -> None:
        """Close the link to ``peer`` (a core's verdict: silent or misbehaving); the dialer dials again."""
        writer = self.writers.get(peer)
        if writer is not None:
            writer.close()

    def close_all(self) -> None:
        for writer in list(self.writers.values()):
            writer.close()

    # -- dialling and accepting ---------------------------------------------------------------------
    async def dial(self, peer: str) -> None:
        """Keep a link to ``peer`` (rule 1); runs until cancelled."""
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

    def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """The callback of the node's TCP server."""
        # Called inside connection_made, before any byte is read: with TLS, stop reading until
        # start_tls takes the transport over, or the ClientHello would land in the plain reader.
        if self.tls is not None:
            writer.transport.pause_reading()
        return self._accepted(reader, writer)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._unauthenticated >= MAX_UNAUTHENTICATED:
            self.refuse(writer.get_extra_info("peername"),
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

    async def _authenticate(self, reader, writer, expected: str | None) -> Handshake | None:
        """TLS (if configured) and the handshake; None (refused, counted, closed) if either fails."""
        address = writer.get_extra_info("peername")
        stage = "handshake"
        try:
            if self.tls is not None:
                # TLS first (the dialer is the TLS client); its failures are refusals like a bad proof.
                stage = "TLS handshake"
                await asyncio.wait_for(writer.start_tls(self.tls[expected is None]), HANDSHAKE_TIMEOUT)
                stage = "handshake"
            return await asyncio.wait_for(self._handshake(reader, writer, expected), HANDSHAKE_TIMEOUT)
        except (WireError, asyncio.TimeoutError, OSError) as error:
            if isinstance(error, asyncio.TimeoutError):
                error = f"no {stage} within {HANDSHAKE_TIMEOUT:.0f} s"
            elif isinstance(error, ssl.SSLError):
                error = f"TLS: {error}"
            elif not str(error):
                error = type(error).__name__
            self.refuse(address, str(error))
            writer.close()
            return None
        finally:
            if expected is None:
                self._unauthenticated -= 1

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, expected: str | None) -> None:
        shake = await self._authenticate(reader, writer, expected)
        if shake is None:
            return
        peer = shake.peer
        sealer, opener, decoder, early = shake.link()
        try:
            old = self.writers.pop(peer, None)
            if old is not None:
                old.close()
                self._on_down(peer)
            self.writers[peer] = writer
            self.sealers[peer] = sealer
            self.metrics.peer_connected.labels(peer).set(1)
            log.info("link to %s up", peer, extra={"event": "link_up", "peer": peer})
            self._on_up(peer)
            for body in early:
                self._receive(peer, decode(opener.open(body)))
            self._on_read()
            while data := await reader.read(262144):
                for body in decoder.feed(data):
                    self._receive(peer, decode(opener.open(body)))
                self._on_read()
        except WireError as error:
            self.metrics.links_dropped.labels(peer, "bad_frame").inc()
            log.warning("closing link to %s: %s", peer, shorten(str(error), 200),
                        extra={"event": "bad_frame", "peer": peer})
        except (OSError, CoreFailed):
            pass                    # a broken connection; or the core failed: logged, the node is stopping
        finally:
            writer.close()
            if self.writers.get(peer) is writer:
                del self.writers[peer]
                del self.sealers[peer]
                self.metrics.peer_connected.labels(peer).set(0)
                log.info("link to %s down", peer, extra={"event": "link_down", "peer": peer})
                try:
                    self._on_down(peer)
                    self._on_read()
                except CoreFailed:
                    pass

    def _receive(self, peer: str, message) -> None:
        if isinstance(message, (Hello, Proof)):
            raise WireError("handshake frame after the handshake")
        self._on_message(peer, message)

    def refuse(self, address, reason: str) -> None:
        """Count a refused connection; log it, at most ``REFUSAL_LOG_BURST`` lines per minute."""
        self.refused += 1
        self.metrics.refused.set(self.refused)
        if self._refusal_log.allow(int(time.monotonic() // 60)):
            log.warning("refused connection from %s: %s", address, shorten(reason, 200),
                        extra={"event": "refused", "address": str(address)})
