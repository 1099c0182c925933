"""Events files: JSON Lines of ``{"stream": name, "ts": µs, <fields>}``.

Each line is checked against its stream's schema; each stream must be in non-decreasing ``ts``
(a source cannot send a record behind a punctuation it may already have sent).  Any problem is an
:class:`~operators.errors.InputError` naming the file, the line and what was wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from replicast.operators.errors import InputError
from replicast.operators.query import Query
from replicast.operators.record import Record, make_record


def read_events(path: str | Path, query: Query) -> dict[str, list[Record]]:
    """Records of every source stream of ``query`` found in the events file, in file order."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as lines:
            return parse_events(lines, query, str(path))
    except OSError as error:
        raise InputError(f"{path}: cannot read events file: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: the events file is not UTF-8 text (byte {error.start}: "
                         f"{error.object[error.start:error.start + 4]!r}); expected JSON lines") from None


def parse_events(lines: Iterable[str], query: Query, source: str = "<events>") -> dict[str, list[Record]]:
    streams: dict[str, list[Record]] = {name: [] for name in query.streams}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            event = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: not valid JSON: {error.msg} at column {error.colno}") from None
        if not isinstance(event, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(event).__name__}")
        name = event.pop("stream", None)
        if name not in query.streams:
            raise InputError(f"{where}: unknown stream {name!r} (the query's streams: {', '.join(query.streams)})")
        if "ts" not in event:
            raise InputError(f"{where}: missing 'ts'")
        record = make_record(query.streams[name].schema, event.pop("ts"), event, where)
        records = streams[name]
        if records and record[0] < records[-1][0]:
            raise InputError(f"{where}: ts {record[0]} of stream {name!r} is earlier than the previous "
                             f"record's {records[-1][0]}; each stream must be in non-decreasing ts")
        records.append(record)
    return streams


def record_to_json(app: str, names: tuple[str, ...], record: Record, arrival: int | None = None) -> str:
    """One output line ``{"app", "ts", fields…}``, with ``"arrival"`` (µs) when given (a live sink).
    A value JSON has no type for (bytes, which only a misbehaving peer can put in a record) is
    written as text, bytes decoded as UTF-8 with U+FFFD."""
    line = {"app": app, "ts": record[0], **dict(zip(names, record[1:]))}
    if arrival is not None:
        line["arrival"] = arrival
    return json.dumps(line, ensure_ascii=False, default=as_text)


def as_text(value: object) -> str:
    """JSON's fallback for values it has no type for (see :func:`record_to_json`)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return repr(value)
