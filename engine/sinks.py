"""Application sinks: where an application's delivered records go (DESIGN.md §6).

A sink is called with each :class:`~engine.node.Delivered` event.  Output formats match the
input formats, so one cluster's output can feed another's input:

* :class:`FileSink` — JSON lines ``{"app", "ts", fields…, "arrival"}``: ``replicast replay``'s format
  plus the delivery time (µs, the node's clock), so latency = arrival − ts can be plotted later
  (``replicast plot latency``);
* :func:`mqtt_items` — the MQTT payload on ``replicast/out/<app>``: a JSON list of records
  ``{"ts", fields…, "@id"}`` followed, if any, by ``{"punctuation": p}``;
* :class:`CallbackSink` — a Python callable, for embedding;
* :class:`RestartGate` — a restarted sink's MQTT output against the frontier retained on
  ``replicast/frontier/<app>`` (:func:`frontier_payload`): what it published before is not published again.

**Output ids** (docs/consume.md, DESIGN.md §11).  Replica-consistent operators deliver the same
records to every replica of an application, in every run, so a record is named by
(application, ts, canonical record bytes, occurrence): :class:`OutputIds` gives each delivered
record the id ``"<ts>:<occurrence>:<digest>"`` — the digest a 64-bit BLAKE2b of the application and
the record's canonical bytes, the occurrence how many equal records (same ts, same bytes) it has
delivered before.  Every sink replica, and a sink restarted above a punctuation, names a record the
same way, so a consumer runs Alg. 1 (§IV-B) on the ids: first copy wins, and a punctuation ``p``
(every later record has ``ts > p``) lets it forget the ids at or below ``p``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from replicast.engine.event_file import as_text
from replicast.engine.node import Delivered

OUT_TOPIC = "replicast/out/{app}"
#: Retained: the last punctuation a sink of ``app`` published on this broker (docs/consume.md).
FRONTIER_TOPIC = "replicast/frontier/{app}"
DEAD_LETTER_TOPIC = "replicast/dead-letter"


#: The key of a record's output id in the payloads (not a valid field name, so it never collides).
ID_KEY = "@id"
#: A bare punctuation (no records with it) is published when this long (µs, the node's clock) has
#: passed since the application's last published punctuation: it bounds a consumer's memory of ids
#: (docs/consume.md) without sending every punctuation interval.
BARE_PUNCTUATION_EVERY_US = 200_000


_canonical = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=as_text).encode


def canonical_bytes(record) -> bytes:
    """A record's field values (not its ts) as compact JSON: the same bytes on every replica."""
    return _canonical(record[1:]).encode()


class OutputIds:
    """The output ids of one application's delivered records (module docstring).  Remembers the
    occurrence counts of the records above the newest punctuation only: memory is one punctuation
    interval's distinct records."""

    def __init__(self, app: str):
        self._prefix = app.encode() + b"\0"
        self._counts: dict[tuple[int, str], int] = {}
        self.punctuation: int | None = None

    def restart(self, punctuation: int | None, delivered: dict) -> None:
        """The sink starts a new incarnation (:class:`~engine.core.events.SinkRestarted`): it has
        delivered ``delivered`` (record -> occurrences) above ``punctuation`` already — in a peer's
        snapshot it restored — so the next equal record is the next occurrence, as on that peer."""
        blake2b, prefix = hashlib.blake2b, self._prefix
        self.punctuation = punctuation
        self._counts = counts = {}
        for record, n in delivered.items():
            key = (record[0], blake2b(prefix + _canonical(record[1:]).encode(), digest_size=8).hexdigest())
            counts[key] = counts.get(key, 0) + n

    def ids(self, event: Delivered) -> list[str]:
        """The ids of ``event.records``, in order; then ``event.punctuation`` is applied."""
        counts, prefix, out, blake2b, canonical = self._counts, self._prefix, [], hashlib.blake2b, _canonical
        for record in event.records:
            digest = blake2b(prefix + canonical(record[1:]).encode(), digest_size=8).hexdigest()
            key = (record[0], digest)
            occurrence = counts.get(key, 0)
            counts[key] = occurrence + 1
            out.append(f"{record[0]}:{occurrence}:{digest}")
        p = event.punctuation
        if p is not None and (self.punctuation is None or p > self.punctuation):
            self.punctuation = p
            self._counts = {key: n for key, n in counts.items() if key[0] > p}
        return out


def mqtt_items(names: tuple[str, ...], event: Delivered, ids: list[str] | None = None) -> bytes:
    """The payload of one delivery: its records (with their ids, if given), then its punctuation."""
    if ids is None:
        items: list[dict] = [{"ts": r[0], **dict(zip(names, r[1:]))} for r in event.records]
    else:
        items = [{"ts": r[0], **dict(zip(names, r[1:])), ID_KEY: i} for r, i in zip(event.records, ids)]
    if event.punctuation is not None:
        items.append({"punctuation": event.punctuation})
    return json.dumps(items, ensure_ascii=False, default=as_text).encode()


