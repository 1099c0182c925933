"""A :class:`~engine.messages.Batch` frame's size without building the frame: what
:func:`engine.wire.encode` would write, counted field by field (msgpack writes a short array as a
one-byte header followed by its elements). The simulator sizes every batch it moves for its
bandwidth table; this module is compiled natively with the per-message path
(replicast/native_build.py), which :mod:`engine.wire`, facing the network's buffers, is not.
``tests/engine/test_wire.py`` checks the count against the encoding."""

from __future__ import annotations

import msgpack

from replicast.engine.core.baggage import is_baggage
from replicast.engine.messages import Batch
from replicast.engine.packed_records import records_bytes

_packb = msgpack.Packer(use_bin_type=True).pack     # engine.wire's packer settings


def batch_frame_size(header: int, batch: Batch) -> int:
    """``len(encode(batch))`` given ``header = batch_header_size(batch.stream)`` (:mod:`engine.wire`)."""
    return (header + len(_packb(batch.epoch)) + len(_packb(batch.offset))
            + len(_packb(records_bytes(batch.records))) + len(_packb(batch.punctuation))
            + (len(_packb(batch.path)) if batch.path and is_baggage(batch.path) else 0))     # rule 5
