"""The link handshake and frame authentication between two nodes (docs/node.md, "Between nodes").

Pure, like :mod:`engine.wire`: messages in, messages out; the nonce comes from the caller.

**Handshake** (mutual, shared secret ``K``, fixed roles: the node whose name sorts first *dials*,
the other *accepts*)::

    dialer   → acceptor   Hello(dialer, Nd)
    acceptor → dialer     Hello(acceptor, Na)
    dialer   → acceptor   Proof(HMAC(K, "dialer"   ‖ T))      T = transcript(dialer, acceptor, Nd, Na)
    acceptor → dialer     Proof(HMAC(K, "acceptor" ‖ T))      only after the dialer's proof checked out

Each proof covers both names and both nonces in role order, so it is valid for one connection
only (replay needs the other side's fresh nonce), cannot be reflected (the roles differ and a node
accepts a dial only from a name that sorts before its own), and the acceptor proves nothing to
anyone who has not proved first — the reflection oracle (a node answering any Hello with a proof; docs/node.md)
is gone.

**Frames after the handshake** carry a 16-byte tag: ``GMAC(K_dir, nonce = seq, body)`` — AES-256-GCM
with the frame as associated data and nothing to encrypt — with a key per direction derived from
``K`` and ``T`` (HMAC-SHA256 as a PRF) and a frame counter per direction as the nonce, so a relay on
the path that forwards the handshake cannot slip in, replay, reorder or drop a frame without the
link closing.  A key lives for one connection and one direction and the counter never repeats in
it, which is what GMAC needs.  GMAC rather than HMAC-SHA256 because it is ten times cheaper on a
batch frame (2.7 against 28 µs for 17 kB here: AES-NI and carry-less multiply), and HMAC was ~15%
of a node's CPU per record (docs/node.md, "Frame tags").  (A MAC rather than TLS-PSK because
:mod:`ssl` offers PSK only from Python 3.13; the project supports 3.11.  ``[tls]`` still adds
confidentiality.)
"""

from __future__ import annotations

import enum
import hmac
import struct

import msgpack
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from replicast.engine.messages import Hello, Proof
from replicast.engine.wire import MAX_FRAME, FrameDecoder, WireError, decode, encode
from replicast.operators.validation import shorten  # untrusted strings go into logs only like this

NONCE_BYTES = 16
#: Longest node name (characters) a Hello may carry (cluster files are checked against it too).
MAX_NAME = 64
#: Largest frame accepted before a peer has authenticated (a Hello or a Proof is < 200 bytes).
MAX_HANDSHAKE_FRAME = 512
TAG_BYTES = 16
_LABEL = b"replicast-link-v3"          # v3: GMAC frame tags (v2 nodes fail the handshake, not a frame)
_HEADER = struct.Struct(">I")
_NONCE = struct.Struct(">4xQ")          # 96-bit GCM nonce: the frame counter


class Role(enum.Enum):
    DIALER = "dialer"
    ACCEPTOR = "acceptor"


class Stage(enum.Enum):
    AWAIT_HELLO = "await hello"
    AWAIT_PROOF = "await proof"
    DONE = "done"


def transcript(dialer: str, acceptor: str, dialer_nonce: bytes, acceptor_nonce: bytes) -> bytes:
    """Both names and both nonces in role order, unambiguously encoded (msgpack)."""
    return msgpack.packb([_LABEL, dialer, acceptor, dialer_nonce, acceptor_nonce], use_bin_type=True)


def _mac(secret: bytes, purpose: bytes, data: bytes) -> bytes:
    return hmac.digest(secret, purpose + b"\0" + data, "sha256")