def mqtt_properties(app: str, event: Delivered, ids: list[str]) -> list[tuple[str, str]]:
    """MQTT 5 user properties of one delivery's message: the application, the ids (space
    separated) and the punctuation, so a consumer can filter without parsing the payload."""
    properties = [("replicast-app", app)]
    if ids:
        properties.append(("replicast-ids", " ".join(ids)))
    if event.punctuation is not None:
        properties.append(("replicast-punctuation", str(event.punctuation)))
    return properties


def frontier_payload(punctuation: int) -> bytes:
    """The retained message on ``FRONTIER_TOPIC``: ``{"punctuation": p}``."""
    return json.dumps({"punctuation": punctuation}).encode()


def parse_frontier(payload: bytes) -> int | None:
    """The punctuation of a retained frontier message, None if it holds none (or is not one)."""
    try:
        item = json.loads(payload)
    except ValueError:
        return None
    p = item.get("punctuation") if isinstance(item, dict) else None
    return p if isinstance(p, int) and not isinstance(p, bool) else None


class GateState(enum.Enum):
    """Where a restarted sink's MQTT output stands against the frontier it published before."""

    READING = "reading"          # waiting for the retained frontier: deliveries held
    SKIPPING = "skipping"        # records at or below the frontier were published before: dropped
    PASSING = "passing"          # above it: everything goes out


GATE_TRANSITIONS = {
    (GateState.READING, "known"): GateState.SKIPPING,
    (GateState.READING, "none"): GateState.PASSING,
    (GateState.SKIPPING, "passed"): GateState.PASSING,
}


class RestartGate:
    """A restarted sink's MQTT output (docs/consume.md, "A restarted sink"): a punctuation ``p``
    retained on ``FRONTIER_TOPIC`` says some sink of the application published every record with
    ``ts <= p`` to that broker, so the restarted sink drops those instead of publishing them again
    (a plain subscriber sees fewer repeats; the ids make the rest harmless to ``replicast.consume``).
    Deliveries are held while the frontier is read; the first punctuation ``>= p`` opens the gate."""

    def __init__(self, reading: bool = True):
        self.state = GateState.READING if reading else GateState.PASSING
        self.frontier: int | None = None
        self.held: list[tuple[Delivered, list[str] | None]] = []
        self.skipped = 0

    def _move(self, event: str) -> None:
        self.state = GATE_TRANSITIONS[(self.state, event)]

    def offer(self, event: Delivered, ids: list[str] | None) -> list[tuple[Delivered, list[str] | None]]:
        """The deliveries to publish now (with their ids), out of this one."""
        if self.state is GateState.PASSING:
            return [(event, ids)]
        if self.state is GateState.READING:
            self.held.append((event, ids))
            return []
        return [kept] if (kept := self._filter(event, ids)) is not None else []

    def known(self, frontier: int | None) -> list[tuple[Delivered, list[str] | None]]:
        """The frontier was read (None: nothing retained, or not readable): the held deliveries to
        publish now."""
        self.frontier = frontier
        self._move("none" if frontier is None else "known")
        held, self.held = self.held, []
        return [out for event, ids in held for out in self.offer(event, ids)]

    def _filter(self, event: Delivered, ids: list[str] | None) -> tuple[Delivered, list[str] | None] | None:
        frontier = self.frontier
        keep = [n for n, record in enumerate(event.records) if record[0] > frontier]
        self.skipped += len(event.records) - len(keep)
        if event.punctuation is not None and event.punctuation >= frontier:
            self._move("passed")         # every later record has ts > punctuation >= frontier
        if len(keep) == len(event.records):
            return event, ids
        if not keep and event.punctuation is None:
            return None
        records = [event.records[n] for n in keep]
        return dataclasses.replace(event, records=records), (None if ids is None else [ids[n] for n in keep])


class OutputState(enum.Enum):
    """Whether an application's file output takes writes (docs/node.md, "Outputs")."""

    WRITING = "writing"
    FAILING = "failing"       # the last write failed: lines wait in memory, retried with back-off


#: (state, event) -> next state.
OUTPUT_TRANSITIONS = {
    (OutputState.WRITING, "written"): OutputState.WRITING,
    (OutputState.WRITING, "failed"): OutputState.FAILING,
    (OutputState.FAILING, "failed"): OutputState.FAILING,
    (OutputState.FAILING, "written"): OutputState.WRITING,
}
#: How much of an existing output file a restarted sink reads back for the ids it already wrote.
TAIL_BYTES = 8 << 20


