"""Query files in TOML (see ``docs/queries.md``).

::

    [[streams]]
    name = "cpu"
    fields = { server = "str", load = "float" }

    [[operators]]
    name = "busy"
    kind = "filter"
    input = "cpu"
    where = "load > 0.8"

    [[applications]]
    name = "alerts"
    input = "busy"
    ordered = true

The loader only translates tables into :class:`~operators.query.QueryBuilder` calls, so a file and
the equivalent Python build the same :class:`~operators.query.Query`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Mapping

from replicast.operators.config_file import read_toml
from replicast.operators.errors import QueryError
from replicast.operators.query import Query, QueryBuilder

_SECTIONS = {"streams", "operators", "applications"}
_OPERATOR_KEYS = {"filter": {"where"}, "map": {"set"}, "union": set(), "join": {"window_ms", "on"},
                  "aggregate": {"group_by", "window", "compute", "coordination"},
                  "python": {"class", "args", "fields", "label", "gate", "coordination"}}


def load_query(path: str | Path) -> Query:
    """Read and check the query file at ``path``."""
    return build_query(read_toml(path, "query file", QueryError), source=str(path))


def parse_query(text: str, source: str = "<query>") -> Query:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise QueryError(f"{source}: invalid TOML: {error}") from None
    return build_query(document, source)


def build_query(document: Mapping[str, Any], source: str = "<query>") -> Query:
    """The query described by an already-parsed TOML document."""
    unknown = set(document) - _SECTIONS
    if unknown:
        raise QueryError(f"{source}: unknown section(s) {sorted(unknown)} (expected [[streams]], [[operators]], [[applications]])")
    builder = QueryBuilder(source)
    for i, table in enumerate(_tables(document, "streams", source), start=1):
        _require(table, {"name", "fields"}, {"seal"}, f"{source}: [[streams]] #{i}")
        builder.stream(table["name"], table["fields"], seal=table.get("seal"))
    for i, table in enumerate(_tables(document, "operators", source), start=1):
        where = f"{source}: [[operators]] #{i} ({table.get('name', '?')})"
        kind = table.get("kind")
        if kind not in _OPERATOR_KEYS:
            raise QueryError(f"{where}: unknown kind {kind!r} (expected one of {', '.join(_OPERATOR_KEYS)})")
        input_key = "inputs" if kind in ("union", "join") or (kind == "python" and "inputs" in table) else "input"
        _require(table, {"name", "kind", input_key}, _OPERATOR_KEYS[kind], where)
        params = {k: v for k, v in table.items() if k not in ("name", "kind", input_key)}
        builder.operator(table["name"], kind, table[input_key], **params)
    for i, table in enumerate(_tables(document, "applications", source), start=1):
        _require(table, {"name", "input"}, {"ordered"}, f"{source}: [[applications]] #{i}")
        builder.application(table["name"], table["input"], ordered=table.get("ordered", False))
    return builder.build()


def _tables(document: Mapping[str, Any], section: str, source: str) -> list[Mapping[str, Any]]:
    tables = document.get(section, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise QueryError(f"{source}: '{section}' must be an array of tables ([[{section}]])")
    return tables


def _require(table: Mapping[str, Any], required: set[str], optional: set[str], where: str) -> None:
    missing = required - set(table)
    if missing:
        raise QueryError(f"{where}: missing key(s) {sorted(missing)}")
    extra = set(table) - required - optional
    if extra:
        raise QueryError(f"{where}: unknown key(s) {sorted(extra)} (allowed: {sorted(required | optional)})")
