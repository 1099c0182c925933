"""Entry points (§II-B): where external records enter the replicated query.  Pure.

An entry point validates what a source sends for one stream and turns it into a stream of records
and punctuations.  Two modes, both giving every replica of the entry point the same stream:

* ``source`` (source-stamped): the source puts ``ts`` (µs) on every record and sends punctuations
  in-band (``{"punctuation": p}``) on the same topic, so every replica that subscribes sees the
  same sequence and emits it unchanged.
* ``entry`` (entry-stamped): one replica at a time, the *stamper*, stamps records with its clock
  and punctuates every P ms; the others emit exactly what it stamped (:mod:`engine.core.stamper`
  decides who stamps and makes sure every stamped segment is held by every member before anyone
  emits it).  A replica that is not the stamper remembers the raw records it has received but not
  yet seen stamped (``pending``, a multiset that drops a key when its count returns to 0); when it
  becomes the stamper it stamps those with ``ts >`` every punctuation already stamped, so the
  punctuation promise holds across a take-over.

Payloads (MQTT message bodies, TCP source lines) are JSON or msgpack: one item or a list of items;
an item is a record ``{"ts": µs, field: value, …}`` (no ``ts`` in entry-stamped mode) or a
punctuation ``{"punctuation": p}``.  A source-stamped stream that declares ``seal = [fields]`` may
also send seals per key, ``{"punctuation": p, "key": {field: value, …}}``: no more records with
those values and ``ts ≤ p`` (operators/key_seals.py); a later record breaking one is rejected as
late, like one behind a punctuation.  Anything else is rejected with a reason (dead letters).
"""

from __future__ import annotations

import enum
import json
from typing import Any

import msgpack

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.errors import InputError
from replicast.operators.key_seals import KeySeal, SealTable, key_names, record_key
from replicast.operators.query import StreamSpec
from replicast.operators.record import CLOSED, FIELD_TYPES, Record, make_record, normalise, short_repr

class EntryMode(enum.StrEnum):
    """Who stamps a stream's records (module docstring; docs/node.md, "Entry points")."""

    SOURCE = "source"       # the source stamps and punctuates
    ENTRY = "entry"         # the entry points stamp, one stamper per view (§IV-A)


MODES = tuple(mode.value for mode in EntryMode)
#: Raw records a replica remembers as pending at most (entry mode); past it the oldest is forgotten
#: (counted): if that replica later stamps, such a record is lost, or stamped again if its stamped
#: copy was the one forgotten — bounded memory where a replica's input runs far from its peers'.
MAX_PENDING = 100_000
#: A segment of an entry point's output: records, then maybe a punctuation (one Batch).
Segment = tuple[list[Record], int | None]
#: A rejected item: (reason, item).
Reject = tuple[str, Any]


def decode_payload(payload: bytes) -> list[Any]:
    """The items of one message: JSON if it starts with ``{`` or ``[``, else msgpack."""
    head = payload.lstrip()[:1]
    try:
        value = json.loads(payload) if head in (b"{", b"[") else msgpack.unpackb(payload, raw=False)
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(f"payload is neither JSON nor msgpack: {error}") from None
    except Exception as error:  # msgpack raises ExtraData, FormatError, StackError … for garbage
        raise InputError(f"payload is neither JSON nor msgpack: {type(error).__name__}") from None
    return value if isinstance(value, list) else [value]


