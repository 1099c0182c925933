"""The logical query: a DAG of source streams, operators and applications.

Built either with :class:`QueryBuilder` in Python or from a TOML file
(:mod:`engine.query_file`); both produce the same :class:`Query`.  Building checks names,
wiring and every operator's parameters against its inputs' schemas, and infers every output
schema, so a query that builds will run.

>>> q = QueryBuilder()
>>> q.stream("cpu", {"server": "str", "load": "float"})
>>> q.filter("busy", "cpu", where="load > 0.8")
>>> q.application("alerts", "busy", ordered=True)
>>> query = q.build()
>>> query.schemas["busy"].names
('server', 'load')
"""

from __future__ import annotations

import graphlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from replicast.operators.base import Operator
from replicast.operators.compile import KINDS as BUILT_IN, Compiled, compile_join
from replicast.operators.errors import QueryError
from replicast.operators.record import FIELD_TYPES, Schema
from replicast.operators.user import compile_python, refuse_import

KINDS = {**BUILT_IN, "python": compile_python}
#: Turns a python operator's ``class = "module:Class"`` into the class, given the error location.
ClassImporter = Callable[[str, str], type[Operator]]
#: Values of an operator's optional ``coordination`` key (docs/explain.md).
COORDINATION_CHOICES = ("auto", "none")


@dataclass(frozen=True)
class StreamSpec:
    """A source stream entering through entry points."""

    name: str
    schema: Schema
    #: The key (attributes) the source punctuates on besides time, e.g. ``("server",)``: a
    #: punctuation per key value (Blazes' Seal_key, docs/explain.md); () if none is declared.
    seal: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    kind: str
    inputs: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)


@dataclass(frozen=True)
class ApplicationSpec:
    """An application: a sink fed by every replica of its input (§II-B)."""

    name: str
    input: str
    ordered: bool = False


@dataclass
class Query:
    """A checked logical query.  ``operators`` is in topological order."""

    streams: dict[str, StreamSpec]
    operators: dict[str, OperatorSpec]
    applications: dict[str, ApplicationSpec]
    schemas: dict[str, Schema]
    compiled: dict[str, Compiled] = field(repr=False, compare=False)
    source: str = "<query>"

    def new_operator(self, name: str) -> Operator:
        """A fresh instance of operator ``name`` (one per replica)."""
        return self.compiled[name].factory()

    def order_sensitive(self, name: str) -> bool:
        """Whether the replicas of operator or application ``name`` sort their inputs (§IV-C).

        The coordination analysis decides (:mod:`operators.coordination`): the planner, the node
        and ``replicast explain`` all read this one verdict.
        """
        return self.coordination.sorts(name)

    @property
    def coordination(self):
        """The coordination analysis of this query (computed once; see :mod:`operators.coordination`)."""
        cached = self.__dict__.get("_coordination")
        if cached is None:
            from replicast.operators.coordination import decide   # it imports this module
            cached = self.__dict__["_coordination"] = decide(self)
        return cached

    def consumers(self, name: str) -> list[tuple[str, int]]:
        """Operators reading ``name``, with the input port they read it on."""
        return [(op.name, port) for op in self.operators.values() for port, i in enumerate(op.inputs) if i == name]

    def inputs_of(self, name: str) -> tuple[str, ...]:
        if name in self.operators:
            return self.operators[name].inputs
        if name in self.applications:
            return (self.applications[name].input,)
        return ()


