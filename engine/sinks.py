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

from engine.events import record_to_json
from engine.node import Delivered

OUT_TOPIC = "replicast/out/{app}"
DEAD_LETTER_TOPIC = "replicast/dead-letter"


def mqtt_items(names: tuple[str, ...], event: Delivered) -> bytes:
    items: list[dict] = [{"ts": r[0], **dict(zip(names, r[1:]))} for r in event.records]
    if event.punctuation is not None:
        items.append({"punctuation": event.punctuation})
    return json.dumps(items, ensure_ascii=False).encode()


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


def dead_letter_payload(node: str, stream: str, reason: str, item) -> bytes:
    if isinstance(item, (bytes, bytearray)):
        item = bytes(item).decode("utf-8", errors="replace")
    return json.dumps({"node": node, "stream": stream, "reason": reason, "item": item},
                      ensure_ascii=False, default=repr).encode()