class Handshake:
    """One side of the handshake.  Bytes in, bytes out: send :meth:`start`, then feed what the peer
    sends to :meth:`feed` and send what it returns, until :attr:`stage` is DONE; then
    :meth:`link` gives what the authenticated link needs.  (:meth:`receive` is the same one
    message at a time.)  Raises :class:`WireError` on anything wrong."""

    def __init__(self, secret: bytes, me: str, role: Role, nonce: bytes, *, peers: frozenset[str] | set[str],
                 expected: str | None = None):
        self.secret, self.me, self.role, self.nonce = secret, me, role, nonce
        self.peers, self.expected = peers, expected
        self.stage = Stage.AWAIT_HELLO
        self.peer: str | None = None
        self._transcript = b""
        self._decoder = FrameDecoder(MAX_HANDSHAKE_FRAME, single=True)   # small frames until DONE

    def start(self) -> bytes:
        """The first bytes of this side (the dialer speaks first)."""
        return encode(Hello(self.me, self.nonce)) if self.role is Role.DIALER else b""

    def feed(self, data: bytes) -> bytes:
        """Bytes from the peer in; the bytes to send back out."""
        if not data:
            raise WireError("connection closed during the handshake")
        out = []
        bodies = self._decoder.feed(data)          # one frame at a time (FrameDecoder.single)
        while bodies:
            out += [encode(message) for message in self.receive(decode(bodies[0]))]
            # What follows the last handshake frame is the link's: link() reads it at the full
            # frame limit (read here, at the handshake's, a peer's first large frame was refused).
            bodies = self._decoder.feed(b"") if self.stage is not Stage.DONE else []
        return b"".join(out)

    def link(self) -> tuple["FrameSealer", "FrameOpener", FrameDecoder, list[bytes]]:
        """After DONE: the sealer for frames to send, the opener for frames received, the decoder
        (now at the full frame limit) and the frames that already followed the handshake."""
        send, receive = self.keys()
        decoder = self._decoder
        decoder.max_frame, decoder.single = MAX_FRAME, False
        return FrameSealer(send), FrameOpener(receive), decoder, decoder.feed(b"")

    def receive(self, message) -> list:
        handler = _TRANSITIONS.get((self.role, self.stage, type(message)))
        if handler is None:
            raise WireError(f"unexpected {type(message).__name__} from {self.role.value}'s peer at stage "
                            f"{self.stage.value!r}")
        return handler(self, message)

    # -- transitions ----------------------------------------------------------------------------
    def _check_hello(self, hello: Hello) -> None:
        name = hello.node
        if len(name) > MAX_NAME or name not in self.peers or name == self.me:
            raise WireError(f"hello from unknown node {shorten(name)}")
        if self.expected is not None and name != self.expected:
            raise WireError(f"dialled {self.expected!r} but {shorten(name)} answered")
        if self.role is Role.ACCEPTOR and not name < self.me:
            raise WireError(f"node {name!r} dialled, but {self.me!r} dials it (the name that sorts first dials)")
        if len(hello.nonce) != NONCE_BYTES:
            raise WireError(f"hello nonce must be {NONCE_BYTES} bytes, got {len(hello.nonce)}")
        self.peer = name

    def _dialer_hello(self, hello: Hello) -> list:
        self._check_hello(hello)
        self._transcript = transcript(self.me, hello.node, self.nonce, hello.nonce)
        self.stage = Stage.AWAIT_PROOF
        return [Proof(_mac(self.secret, b"dialer", self._transcript))]

    def _acceptor_hello(self, hello: Hello) -> list:
        self._check_hello(hello)
        self._transcript = transcript(hello.node, self.me, hello.nonce, self.nonce)
        self.stage = Stage.AWAIT_PROOF
        return [Hello(self.me, self.nonce)]

    def _dialer_proof(self, answer: Proof) -> list:
        self._verify(answer, b"acceptor")
        return []

    def _acceptor_proof(self, answer: Proof) -> list:
        self._verify(answer, b"dialer")
        return [Proof(_mac(self.secret, b"acceptor", self._transcript))]

    def _verify(self, answer: Proof, purpose: bytes) -> None:
        if not hmac.compare_digest(_mac(self.secret, purpose, self._transcript), answer.mac):
            raise WireError(f"peer claiming to be {self.peer!r} failed the shared-secret challenge")
        self.stage = Stage.DONE

    # -- after the handshake --------------------------------------------------------------------
    def keys(self) -> tuple[bytes, bytes]:
        """(key for frames this side sends, key for frames it receives)."""
        if self.stage is not Stage.DONE:
            raise WireError("the handshake is not complete")
        d2a = _mac(self.secret, b"frames dialer to acceptor", self._transcript)
        a2d = _mac(self.secret, b"frames acceptor to dialer", self._transcript)
        return (d2a, a2d) if self.role is Role.DIALER else (a2d, d2a)


#: (role, stage, message type) -> transition; anything else is a protocol error.
_TRANSITIONS = {
    (Role.DIALER, Stage.AWAIT_HELLO, Hello): Handshake._dialer_hello,
    (Role.DIALER, Stage.AWAIT_PROOF, Proof): Handshake._dialer_proof,
    (Role.ACCEPTOR, Stage.AWAIT_HELLO, Hello): Handshake._acceptor_hello,
    (Role.ACCEPTOR, Stage.AWAIT_PROOF, Proof): Handshake._acceptor_proof,
}


class FrameSealer:
    """Tags the frames one side sends on an authenticated link (module docstring)."""

    def __init__(self, key: bytes):
        self._gmac, self._seq = AESGCM(key).encrypt, 0

    def seal(self, frame: bytes) -> list:
        """The pieces of the tagged frame for ``frame`` (a length-prefixed frame from ``encode``)."""
        body = memoryview(frame)[4:]
        tag = self._gmac(_NONCE.pack(self._seq), b"", body)
        self._seq += 1
        return [_HEADER.pack(len(body) + TAG_BYTES), body, tag]


class FrameOpener:
    """Checks and strips the tags of the frames one side receives, in order."""

    def __init__(self, key: bytes):
        self._check, self._seq = AESGCM(key).decrypt, 0

    def open(self, tagged: bytes) -> memoryview:
        """The frame's body without its tag (a view: :func:`engine.wire.decode` reads it as it is)."""
        if len(tagged) < TAG_BYTES:
            raise WireError("frame too short to carry its tag")
        view = memoryview(tagged)
        body = view[:-TAG_BYTES]
        try:
            self._check(_NONCE.pack(self._seq), view[-TAG_BYTES:], body)
        except InvalidTag:
            raise WireError(f"frame {self._seq} fails authentication (forged, replayed or reordered)") from None
        self._seq += 1
        return body