class EntryPoint:
    """One replica of a stream's entry point; see the module docstring."""

    def __init__(self, stream: StreamSpec, mode: str = "source"):
        if mode not in MODES:
            raise InputError(f"stream {stream.name!r}: entry mode must be one of {MODES}, got {mode!r}")
        self.stream = stream
        self.mode = EntryMode(mode)
        self.punctuation = NO_PUNCTUATION       # the largest punctuation emitted (entry mode: stamped or held)
        #: Entry mode, not stamping: raw records received minus stamped copies seen, by fields; a key
        #: whose count returns to 0 is dropped (a negative count: the stamped copy came first).
        self.pending: dict[tuple, int] = {}
        self.accepted = 0
        self.late = 0
        #: A joined replica (lifecycle rule 5): its donor took every record at or below this
        #: punctuation, so until its own source delivers a punctuation that high, such a record is
        #: already in the stream — skipped and counted in ``carried``, not rejected as late.
        self.carried_until = NO_PUNCTUATION
        self.carried = 0
        self.malformed = 0
        self.evicted = 0                        # pending keys dropped past MAX_PENDING
        #: Seals per key (source mode, a stream declaring ``seal``): the highest per key above the
        #: punctuation, and those taken but not yet emitted (:meth:`take_seals`).
        self.seal_names = key_names(stream.seal)
        self.seal_positions = tuple(stream.schema.index(n) for n in self.seal_names)
        self.key_seals = SealTable()
        self.new_seals: list[KeySeal] = []

    # -- from the source ------------------------------------------------------------------------
    def on_items(self, items: list[Any], *, now: int, stamping: bool,
                 tracking: bool = True) -> tuple[list[Segment], list[Reject]]:
        """Items from the source.  Returns the segments to emit and the rejected items.  In entry
        mode a replica that is not ``stamping`` only remembers the raw records (if ``tracking``)."""
        segments: list[Segment] = []
        rejects: list[Reject] = []
        records: list[Record] = []
        where = f"stream {self.stream.name!r}"
        for item in items:
            if isinstance(item, dict) and set(item) == {"punctuation"}:
                p = item["punctuation"]
                if self.mode is not EntryMode.SOURCE or isinstance(p, bool) or not isinstance(p, int) or not NO_PUNCTUATION < p <= CLOSED:
                    self.malformed += 1
                    rejects.append(("malformed: punctuations come from the entry point in entry-stamped mode"
                                    if self.mode is not EntryMode.SOURCE else f"malformed: bad punctuation {p!r}", item))
                    continue
                if p >= self.carried_until:
                    self.carried_until = NO_PUNCTUATION     # its source has caught up with the donor's
                if p > self.punctuation:
                    segments.append((records, p))
                    records = []
                    self.punctuation = p
                    self.key_seals.prune(p)
                continue
            if isinstance(item, dict) and set(item) == {"punctuation", "key"}:
                try:
                    key, p = self._seal(item, where)
                except InputError as error:
                    self.malformed += 1
                    rejects.append((f"malformed: {error}", item))
                    continue
                if self.key_seals.raise_seal(key, p, self.punctuation):
                    self.new_seals.append((key, p))
                continue
            try:
                record = self._record(item, where, now, stamping, tracking)
            except InputError as error:
                self.malformed += 1
                rejects.append((f"malformed: {error}", item))
                continue
            if record is None:
                continue
            if record[0] <= self.carried_until:
                self.carried += 1
                continue
            if record[0] <= self.punctuation:   # §IV-A: behind a promise already made downstream
                self.late += 1
                rejects.append((f"late: ts {record[0]} is not after punctuation {self.punctuation}", item))
                continue
            if self.key_seals.seals and record[0] <= self.key_seals.sealed(record_key(record, self.seal_positions)):
                self.late += 1                  # behind a seal of its key (operators/key_seals.py)
                rejects.append((f"late: ts {record[0]} is not after the seal of its key "
                                f"{dict(zip(self.seal_names, record_key(record, self.seal_positions)))}", item))
                continue
            self.accepted += 1
            records.append(record)
        if records:
            segments.append((records, None))
        return segments, rejects

    def take_seals(self) -> list[KeySeal]:
        """The seals per key taken since the last call, to emit after the segments (drains them)."""
        seals, self.new_seals = self.new_seals, []
        return seals

    def _seal(self, item: dict, where: str) -> KeySeal:
        """A seal item ``{"punctuation": p, "key": {field: value}}`` checked against the stream's ``seal``."""
        if self.mode is not EntryMode.SOURCE or not self.seal_names:
            raise InputError(f"{where}: a seal per key needs a source-stamped stream that declares 'seal' "
                             f"(this one {'is entry-stamped' if self.mode is not EntryMode.SOURCE else 'declares none'})")
        p, key = item["punctuation"], item["key"]
        if isinstance(p, bool) or not isinstance(p, int) or not NO_PUNCTUATION < p < CLOSED:
            raise InputError(f"{where}: bad seal punctuation {short_repr(p)}")
        if not isinstance(key, dict) or sorted(key) != list(self.seal_names):
            raise InputError(f"{where}: a seal's 'key' must give exactly the fields {list(self.seal_names)}, "
                             f"got {short_repr(key)}")
        schema = self.stream.schema
        values = []
        for name in self.seal_names:
            kind = schema.types[schema.names.index(name)]
            value = key[name]
            if type(value) is not FIELD_TYPES[kind] and not (kind == "float" and type(value) is int):
                raise InputError(f"{where}: seal key field {name!r} must be {kind}, got {short_repr(value)}")
            values.append(normalise(float(value)) if kind == "float" else value)
        return tuple(values), p

    def _record(self, item: Any, where: str, now: int, stamping: bool, tracking: bool) -> Record | None:
        if not isinstance(item, dict):
            raise InputError(f"{where}: an item must be an object, got {type(item).__name__}")
        if self.mode is EntryMode.SOURCE:
            if "ts" not in item:
                raise InputError(f"{where}: missing 'ts' (the stream is source-stamped)")
            values = dict(item)
            return make_record(self.stream.schema, values.pop("ts"), values, where)
        if "ts" in item:
            raise InputError(f"{where}: 'ts' given but the stream is entry-stamped")
        record = make_record(self.stream.schema, self.stamp(now), item, where)
        fields = record[1:]
        if stamping and self.pending.get(fields, 0) >= 0:
            return record
        if tracking or stamping:
            self._count(fields, 1)       # stamping: a stamped copy came before it (a take-over)
        return None

    def stamp(self, now: int) -> int:
        """A timestamp for a record arriving at ``now``: never behind an emitted punctuation."""
        return max(now, self.punctuation + 1)

    # -- entry-stamped mode ---------------------------------------------------------------------
    def punctuate(self, now: int) -> list[Segment]:
        """The stamper's periodic punctuation: every later stamp is ``≥ now > now − 1``."""
        if now - 1 <= self.punctuation:
            return []
        self.punctuation = now - 1
        return [([], self.punctuation)]

    def settle(self, records) -> None:
        """``records`` were stamped (by us or the stamper): their raw events are no longer pending."""
        for record in records:
            self._count(record[1:], -1)

    def unsettle(self, records) -> None:
        """Stamped ``records`` were discarded (never emitted): their raw events are pending again."""
        for record in records:
            self._count(record[1:], 1)

    def forget(self) -> None:
        """Stop remembering raw events (their stamps, if any, are unknown here)."""
        self.pending = {}

    def _count(self, fields: tuple, n: int) -> None:
        pending = self.pending
        count = pending.get(fields, 0) + n
        if count:
            pending[fields] = count
            if len(pending) > MAX_PENDING:        # the oldest first (a dict keeps insertion order)
                del pending[next(iter(pending))]
                self.evicted += 1
        else:
            del pending[fields]

    def take_over(self, now: int) -> list[Segment]:
        """Become the stamper: stamp every raw record no stamped copy has covered (§II-B)."""
        ts = self.stamp(now)
        records = [(ts, *fields) for fields, n in sorted(self.pending.items()) if n > 0 for _ in range(n)]
        # Stamped copies whose raw events have not come stay: those raw events are not stamped again.
        self.pending = {fields: n for fields, n in self.pending.items() if n < 0}
        return [(records, None)] if records else []
