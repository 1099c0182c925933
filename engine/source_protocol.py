"""What a node's ``source_port`` accepts (docs/node.md, "TCP sources"): limits, line framing and
the source handshake.  Pure, like :mod:`engine.handshake`: bytes in, lines and refusals out; the
nonce comes from the caller, and time is the caller's business (:mod:`engine.aio.tcp_source`).

Rules this module keeps:

1. **Bytes held per connection are bounded.**  :class:`LineFramer` keeps at most
   ``max_line_bytes`` of an unfinished line.  A line longer than that is refused (counted once)
   and the framer *resynchronises*: it drops bytes up to the next newline and goes on with the line
   after it.  So a source that sent one oversized batch loses that batch only, and a source that
   never sends a newline holds no more than the limit.
2. **Source handshake** (``auth = "secret"``): the node speaks first with a challenge line
   ``replicast-source-v1 <32 hex digits of nonce>``; the source answers with the line
   ``AUTH <hex HMAC-SHA256(K, "replicast-source-v1" ‖ 0 ‖ nonce)>`` and then sends its lines.  The
   nonce is fresh per connection, so an answer is good for one connection only; the label keeps a
   source's answer apart from the proofs of the node links (:mod:`engine.handshake`), which are
   MACs over a msgpack transcript with other labels.  It authenticates who opens the connection,
   not each later byte: against an attacker on the path, use ``auth = "tls"`` (client
   certificates from the cluster CA), which protects every byte.
3. **States are data**: a connection's :class:`Phase` moves only along :data:`TRANSITIONS`.
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass

#: The challenge line's first word, and the MAC's label (domain separation from node links).
LABEL = b"replicast-source-v1"
NONCE_BYTES = 16
#: Longest answer line accepted before a source has authenticated ("AUTH " + 64 hex digits + slack).
MAX_ANSWER_BYTES = 128


class Auth(enum.Enum):
    """What a source must show before its lines are read (``[source_connections] auth``)."""
    NONE = "none"
    SECRET = "secret"          # the cluster secret, by challenge and answer (rule 2)
    TLS = "tls"                # a client certificate signed by the cluster CA (``[tls] ca``)


@dataclass(frozen=True)
class SourceLimits:
    """``[source_connections]`` of the cluster file; the defaults are meant for production."""
    max_connections: int = 256
    max_line_bytes: int = 64 * 1024
    idle_timeout_s: float = 300.0
    auth: Auth = Auth.NONE


#: The bounds of each ``[source_connections]`` number (inclusive).
_RANGES = {"max_connections": (1, 65_536), "max_line_bytes": (64, 64 * 1024 * 1024), "idle_timeout_s": (0.01, 86_400)}


def parse_source_limits(table: object, where: str, error: type[Exception], *, has_tls: bool) -> SourceLimits:
    """``[source_connections]`` checked; ``where`` names the file and table in every error."""
    if not isinstance(table, dict):
        raise error(f"{where}: expected a table, got {table!r}")
    unknown = set(table) - {*_RANGES, "auth"}
    if unknown:
        raise error(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted({*_RANGES, 'auth'})})")
    values = {}
    for key, (low, high) in _RANGES.items():
        if key not in table:
            continue
        value, whole = table[key], key != "idle_timeout_s"
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            raise error(f"{where}: {key} must be a {'whole ' if whole else ''}number in {low}-{high}, "
                        f"got {value!r}")
        values[key] = value if whole else float(value)
    if "auth" in table:
        try:
            values["auth"] = Auth(table["auth"])
        except ValueError:
            raise error(f"{where}: auth must be one of {', '.join(repr(a.value) for a in Auth)}, "
                        f"got {table['auth']!r}") from None
        if values["auth"] is Auth.TLS and not has_tls:
            raise error(f"{where}: auth = \"tls\" needs the cluster's [tls] table (cert, key and the CA that "
                        f"signs the sources' certificates)")
    return SourceLimits(**values)


class Refusal(enum.Enum):
    """Why a source connection, or one of its lines, was refused: the ``reason`` label of
    ``replicast_source_refused_total``."""
    TOO_MANY_CONNECTIONS = "too_many_connections"
    LINE_TOO_LONG = "line_too_long"
    IDLE = "idle"
    AUTH_FAILED = "auth_failed"
    AUTH_TIMEOUT = "auth_timeout"
    TLS_FAILED = "tls_failed"


class Phase(enum.Enum):
    TLS_HANDSHAKE = "TLS handshake"
    CHALLENGED = "awaiting the answer"
    OPEN = "reading lines"
    CLOSED = "closed"


class Step(enum.Enum):
    TLS_DONE = "TLS done"
    ANSWERED = "answered"
    CLOSE = "close"


#: (phase, step) -> next phase; anything else is a bug in the driver.
TRANSITIONS = {
    (Phase.TLS_HANDSHAKE, Step.TLS_DONE): Phase.OPEN,
    (Phase.TLS_HANDSHAKE, Step.CLOSE): Phase.CLOSED,
    (Phase.CHALLENGED, Step.ANSWERED): Phase.OPEN,
    (Phase.CHALLENGED, Step.CLOSE): Phase.CLOSED,
    (Phase.OPEN, Step.CLOSE): Phase.CLOSED,
    (Phase.CLOSED, Step.CLOSE): Phase.CLOSED,
}


def first_phase(auth: Auth) -> Phase:
    return {Auth.NONE: Phase.OPEN, Auth.SECRET: Phase.CHALLENGED, Auth.TLS: Phase.TLS_HANDSHAKE}[auth]


def advance(phase: Phase, step: Step) -> Phase:
    try:
        return TRANSITIONS[phase, step]
    except KeyError:
        raise ValueError(f"a source connection cannot go from {phase.value!r} by {step.value!r}") from None


class Framing(enum.Enum):
    IN_LINE = "in a line"
    SKIPPING = "skipping a refused line to its newline"


class LineFramer:
    """Newline-terminated lines out of a byte stream, holding at most ``max_line_bytes`` (rule 1).

    :meth:`feed` returns the complete lines (without their newline) and counts the refused ones in
    :attr:`overlong` (cumulative).  :meth:`finish` returns the last line if the stream ended without
    a newline after it."""

    def __init__(self, max_line_bytes: int):
        self.max_line_bytes = max_line_bytes
        self.overlong = 0
        self._partial = bytearray()
        self.framing = Framing.IN_LINE

    @property
    def held(self) -> int:
        """Bytes of an unfinished line kept (at most ``max_line_bytes``)."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[bytes]:
        lines, start, limit = [], 0, self.max_line_bytes
        while (end := data.find(b"\n", start)) >= 0:
            if self.framing is Framing.SKIPPING:
                self.framing = Framing.IN_LINE        # that newline ends the refused line
            elif len(self._partial) + end - start > limit:
                self._refuse()
            elif self._partial:
                self._partial += data[start:end]
                lines.append(bytes(self._partial))
                self._partial.clear()
            else:
                lines.append(data[start:end])
            start = end + 1
        rest = len(data) - start
        if rest and self.framing is Framing.IN_LINE:
            if len(self._partial) + rest > limit:
                self._refuse()
                self.framing = Framing.SKIPPING
            else:
                self._partial += data[start:]
        return lines

    def finish(self) -> bytes | None:
        """The unterminated last line at the end of the stream, if any."""
        line, self._partial = bytes(self._partial), bytearray()
        return line if line.strip() and self.framing is Framing.IN_LINE else None

    def _refuse(self) -> None:
        self.overlong += 1
        self._partial = bytearray()                   # give the memory back, not just the length


def challenge(nonce: bytes) -> bytes:
    """The node's first line to a source when ``auth = "secret"``."""
    return LABEL + b" " + nonce.hex().encode() + b"\n"


def _mac(secret: bytes, nonce: bytes) -> bytes:
    return hmac.digest(secret, LABEL + b"\0" + nonce, "sha256")


def answer(secret: bytes, challenge_line: bytes) -> bytes:
    """A source's answer line to ``challenge_line`` (for source programs written in Python)."""
    label, _, nonce = challenge_line.strip().partition(b" ")
    if label != LABEL:
        raise ValueError(f"not a replicast source challenge: {challenge_line[:80]!r}")
    return b"AUTH " + _mac(secret, bytes.fromhex(nonce.decode("ascii"))).hex().encode() + b"\n"


def check_answer(secret: bytes, nonce: bytes, line: bytes) -> bool:
    """Whether ``line`` (without its newline) is the right answer to the challenge for ``nonce``."""
    word, _, mac = line.strip().partition(b" ")
    if word != b"AUTH":
        return False
    try:
        given = bytes.fromhex(mac.decode("ascii"))
    except ValueError:
        return False
    return hmac.compare_digest(_mac(secret, nonce), given)