class QueryBuilder:
    """Builds a :class:`Query` step by step; :meth:`build` checks and compiles it."""

    def __init__(self, source: str = "<query>", *, import_class: ClassImporter = refuse_import):
        """``import_class`` resolves the ``class`` of a python operator given as an import path: the
        query file loader passes its importer (:func:`engine.query_file.import_operator_class`);
        code that builds a query in Python passes the class itself and needs none."""
        self.source = source
        self._import_class = import_class
        self._streams: list[StreamSpec] = []
        self._operators: list[OperatorSpec] = []
        self._applications: list[ApplicationSpec] = []
        self._names: set[str] = set()

    def _claim(self, name: Any, what: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise QueryError(f"{self.source}: {what} name must be an identifier (letters, digits, _), got {name!r}")
        if name in self._names:
            raise QueryError(f"{self.source}: {what} name {name!r} is already used")
        self._names.add(name)

    def stream(self, name: str, fields: Mapping[str, str], *, seal: list[str] | None = None) -> None:
        self._claim(name, "stream")
        if not isinstance(fields, Mapping):
            raise QueryError(f"{self.source}: stream '{name}' (fields): expected a table of name = type, got {fields!r}")
        for fname, ftype in fields.items():
            if ftype not in FIELD_TYPES:
                raise QueryError(f"{self.source}: stream '{name}' field {fname!r}: unknown type {ftype!r} "
                                 f"(expected one of {', '.join(FIELD_TYPES)})")
            if fname == "ts" or "." in fname or not fname.isidentifier():
                raise QueryError(f"{self.source}: stream '{name}': invalid field name {fname!r}")
        if seal is not None and (not isinstance(seal, list) or not seal
                                 or any(not isinstance(f, str) or f not in fields for f in seal)):
            raise QueryError(f"{self.source}: stream '{name}' (seal): expected a non-empty list of its fields "
                             f"{sorted(fields)} (the key it punctuates on), got {seal!r}")
        self._streams.append(StreamSpec(name, Schema.of(dict(fields)), tuple(seal or ())))

    def operator(self, name: str, kind: str, inputs: list[str] | str, **params: Any) -> None:
        self._claim(name, "operator")
        if kind not in KINDS:
            raise QueryError(f"{self.source}: operator '{name}': unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(inputs, (list, tuple)) or not inputs or not all(isinstance(i, str) for i in inputs):
            raise QueryError(f"{self.source}: operator '{name}' (input): expected a stream or operator name, got {inputs!r}")
        if params.get("coordination", "auto") not in COORDINATION_CHOICES:
            raise QueryError(f"{self.source}: operator '{name}' (coordination): expected one of "
                             f"{', '.join(COORDINATION_CHOICES)}, got {params['coordination']!r}")
        self._operators.append(OperatorSpec(name, kind, tuple(inputs), params))

    def filter(self, name: str, input: str, *, where: str) -> None:
        self.operator(name, "filter", input, where=where)

    def map(self, name: str, input: str, *, set: Mapping[str, str]) -> None:
        self.operator(name, "map", input, set=dict(set))

    def union(self, name: str, inputs: list[str]) -> None:
        self.operator(name, "union", inputs)

    def join(self, name: str, inputs: list[str], *, window_ms: float, on: str | None = None) -> None:
        self.operator(name, "join", inputs, window_ms=window_ms, on=on)

    def aggregate(self, name: str, input: str, *, window: Mapping[str, Any], compute: Mapping[str, str],
                  group_by: list[str] = ()) -> None:
        self.operator(name, "aggregate", input, window=dict(window), compute=dict(compute), group_by=list(group_by))

    def application(self, name: str, input: str, *, ordered: bool = False) -> None:
        self._claim(name, "application")
        if not isinstance(ordered, bool):
            raise QueryError(f"{self.source}: application '{name}' (ordered): expected true or false, got {ordered!r}")
        self._applications.append(ApplicationSpec(name, input, ordered))

    # -- checking -------------------------------------------------------------------------------
    def build(self) -> Query:
        if not self._streams:
            raise QueryError(f"{self.source}: a query needs at least one [[streams]] entry")
        if not self._applications:
            raise QueryError(f"{self.source}: a query needs at least one [[applications]] entry")
        producers = {s.name for s in self._streams} | {o.name for o in self._operators}
        for op in self._operators:
            for i in op.inputs:
                if i not in producers:
                    raise QueryError(f"{self.source}: operator '{op.name}' (input): unknown stream or operator {i!r}")
        for app in self._applications:
            if app.input not in producers:
                raise QueryError(f"{self.source}: application '{app.name}' (input): unknown stream or operator {app.input!r}")
        order = self._topological_order()
        schemas = {s.name: s.schema for s in self._streams}
        compiled: dict[str, Compiled] = {}
        for op in order:
            where = f"{self.source}: operator '{op.name}'"
            inputs = [schemas[i] for i in op.inputs]
            if op.kind == "join":
                compiled[op.name] = compile_join(op.name, op.params, inputs, where, list(op.inputs))
            else:
                params = op.params
                if op.kind == "python" and isinstance(params.get("class"), str):
                    params = {**params, "class": self._import_class(params["class"], where)}
                compiled[op.name] = KINDS[op.kind](op.name, params, inputs, where)
            schemas[op.name] = compiled[op.name].schema
        return Query({s.name: s for s in self._streams}, {o.name: o for o in order},
                     {a.name: a for a in self._applications}, schemas, compiled, self.source)

    def _topological_order(self) -> list[OperatorSpec]:
        by_name = {o.name: o for o in self._operators}
        sorter = graphlib.TopologicalSorter({o.name: [i for i in o.inputs if i in by_name] for o in self._operators})
        try:
            return [by_name[name] for name in sorter.static_order()]
        except graphlib.CycleError as error:
            cycle = " -> ".join(error.args[1])
            raise QueryError(f"{self.source}: operators form a cycle: {cycle}") from None
