"""Typed tables and keys of configuration documents, with errors a person can act on.

Query files, cluster files and scenarios all check typed tables of parsed TOML; these functions do
it once, each caller passing its own error class so messages keep naming the right kind of file.
:func:`convert` checks a whole table against a msgspec Struct; :func:`typed_key` one key.  Reading
the files is the drivers' (:func:`engine.toml_file.read_toml`): this module is pure.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from replicast.operators.errors import ReplicastError
from replicast.operators.validation import Failure, locate, shorten

MISSING: Any = ...


def typed_key(doc: dict, key: str, kind: type | tuple, where: str, default: Any = MISSING, *,
              error: type[ReplicastError] = ReplicastError) -> Any:
    """``doc[key]`` checked to be of ``kind`` (a bool is not an int here); ``default`` if absent.

    >>> typed_key({"port": 80}, "port", int, "c.toml: [[nodes]] #1")
    80
    """
    if key not in doc:
        if default is MISSING:
            raise error(f"{where}: missing key '{key}'")
        return default
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise error(f"{where}: '{key}' should be {expected}, got {value!r}")
    return value


def convert(doc: Any, schema: type, where: str, *, error: type[ReplicastError] = ReplicastError,
            named_by: str | None = None) -> Any:
    """``doc`` (a table read by :func:`engine.toml_file.read_toml`) as an instance of the msgspec Struct ``schema``: every
    key's type and range checked by msgspec, one table after another.  A mistake is one line naming the
    file, the table and the key, and the value: ``c.toml: [[nodes]] #2: 'port' should be int, got 'x'``.

    Ranges are ``msgspec.Meta`` constraints whose ``description`` says what a person should write
    (``'heartbeat_ms' must be a positive number of milliseconds (below a day), got -500``).  With
    ``named_by``, an entry of an array of tables is also named by that key: ``[[nodes]] #2 (b)``.
    """
    try:
        return msgspec.convert(doc, schema, strict=True)
    except msgspec.ValidationError as problem:
        failure = locate(problem, doc, lambda d: msgspec.convert(d, schema, strict=True))
        raise error(_message(failure, schema, where, doc, named_by)) from None


def _message(failure: Failure, schema: type, where: str, doc: Any, named_by: str | None) -> str:
    reason, path = failure.reason, failure.path
    missing, unknown = _MISSING.match(reason), _UNKNOWN.match(reason)
    if missing or unknown:                         # the path leads to the table
        table, key = path, None
    else:                                           # the path leads to the value
        split_at = max((i for i, step in enumerate(path) if isinstance(step, str)), default=len(path))
        table, key = path[:split_at], _key_text(path[split_at:])
    kinds = _kinds_along(schema, table)
    label = _table_label(table, kinds, doc, named_by)
    at = f"{where}: {label}" if label else where
    if missing:
        return f"{at}: missing key '{missing.group(1)}'"
    if unknown:
        allowed = sorted(f.encode_name for f in kinds[-1].fields) if kinds and kinds[-1] else []
        extra = sorted(set(failure.value) - set(allowed)) if isinstance(failure.value, dict) else [unknown.group(1)]
        return f"{at}: unknown key(s) {extra} (allowed: {allowed})"
    value = shorten(failure.value) if failure.found else "nothing"
    expected = _EXPECTED.match(reason)
    if expected and expected.group(2):             # a type: 'port' should be int, got 'x'
        return f"{at}: '{key}' should be {_type_words(expected.group(1))}, got {value}"
    return f"{at}: '{key}' must be {_described(schema, path) or reason.removeprefix('Expected ')}, got {value}"


_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")
_EXPECTED = re.compile(r"Expected `([^`]*)`(, got `[^`]*`)?")
_TYPE_WORDS = {"object": "a table", "array": "an array", "str": "a string", "int": "an integer", "float": "a number",
               "bool": "true or false"}


def _type_words(kinds: str) -> str:
    """msgspec's ``int | null`` in words; TOML has no null (an absent key is the default)."""
    return " or ".join(_TYPE_WORDS.get(k.strip(), k.strip()) for k in kinds.split("|") if k.strip() != "null")


def _key_text(steps: tuple) -> str:
    text = ""
    for step in steps:
        text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else str(step)
    return text


def _kinds_along(schema: type, path: tuple) -> list:
    """The msgspec type of each table on ``path`` (a StructType, or None where it is not one)."""
    kind: Any = msgspec.inspect.type_info(schema)
    kinds = []
    for step in path:
        kind = _struct_or_container(kind)
        if isinstance(kind, msgspec.inspect.StructType) and isinstance(step, str):
            kind = next((f.type for f in kind.fields if f.encode_name == step), None)
        elif isinstance(kind, (msgspec.inspect.ListType, msgspec.inspect.VarTupleType)):
            kind = kind.item_type
        elif isinstance(kind, msgspec.inspect.DictType):
            kind = kind.value_type
        else:
            kind = None
        kinds.append(_struct_or_container(kind))
    return [msgspec.inspect.type_info(schema), *kinds] if not path else kinds


def _struct_or_container(kind: Any) -> Any:
    while isinstance(kind, (msgspec.inspect.Metadata, msgspec.inspect.UnionType)):
        if isinstance(kind, msgspec.inspect.Metadata):
            kind = kind.type
        else:
            kind = next((t for t in kind.types if isinstance(t, msgspec.inspect.StructType)),
                        next((t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)), None))
    return kind


def _table_label(path: tuple, kinds: list, doc: Any, named_by: str | None) -> str:
    """``("nodes", 1, "ssh")`` as ``[[nodes]] #2: ssh`` (or ``[[nodes]] #2 (b): ssh``, named by its
    ``named_by`` key); ``("outputs", "alerts")`` as ``[outputs.alerts]``."""
    parts, i = [], 0
    while i < len(path):
        step, following = path[i], path[i + 1] if i + 1 < len(path) else None
        if not parts and isinstance(following, int):
            entry = doc[step][following] if isinstance(doc, dict) else None
            name = entry.get(named_by) if named_by and isinstance(entry, dict) else None
            parts.append(f"[[{step}]] #{following + 1}" + (f" ({name})" if isinstance(name, str) else ""))
            i += 2
        elif not parts and following is not None and isinstance(kinds[i + 1], msgspec.inspect.StructType):
            parts.append(f"[{step}.{following}]")
            i += 2
        else:
            parts.append(f"[{step}]" if not parts else str(step))
            i += 1
    return ": ".join(parts)


def _described(schema: type, path: tuple) -> str | None:
    """The ``description`` of the constraint on the value at ``path``, if it has one."""
    kind: Any = msgspec.inspect.type_info(schema)
    for step in path:
        while isinstance(kind, msgspec.inspect.UnionType):
            kind = next((t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType)), None)
        if isinstance(kind, msgspec.inspect.Metadata):
            kind = kind.type
        if isinstance(kind, msgspec.inspect.StructType):
            kind = next((f.type for f in kind.fields if f.encode_name == step), None)
        else:
            kind = getattr(kind, "item_type", None) or getattr(kind, "value_type", None)
    while isinstance(kind, msgspec.inspect.UnionType):
        kind = next((t for t in kind.types if isinstance(t, msgspec.inspect.Metadata)), None)
    return (kind.extra_json_schema or {}).get("description") if isinstance(kind, msgspec.inspect.Metadata) else None
