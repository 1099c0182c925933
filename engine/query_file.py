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
the equivalent Python build the same :class:`~operators.query.Query`.  Which keys a table may hold is
its msgspec schema (:class:`QueryFile`, one per operator kind); the values are the builder's to check.
It does what the pure builder may not (DESIGN.md §3): reads the file, and imports the module a
``kind = "python"`` operator names (:func:`import_operator_class`).
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Any, Mapping

import msgspec
from msgspec import UNSET

from replicast.engine.toml_file import read_toml
from replicast.operators.base import Operator
from replicast.operators.config_file import convert
from replicast.operators.errors import QueryError
from replicast.operators.query import Query, QueryBuilder


class _Table(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A table of a query file: its keys checked here, its values by :class:`~operators.query.QueryBuilder`
    (which names the stream or operator), so values are ``Any`` and absent ones ``UNSET``."""


class StreamTable(_Table):
    name: Any
    fields: Any
    seal: Any = None


class ApplicationTable(_Table):
    name: Any
    input: Any
    ordered: Any = False


class QueryFile(_Table):
    """The document: three arrays of tables; each operator table is checked by its kind's schema."""

    streams: list[StreamTable] = []
    operators: list[dict[str, Any]] = []
    applications: list[ApplicationTable] = []


class _Operator(_Table):
    name: Any
    kind: str


class _OneInput(_Operator):
    input: Any


class _Inputs(_Operator):
    inputs: Any


class FilterTable(_OneInput):
    where: Any = UNSET


class MapTable(_OneInput):
    set: Any = UNSET


class UnionTable(_Inputs):
    pass


class JoinTable(_Inputs):
    window_ms: Any = UNSET
    on: Any = UNSET


class AggregateTable(_OneInput):
    group_by: Any = UNSET
    window: Any = UNSET
    compute: Any = UNSET
    coordination: Any = UNSET


class _Python(_Operator, kw_only=True):
    """A user operator (``class``), one input or several."""
    class_: Any = msgspec.field(default=UNSET, name="class")
    args: Any = UNSET
    fields: Any = UNSET
    label: Any = UNSET
    gate: Any = UNSET
    key_seals: Any = UNSET
    coordination: Any = UNSET


class PythonTable(_Python):
    input: Any


class PythonInputsTable(_Python):
    inputs: Any


#: kind -> the schema of its table.
_OPERATORS: dict[str, type[_Operator]] = {"filter": FilterTable, "map": MapTable, "union": UnionTable,
                                          "join": JoinTable, "aggregate": AggregateTable, "python": PythonTable}


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
    file = convert(document, QueryFile, source, error=QueryError)
    builder = QueryBuilder(source, import_class=import_operator_class)
    for table in file.streams:
        builder.stream(table.name, table.fields, seal=table.seal)
    for i, table in enumerate(file.operators, start=1):
        where = f"{source}: [[operators]] #{i} ({table.get('name', '?')})"
        kind = table.get("kind")
        if kind not in _OPERATORS:
            raise QueryError(f"{where}: unknown kind {kind!r} (expected one of {', '.join(_OPERATORS)})")
        schema = PythonInputsTable if kind == "python" and "inputs" in table else _OPERATORS[kind]
        op = convert(table, schema, where, error=QueryError)
        inputs = op.inputs if isinstance(op, _Inputs | PythonInputsTable) else op.input
        params = {f.encode_name: value for f in msgspec.structs.fields(op)
                  if f.name not in ("name", "kind", "input", "inputs") and (value := getattr(op, f.name)) is not UNSET}
        builder.operator(op.name, kind, inputs, **params)
    for table in file.applications:
        builder.application(table.name, table.input, ordered=table.ordered)
    return builder.build()


def import_operator_class(path: str, where: str) -> type[Operator]:
    """The class named ``"module:Class"`` (``kind = "python"``, docs/queries.md); a clear error if it
    is not an importable :class:`~operators.base.Operator` subclass."""
    if path.count(":") != 1:
        raise QueryError(f"{where} (class): expected \"package.module:Class\", got {path!r}")
    module_name, class_name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise QueryError(f"{where} (class): cannot import module {module_name!r}: {error}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, Operator):
        raise QueryError(f"{where} (class): {path!r} is not a subclass of replicast.operators.base.Operator")
    return cls
