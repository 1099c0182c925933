"""A :class:`~engine.messages.Batch` or :class:`~engine.messages.Ack` frame's size without building the frame: what
:func:`engine.wire.encode` would write, counted field by field (msgpack writes a short array as a
one-byte header followed by its elements). The simulator sizes every batch it moves for its
bandwidth table; this module is compiled natively with the per-message path
(replicast/native_build.py), which :mod:`engine.wire`, facing the network's buffers, is not.
``tests/engine/test_wire.py`` checks the count against the encoding."""

from __future__ import annotations

import msgpack

from replicast.engine.core.baggage import is_baggage
from replicast.engine.messages import Ack, Batch
from replicast.engine.packed_records import records_bytes

_packb = msgpack.Packer(use_bin_type=True).pack     # engine.wire's packer settings


def batch_frame_size(header: int, batch: Batch) -> int:
    """``len(encode(batch))`` given ``header = batch_header_size(batch.stream)`` (:mod:`engine.wire`)."""
    return (header + len(_packb(batch.epoch)) + len(_packb(batch.offset))
            + _bin_size(len(records_bytes(batch.records))) + len(_packb(batch.punctuation))
            + (len(_packb(batch.path)) if batch.path and is_baggage(batch.path) else 0))     # rule 5


def _bin_size(n: int) -> int:
    """msgpack's ``bin`` of ``n`` bytes: a bin 8, 16 or 32 header, then the bytes (not packed to be
    counted: that copied every emit's records)."""
    return n + (2 if n < 0x100 else 3 if n < 0x10000 else 5)


def ack_frame_size(header: int, ack: Ack) -> int:
    """``len(encode(ack))`` given ``header = ack_header_size(ack.stream)`` (:mod:`engine.wire`)."""
    return header + len(_packb(ack.epoch)) + len(_packb(ack.offset))
