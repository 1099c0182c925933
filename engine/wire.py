"""The wire format: length-prefixed msgpack frames, one message per frame (DESIGN.md §4).

Rules of this module:

1. Pure: bytes in, messages out, no sockets.  :class:`FrameDecoder` is fed whatever the transport
   read and returns whole frames, like h11's ``receive_data()`` / ``next_event()``.
2. A frame is a 4-byte big-endian length followed by a msgpack array ``[code, fields…]``.  Its
   schema is a msgspec Struct in :mod:`engine.frames` (one per message: a new message is one class);
   msgspec checks the code, the field count, every type and every range while it decodes.
3. Anything malformed — a short or oversized frame, bad msgpack, an unknown code, a field of the
   wrong type — raises :class:`WireError` with one line naming the message, the field and the
   value; nothing else escapes :func:`decode`.  The driver counts it and closes the connection; a
   peer can never crash a node with bytes.
4. A batch's records travel as one msgpack ``bin`` field holding the msgpack array of records,
   encoded once by the sender and read lazily by the receiver (:mod:`engine.packed_records`).
5. A batch with trace baggage (engine/core/baggage.py: timed hops, only while a trace query needs
   them) travels as its own frame code, the batch frame plus the hops (:class:`engine.frames.TracedBatchFrame`);
   every other batch frame is byte for byte what it was.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import msgspec

from replicast.engine.frame_size import ack_frame_size, batch_frame_size
from replicast.engine.frames import BY_CODE, BY_MESSAGE, AnyFrame, Frame, required_fields
from replicast.engine.messages import Ack, Batch, Message
from replicast.engine.packed_records import EncodedRecords, PackedRecords, WireError
from replicast.operators.plan import StreamReplica
from replicast.operators.validation import Failure, locate, shorten

__all__ = ["MAX_FRAME", "EncodedRecords", "FrameDecoder", "PackedRecords", "WireError", "ack_frame_size",
           "ack_header_size", "batch_frame_size", "batch_header_size", "decode", "encode"]

#: Largest frame a node accepts (a batch is normally far smaller).
MAX_FRAME = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(AnyFrame).decode
_packb = msgpack.Packer(use_bin_type=True).pack


# -- messages <-> frames --------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    """One frame (length prefix included) carrying ``message``."""
    body = _encode(BY_MESSAGE[type(message)].of(message))
    return _HEADER.pack(len(body)) + body


def batch_header_size(stream: StreamReplica) -> int:
    """Bytes of a :class:`Batch` frame on ``stream`` other than its epoch, offset, records and punctuation
    fields: msgpack writes a short array as a one-byte header followed by its elements, so a
    frame's size is this plus each field's own encoding (see :func:`batch_frame_size`)."""
    return (len(encode(Batch(stream, 0, 0, (), None))) - 2 * len(_packb(0)) - len(_packb(_packb(())))
            - len(_packb(None)))


def ack_header_size(stream: StreamReplica) -> int:
    """Bytes of an :class:`Ack` frame on ``stream`` other than its epoch and offset (as
    :func:`batch_header_size`; see :func:`ack_frame_size`)."""
    return len(encode(Ack(stream, 0, 0))) - 2 * len(_packb(0))


def decode(body: bytes) -> Message:
    """The message in one frame body (without its length prefix); raises :class:`WireError`."""
    try:
        frame = _decode(body)
    except msgspec.ValidationError as error:
        raise WireError(refusal(body, error)) from None
    except (msgspec.MsgspecError, RecursionError) as error:   # not msgpack at all, or nested too deep
        raise WireError(f"not msgpack: {error}") from None
    except UnicodeDecodeError as error:                        # msgspec's own for a str that is not UTF-8
        raise WireError(f"not msgpack: a string that is not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        return frame.message()
    except WireError as error:          # records or a free-form field that are not what they must be
        raise WireError(f"{error} ({type(frame).MESSAGE.__name__} frame)") from None


def refusal(body: bytes, error: msgspec.ValidationError) -> str:
    """The one-line reason a frame body that is msgpack failed its schema: the message, the field, the value."""
    try:
        value = msgpack.unpackb(body, use_list=False, raw=False, strict_map_key=False)
    except Exception as garbage:  # msgpack raises several unrelated types (msgspec stopped before the garbage)
        return f"not msgpack: {type(garbage).__name__} ({error})"
    if type(value) is not tuple or not value or type(value[0]) is not int:
        return f"a frame must hold an array [code, fields…], got {shorten(value, 40)}"
    frame = BY_CODE.get(value[0])
    if frame is None:
        return f"unknown message code {value[0]}"
    name = frame.MESSAGE.__name__
    failure = locate(error, value, lambda doc: msgspec.convert(doc, AnyFrame))
    if not failure.path:                # the array itself: too short or too long
        least, most = required_fields(frame), len(frame.__struct_fields__)
        needs = f"{least}" if least == most else f"{least} to {most}"
        return f"message code {value[0]} ({name}) needs {needs} fields, got {len(value) - 1}"
    field, what = _field(frame, failure)
    shown = shorten(failure.value, 60) if failure.found else "nothing"
    return f"{name} frame: bad {what} at {field}: {shown} ({failure.reason})"


def _field(frame: type[Frame], failure: Failure) -> tuple[str, str]:
    """The failed field's path by field names (``view.members[0][1]``) and what its type is."""
    kind: Any = msgspec.inspect.type_info(frame)
    names, what = [], "value"
    for depth, step in enumerate(failure.path):
        while isinstance(kind, (msgspec.inspect.Metadata, msgspec.inspect.UnionType)):
            kind = kind.type if isinstance(kind, msgspec.inspect.Metadata) else next(
                (t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)), kind.types[0])
        if isinstance(kind, msgspec.inspect.StructType) and isinstance(step, int):
            index = step - (depth == 0)              # a frame's first element is its code
            if not 0 <= index < len(kind.fields):
                names.append(f"[{step}]")
                break
            names.append(("." if names else "") + kind.fields[index].name)
            kind = kind.fields[index].type
        else:
            names.append(f"[{step!r}]")
            kind = getattr(kind, "item_type", None) or getattr(kind, "value_type", None) or (
                kind.item_types[step] if isinstance(kind, msgspec.inspect.TupleType) and isinstance(step, int)
                and step < len(kind.item_types) else None)
    while isinstance(kind, msgspec.inspect.UnionType):
        kind = next((t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)), kind.types[0])
    if isinstance(kind, msgspec.inspect.Metadata):
        what = (kind.extra_json_schema or {}).get("description", what)
    elif isinstance(kind, (msgspec.inspect.StructType, msgspec.inspect.VarTupleType, msgspec.inspect.TupleType)):
        what = "array"
    elif isinstance(kind, msgspec.inspect.DictType):
        what = "map"
    elif kind is not None:
        what = type(kind).__name__.removesuffix("Type").lower()
    return "".join(names), what


