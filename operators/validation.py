"""Where a msgspec validation failed, and with what value: the path and value an error message names.

msgspec checks a document against a typed schema in one pass and says what was expected and where
(``Expected `int`, got `str` - at `$.nodes[0].port```), but not the value, and it writes a map's
value as ``[...]`` without its key.  :func:`locate` turns such an error into its reason, the path as
keys (a map's key found again by re-checking its entries one at a time) and the value there, so a
wire frame or a config file can be refused in one line naming the field and the value
(STYLE.md "Errors are for people").  Pure: documents in, strings out; only on the error path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import msgspec

#: A path step msgspec wrote as ``[...]``: some key of a map.
ANY_KEY = object()
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[\.\.\.\]")
_AT = re.compile(r" - at `\$([^`]*)`$")


@dataclass(frozen=True)
class Failure:
    """What :func:`locate` found: msgspec's reason, the path (keys and indexes) and the value there."""

    reason: str
    path: tuple
    value: Any = None
    found: bool = False                     # False: the path does not lead to a value (a missing key)

    def dotted(self, start: int = 0) -> str:
        """The path from step ``start`` as ``a.b[0].c``."""
        text = ""
        for step in self.path[start:]:
            text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else str(step)
        return text


def split(error: msgspec.ValidationError) -> tuple[str, tuple]:
    """msgspec's reason and its path as steps (str keys, int indexes, :data:`ANY_KEY`)."""
    text = str(error)
    match = _AT.search(text)
    if match is None:
        return text, ()
    steps = []
    for name, index in _STEP.findall(match.group(1)):
        steps.append(name if name else int(index) if index else ANY_KEY)
    return text[:match.start()], tuple(steps)


def locate(error: msgspec.ValidationError, doc: Any, check: Callable[[Any], Any]) -> Failure:
    """The failure ``error`` raised by ``check(doc)``, with the keys msgspec left out found and the value.

    ``check`` re-runs the validation (for a map written ``[...]``: each entry is checked alone until
    one fails the same way)."""
    reason, steps = split(error)
    path: list = []
    node = doc
    for i, step in enumerate(steps):
        if step is ANY_KEY:
            step = _culprit(doc, path, node, steps[i + 1:], reason, check)
            if step is ANY_KEY:
                return Failure(reason, (*path, "<key>", *steps[i + 1:]))
        path.append(step)
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return Failure(reason, (*path, *steps[i + 1:]))
    return Failure(reason, tuple(path), node, True)


def _culprit(doc: Any, path: list, table: Any, rest: tuple, reason: str, check: Callable[[Any], Any]) -> Any:
    """The key of ``table`` (at ``path`` in ``doc``) whose entry fails with ``reason`` at ``rest``."""
    if not isinstance(table, dict):
        return ANY_KEY
    for key, value in table.items():
        try:
            check(_replaced(doc, path, {key: value}))
        except msgspec.ValidationError as again:
            if split(again)[0] == reason:
                return key
        except RecursionError:          # an entry nested too deep: not the one msgspec named
            continue
    return ANY_KEY


def _replaced(doc: Any, path: list, new: Any) -> Any:
    """``doc`` with the value at ``path`` replaced by ``new`` (copies along the path only)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replaced(doc[head], rest, new)}
    items = list(doc)
    items[head] = _replaced(items[head], rest, new)
    return type(doc)(items) if isinstance(doc, tuple) else items


def shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: untrusted values go into messages only like this."""
    try:
        text = repr(value)
    except RecursionError:              # a value nested deeper than repr goes (msgpack and TOML allow it)
        return f"<{type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"
