"""Application sinks: where an application's delivered records go (DESIGN.md §6).

A sink is called with each :class:`~engine.node.Delivered` event.  Output formats match the
input formats, so one cluster's output can feed another's input:

* :class:`FileSink` — JSON lines ``{"app", "ts", fields…, "arrival"}``: ``replicast replay``'s format
  plus the delivery time (µs, the node's clock), so latency = arrival − ts can be plotted later
  (``replicast plot latency``);
* :func:`mqtt_items` — the MQTT payload on ``replicast/out/<app>``: a JSON list of records
  ``{"ts", fields…}`` followed, if any, by ``{"punctuation": p}``;
* :class:`CallbackSink` — a Python callable, for embedding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from replicast.engine.events import as_text, record_to_json
from replicast.engine.node import Delivered

OUT_TOPIC = "replicast/out/{app}"
DEAD_LETTER_TOPIC = "replicast/dead-letter"


def mqtt_items(names: tuple[str, ...], event: Delivered) -> bytes:
    items: list[dict] = [{"ts": r[0], **dict(zip(names, r[1:]))} for r in event.records]
    if event.punctuation is not None:
        items.append({"punctuation": event.punctuation})
    return json.dumps(items, ensure_ascii=False, default=as_text).encode()


class FileSink:
    """Appends each delivered record to a JSON Lines file, flushed after every delivery."""

    def __init__(self, path: Path, app: str, names: tuple[str, ...]):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self.app, self.names = app, names

    def __call__(self, event: Delivered) -> None:
        if event.records:
            self._file.write("".join(record_to_json(self.app, self.names, r, event.now) + "\n" for r in event.records))
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class CallbackSink:
    """Calls ``function(event)`` for every delivery."""

    def __init__(self, function: Callable[[Delivered], None]):
        self._function = function

    def __call__(self, event: Delivered) -> None:
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