class FrameDecoder:
    """Splits a byte stream into frame bodies.  Feed it bytes; it returns complete bodies.

    A link starts with a small ``max_frame`` and ``single = True`` (one frame per call, the rest kept)
    until the peer has authenticated (engine.handshake.MAX_HANDSHAKE_FRAME), so an unknown peer cannot
    make a node buffer a large frame; then both are relaxed and ``feed(b"")`` returns what is left."""

    def __init__(self, max_frame: int = MAX_FRAME, single: bool = False):
        self._buffer = bytearray()
        self.max_frame, self.single = max_frame, single

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if buffer:
            buffer += data
            source = buffer
        else:                                           # the common case: parse the read itself
            source = data
        spans, start, end = [], 0, len(source)
        while end - start >= 4:
            (size,) = _HEADER.unpack_from(source, start)
            if size > self.max_frame:
                raise WireError(f"frame of {size} bytes exceeds the {self.max_frame}-byte limit")
            if end - start - 4 < size:
                break
            spans.append((start + 4, start + 4 + size))
            start += 4 + size
            if self.single:
                break
        with memoryview(source) as view:                # one copy per frame
            bodies = [view[a:b].tobytes() for a, b in spans]
            if source is not buffer and start < end:
                buffer += view[start:]                  # the start of the next frame
        if source is buffer:
            del buffer[:start]
        return bodies
