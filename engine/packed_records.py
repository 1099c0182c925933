"""A batch's records on the wire (:mod:`engine.wire` rule 4), and the error of anything read off it.

A batch's records travel as one msgpack ``bin`` field holding the msgpack array of records: the
sender encodes an emitted batch once for all its downstream replicas (:class:`EncodedRecords`), and
the receiver decodes it only when a record is read (:class:`PackedRecords`) — a duplicate filter
that already knows these exact bytes from another upstream replica (operators/dedup.py, "runs")
never reads them.  Records come back as tuples (``use_list=False``), so they are hashable and equal
to the sender's records (msgpack keeps int/float/str/bool exactly); a malformed record array raises
:class:`WireError` when first read.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import msgpack

from replicast.operators.errors import ReplicastError
from replicast.operators.record import Record

_packb = msgpack.Packer(use_bin_type=True).pack
_first = itemgetter(0)


class WireError(ReplicastError):
    """Bytes that are not a valid frame or message."""


def records_bytes(records: Sequence[Record]) -> bytes:
    """The msgpack array of ``records`` (made once for an :class:`EncodedRecords`, kept from the wire
    for :class:`PackedRecords`)."""
    return records.packed if type(records) in (PackedRecords, EncodedRecords) else _packb(records)


class EncodedRecords(list):
    """What a replica emits (module docstring): a list of records that keeps its msgpack encoding once made,
    so the frames of all its remote stream replicas share one encoding.  A plain list otherwise
    (C-speed ``len`` and iteration on the node's data path)."""

    __slots__ = ("_packed",)

    def __init__(self, records: Sequence[Record]):
        super().__init__(records)
        self._packed: bytes | None = None

    @property
    def key(self) -> bytes | None:
        """The encoding if it was made (the content key a duplicate filter may use), else None."""
        return self._packed

    @property
    def packed(self) -> bytes:
        if self._packed is None:
            self._packed = _packb(self)
        return self._packed


class PackedRecords(Sequence):
    """A batch's records as read off the wire (module docstring): the msgpack bytes, the count read from the
    array header, and the records decoded (and checked) only when first needed.  :attr:`key` is
    the bytes — the content identity a duplicate filter may use."""

    __slots__ = ("packed", "_records", "_stamps", "_n")

    def __init__(self, packed: bytes):
        self.packed = packed
        self._n = _array_length(packed)
        self._records: Sequence[Record] | None = None
        self._stamps: list[int] | None = None

    @property
    def key(self) -> bytes:
        return self.packed

    @property
    def records(self) -> Sequence[Record]:
        """The records; raises :class:`WireError` if the bytes are not an array of records."""
        if self._records is None:
            self._records, self._stamps = _unpack_records(self.packed, self._n)
        return self._records

    @property
    def stamps(self) -> list[int]:
        """The records' timestamps, in record order: taken out once, to check them, and kept for
        the duplicate filter (:func:`operators.record.sorted_stamps`), which would take them out again."""
        if self._stamps is None:
            self._records, self._stamps = _unpack_records(self.packed, self._n)
        return self._stamps

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        return self.records[index]

    def __iter__(self):
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self.records) == tuple(other)

    __hash__ = None  # type: ignore[assignment]   (a list-like, like the records lists it stands for)

    def __repr__(self) -> str:
        return f"PackedRecords({list(self.records)!r})"


def _array_length(packed: bytes) -> int:
    """The element count in a msgpack array header."""
    head = packed[:1]
    if head and 0x90 <= head[0] <= 0x9F:
        return head[0] & 0x0F
    if head == b"\xdc" and len(packed) >= 3:
        return int.from_bytes(packed[1:3], "big")
    if head == b"\xdd" and len(packed) >= 5:
        return int.from_bytes(packed[1:5], "big")
    raise WireError("batch records must be a msgpack array")


def _unpack_records(packed: bytes, n: int) -> tuple[tuple[Record, ...], list[int]]:
    """The records in ``packed`` (``n`` of them) and their timestamps, in record order."""
    try:
        records = msgpack.unpackb(packed, use_list=False, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types for garbage
        raise WireError(f"batch records are not msgpack: {type(error).__name__}") from None
    # Every record an array starting with an integer timestamp (type checks in C, three passes).
    try:
        valid = type(records) is tuple and len(records) == n and set(map(type, records)) <= {tuple}
        if valid:
            stamps = list(map(_first, records))
            valid = set(map(type, stamps)) <= {int}
    except IndexError:                  # an empty record
        valid = False
    if not valid:
        raise WireError("batch records must be arrays starting with an integer timestamp")
    return records, stamps
