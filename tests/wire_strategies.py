"""Hypothesis strategies for hostile wire frames and MQTT payloads (fuzz suite, docs/node.md).

Used by ``tests/engine/test_fuzz.py`` (a bounded sample in CI) and ``benchmarks/fuzz.py``
(≥ 10^5 frames, ≥ 10^4 payloads).  A frame here is whole bytes as a peer would send them:
4-byte length + body, the length sometimes lying.
"""

from __future__ import annotations

import json

import msgpack
from hypothesis import strategies as st

from replicast.engine.frames import BY_CODE, required_fields

CODES = sorted(BY_CODE)
FIELDS = {code: required_fields(frame) for code, frame in BY_CODE.items()}

#: Scalars at and beyond the edges msgpack and the node care about.
EDGE_INTS = [0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 10**6]
scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 5e-324]),
    st.text(max_size=12), st.sampled_from(["busy", "alerts", "cpu", "a", "b", "c", "n" * 300]),
    st.binary(max_size=24))


def pack(value) -> bytes:
    """msgpack, or JSON where msgpack cannot carry a value (ints beyond 64 bits: JSON can)."""
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return json.dumps(value, default=repr).encode()


def nested(depth: int) -> bytes:
    """A msgpack array nested ``depth`` deep (1 byte per level)."""
    return b"\x91" * depth + b"\xc0"


values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(scalars.filter(
    lambda v: isinstance(v, (str, int))), inner, max_size=3), max_leaves=12)

#: Record arrays (what a batch's ``records`` bin field holds), well- and ill-formed.
record_bytes = st.one_of(
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), scalars, scalars), max_size=6).map(pack),
    st.lists(st.lists(scalars, max_size=4), max_size=4).map(pack),
    st.integers(1, 3000).map(nested), st.binary(max_size=40))


@st.composite
def shaped_body(draw) -> bytes:
    """``[code, fields…]`` with a real code and (mostly) the right field count, fields of any type."""
    code = draw(st.sampled_from(CODES + [0, 12, 99, -1]))
    n = FIELDS.get(code, 3)
    n = draw(st.sampled_from([n, n, n, max(0, n - 1), n + 1]))
    fields = draw(st.lists(st.one_of(values, record_bytes), min_size=n, max_size=n))
    return pack([code, *fields])


bodies = st.one_of(
    shaped_body(),
    st.binary(max_size=64),                                   # random bytes
    st.integers(1, 5000).map(nested),                          # deep nesting
    values.map(pack),  # valid msgpack, not a message
)


@st.composite
def frames(draw) -> bytes:
    """A frame as bytes on the wire: honest, truncated, or with a lying (oversized) length."""
    body = draw(bodies)
    how = draw(st.sampled_from(["honest"] * 6 + ["truncated", "oversized", "huge"]))
    if how == "truncated" and body:
        return len(body).to_bytes(4, "big") + body[:draw(st.integers(0, len(body) - 1))]
    if how == "oversized":
        return (len(body) + draw(st.integers(1, 1000))).to_bytes(4, "big") + body
    if how == "huge":
        return draw(st.sampled_from([2**26 + 1, 2**31, 2**32 - 1])).to_bytes(4, "big") + body
    return len(body).to_bytes(4, "big") + body


#: MQTT payloads for an entry point of a stream ``{server: str, load: float}``.
payloads = st.one_of(
    st.binary(max_size=64),
    st.integers(1, 5000).map(nested),
    values.map(pack),
    st.lists(st.dictionaries(st.sampled_from(["ts", "server", "load", "punctuation", "x"]), scalars, max_size=4),
             max_size=6).map(pack),
    st.lists(st.fixed_dictionaries({"ts": st.sampled_from(EDGE_INTS), "server": st.text(max_size=5),
                                    "load": st.sampled_from([1e308, -1e308, 0.5, 10**30, 2**63])}), max_size=5)
      .map(pack),
    st.sampled_from([b"[" * 2_000, b'{"ts": 1e999, "server": "x", "load": 1}', b'{"ts": 1, "server": "x", "load": NaN}',
                     b'{"punctuation": 99999999999999999999999}', b"\xff\xfe", b""]),
)