class FileSink:
    """Appends each delivered record to a JSON Lines file, with its output id (``"@id"``).

    * **Whole lines or nothing**: the lines of a delivery are written with one ``os.write`` on an
      ``O_APPEND`` descriptor; a write that fails part-way (a full disk) is cut back to the last
      whole line, and the lines wait in memory (``pending``) until :meth:`retry` or the next
      delivery writes them — nothing accepted is dropped, no torn line is glued to the next one.
      An output that cannot be opened (a read-only directory) is the same: the node starts, the
      lines wait, and the driver reports the application not ready while ``state`` is FAILING.
    * **A restart does not write twice**: on opening, a torn last line (a crash mid-write) is cut
      off, and the ids of the file's tail are read back; a delivered record whose id is among them
      is skipped, until a punctuation passes the newest of them (docs/lifecycle.md: a restarted
      sink delivers again what its inputs retain above the adopted frontier).
    """

    def __init__(self, path: Path, app: str, names: tuple[str, ...]):
        self.path, self.app, self.names = path, app, names
        self.state = OutputState.WRITING
        self.pending: list[str] = []
        self.error: str | None = None
        self.failures = 0
        self._fd: int | None = None
        self._size = 0
        self._written: set[str] = set()       # ids read back from the tail (until a punctuation passes)
        self._written_max: int | None = None
        self._open()

    def _move(self, event: str) -> None:
        self.state = OUTPUT_TRANSITIONS[(self.state, event)]

    def _open(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            self._failed(error)
            return False
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._read_back()
        return True

    def _read_back(self) -> None:
        """Cut a torn last line; remember the ids of the tail's lines."""
        if self._size == 0:
            return
        start = max(0, self._size - TAIL_BYTES)
        tail = os.pread(self._fd, self._size - start, start)
        end = tail.rfind(b"\n") + 1
        if end < len(tail):               # a torn line: never completed, so never counted as written
            os.ftruncate(self._fd, start + end)
            self._size = start + end
        lines = tail[:end].split(b"\n")
        if start > 0:
            lines = lines[1:]               # the first may be a part of a line
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get(ID_KEY), str) and isinstance(item.get("ts"), int):
                self._written.add(item[ID_KEY])
                self._written_max = max(item["ts"], self._written_max or item["ts"])

    def __call__(self, event: Delivered, ids: list[str] | None = None) -> None:
        records = event.records
        if ids is None:
            ids = [None] * len(records)
        written = self._written
        for record, rid in zip(records, ids):
            if written and rid in written:
                continue
            line = {"app": self.app, "ts": record[0], **dict(zip(self.names, record[1:])), "arrival": event.now}
            if rid is not None:
                line[ID_KEY] = rid
            self.pending.append(json.dumps(line, ensure_ascii=False, default=as_text) + "\n")
        if written and event.punctuation is not None and event.punctuation >= self._written_max:
            self._written = set()
        if self.pending and (self.state is OutputState.WRITING):
            self.retry()

    def retry(self) -> bool:
        """Write the pending lines (whole lines or nothing); True if nothing is pending now."""
        if not self.pending:
            return True
        if self._fd is None and not self._open():
            return False
        data = "".join(self.pending).encode()
        try:
            done = os.write(self._fd, data)
            if done < len(data):
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (wrote {done} of {len(data)} bytes)")
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)     # no torn line left behind
            self._failed(error)
            return False
        self._size += len(data)
        self.pending.clear()
        if self.state is OutputState.FAILING:
            self._move("written")
            self.error = None
        return True

    def _failed(self, error: OSError) -> None:
        self.failures += 1
        self.error = f"{self.path}: {error.strerror or error}"
        self._move("failed")

    def close(self) -> None:
        self.retry()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class CallbackSink:
    """Calls ``function(event)`` for every delivery."""

    def __init__(self, function: Callable[[Delivered], None]):
        self._function = function

    def __call__(self, event: Delivered, ids: list[str] | None = None) -> None:
        self._function(event)

    def close(self) -> None:
        pass


#: Bounds of one dead letter: this many reasons, each and the item cut to this many characters.
DEAD_LETTER_REASONS, DEAD_LETTER_TEXT = 5, 1024


def dead_letter_payload(node: str, stream: str, rejected: list) -> bytes:
    """The one dead letter for the rejected items of one source message (``DeadLetter`` events of
    one stream): ``{"node", "stream", "count", "reason", "reasons", "item"}`` — the first reason,
    the first few distinct reasons, and the first rejected item — at most ~8 KiB whatever came in
    (20,000 bad items give one message saying 20000, not 20,000 messages)."""
    reasons = list(dict.fromkeys(_cut(letter.reason) for letter in rejected[:1000]))[:DEAD_LETTER_REASONS]
    return json.dumps({"node": node, "stream": _cut(stream, 200), "count": len(rejected), "reason": reasons[0],
                       "reasons": reasons, "item": _item_text(rejected[0].item)}, ensure_ascii=False,
                      default=as_text).encode()


def _cut(text: str, limit: int = DEAD_LETTER_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"…({len(text)} chars)"


def _item_text(item) -> object:
    """The rejected item as JSON-able data, or as text when it is bytes, too deep or too long."""
    if isinstance(item, (bytes, bytearray)):
        return _cut(bytes(item[:DEAD_LETTER_TEXT * 4]).decode("utf-8", errors="replace"))
    try:
        text = json.dumps(item, ensure_ascii=False, default=repr)
    except (RecursionError, ValueError, TypeError):
        return "(an item nested too deeply to show)"
    return item if len(text) <= DEAD_LETTER_TEXT else _cut(text)
