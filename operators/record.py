"""Records, schemas and punctuations (DESIGN.md §4, paper §IV-A).

A *record* is a plain tuple ``(ts, f1, f2, …)``: immutable, hashable, and its identity is its whole
value.  ``ts`` is an integer number of microseconds since the epoch — never a float, because the
duplicate filter (§IV-B) and window arithmetic (§IV-F) need exact equality.  Plain tuples are used
(rather than a class) because the duplicate filter hashes every record copy it receives and
tuples are what CPython hashes fastest.

A *punctuation* ``p`` on a stream promises that every later record on that stream has ``ts > p``.
Operators exchange punctuations as plain ``int`` values through ``on_punctuation``; the
:class:`Punctuation` wrapper exists only where records and punctuations share one sequence
(wire batches, event files).

Floats in records are normalised so that ``-0.0`` never appears: ``-0.0 == 0.0`` in Python, so two
records differing only in the sign of a zero would be "equal" to the duplicate filter yet have
different bits, and replicas could disagree on which one they emitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Sequence

import msgpack

Record = tuple
"""A record: ``(ts, *fields)`` with ``ts`` an int in µs."""

#: The punctuation that closes a stream for good: no record may follow it.
CLOSED = 2**63 - 1

#: Ints a record may hold: what msgpack (the wire format) encodes as a signed 64-bit integer.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

#: Field types a stream may declare, mapped to the Python types accepted for them.
FIELD_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True, slots=True)
class Punctuation:
    """A punctuation inside a mixed sequence of records and punctuations."""

    ts: int


@dataclass(frozen=True)
class Schema:
    """The field names and types of a stream, not counting the leading ``ts``.

    >>> Schema.of({"server": "str", "load": "float"}).index("load")
    2
    """

    names: tuple[str, ...]
    types: tuple[str, ...]

    @classmethod
    def of(cls, fields: dict[str, str]) -> "Schema":
        return cls(tuple(fields), tuple(fields.values()))

    def index(self, name: str) -> int:
        """Position of field ``name`` inside a record (``ts`` is position 0)."""
        return self.names.index(name) + 1

    def as_dict(self) -> dict[str, str]:
        return dict(zip(self.names, self.types))

    def __len__(self) -> int:
        return len(self.names)


_ts = itemgetter(0)


def sorted_stamps(records: Sequence[Record]) -> list[int]:
    """The timestamps of ``records``, sorted (one linear pass on a batch in timestamp order).  A
    batch read off the wire has them taken out already, when its records were checked
    (``engine.wire.PackedRecords.stamps``): a pass over the records fewer."""
    stamps = getattr(records, "stamps", None)
    return sorted(map(_ts, records) if stamps is None else stamps)


def normalise(value: Any) -> Any:
    """Return ``value`` with ``-0.0`` turned into ``0.0`` (see module docstring)."""
    return value + 0.0 if type(value) is float else value


def is_finite(value: Any) -> bool:
    return type(value) is not float or math.isfinite(value)


def canonical_bytes(record: Record) -> bytes:
    """A byte string that is equal for equal records and orders equal-``ts`` records uniquely (§IV-C)."""
    return msgpack.packb(record, use_bin_type=True)


def sort_key(record: Record) -> tuple[int, bytes]:
    """The unique total order of records: by timestamp, then by canonical bytes (§IV-C)."""
    return (record[0], canonical_bytes(record))


def as_records(items: Sequence[Any]) -> list[Record]:
    """The records of a mixed record/punctuation sequence."""
    return [item for item in items if type(item) is not Punctuation]


def make_record(schema: Schema, ts: Any, values: dict[str, Any], where: str) -> Record:
    """Check ``values`` against ``schema`` and build the record ``(ts, *fields)``.

    Raises :class:`~operators.errors.InputError` naming ``where``, the field, the value and the
    expected type.  An ``int`` is accepted for a ``float`` field (and converted); nothing else is
    converted, so equal events always become equal records.
    """
    from replicast.operators.errors import InputError

    if isinstance(ts, bool) or not isinstance(ts, int):
        raise InputError(f"{where}: 'ts' must be an integer number of microseconds, got {short_repr(ts)}")
    if not -(2**63) < ts < CLOSED:
        raise InputError(f"{where}: 'ts' {short_repr(ts)} is outside the 64-bit range")
    missing = [n for n in schema.names if n not in values]
    extra = [n for n in values if n not in schema.names]
    if missing or extra:
        raise InputError(f"{where}: fields do not match the stream's {list(schema.names)}"
                         + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))
    fields = []
    for name, kind in zip(schema.names, schema.types):
        value = values[name]
        if kind == "float" and type(value) is int:
            value = float(value) if INT_MIN <= value <= INT_MAX else math.inf
        if type(value) is not FIELD_TYPES[kind]:
            raise InputError(f"{where}: field {name!r} must be {kind}, got {short_repr(value)}")
        if kind == "int" and not INT_MIN <= value <= INT_MAX:
            raise InputError(f"{where}: field {name!r} must be a 64-bit int, got {short_repr(value)}")
        if kind == "float":
            if not math.isfinite(value):
                raise InputError(f"{where}: field {name!r} must be a finite float, got {short_repr(values[name])}")
            value = normalise(value)
        fields.append(value)
    return (ts, *fields)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: error messages quote input values, and a value
    from outside may be megabytes long (or an int of a million digits)."""
    if type(value) is int and value.bit_length() > 200:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"
