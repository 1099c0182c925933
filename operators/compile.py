"""Compiles one operator spec into an operator factory and its output schema.

Each kind's parameters are checked here, against the schemas of the operator's inputs, so that a
bad query fails before anything runs, with a message naming the file, the operator, the
parameter and the bad value.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping

from replicast.operators.aggregate import TimeWindowAggregate
from replicast.operators.base import Operator
from replicast.operators.blazes import TS, WINDOW, Annotation, Path
from replicast.operators.count_aggregate import CountWindowAggregate
from replicast.operators.errors import QueryError
from replicast.operators.expressions import (FieldRef, check_expression, compile_expression, compile_selection, compile_tuple,
                                  compile_tuples)
from replicast.operators.filter import Filter
from replicast.operators.join import Join
from replicast.operators.join_keys import split_join_keys
from replicast.operators.keyed_join import KeyedJoin, key_getter
from replicast.operators.map import Map
from replicast.operators.record import Schema
from replicast.operators.summaries import FUNCTIONS, Summary
from replicast.operators.union import Union

OperatorFactory = Callable[[], Operator]


@dataclass(frozen=True)
class Compiled:
    """An operator ready to instantiate, with what coordination analysis needs to know of it.

    ``annotation`` is its Blazes label (docs/explain.md); ``carries`` maps output attributes to the
    input attributes they copy unchanged (a seal on the input attribute seals the output one).
    Whether replicas sort its input is not stored here: the analysis decides it
    (:mod:`operators.coordination`), and the planner and the node read that verdict.
    """

    factory: OperatorFactory
    schema: Schema
    annotation: Annotation
    carries: Mapping[str, str] = field(default_factory=dict)
    #: A keyed join's equality fields per input, in key order (seals per key prune its buffers by them).
    join_keys: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    #: A user operator that declares ``key_seals = "close"``: it acts on seals per key itself
    #: (:meth:`~operators.base.Operator.on_key_seal`), so the analysis may seal it per key.
    closes_on_key_seals: bool = False


def scope_of(schema: Schema, arg: int = 0, prefix: str = "") -> dict[str, FieldRef]:
    """Field name -> position, for expressions over records of ``schema`` (``ts`` included)."""
    scope = {f"{prefix}ts": FieldRef(arg, 0, "int")}
    for position, (name, kind) in enumerate(zip(schema.names, schema.types), start=1):
        scope[f"{prefix}{name}"] = FieldRef(arg, position, kind)
    return scope


def milliseconds_to_us(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise QueryError(f"{where}: expected a positive number of milliseconds, got {value!r}")
    us = round(value * 1000)
    if abs(us - value * 1000) > 1e-6:
        raise QueryError(f"{where}: {value!r} ms is not a whole number of microseconds")
    return us


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise QueryError(f"{where}: expected a positive integer, got {value!r}")
    return value


def compile_filter(name: str, params: Mapping, inputs: list[Schema], where: str) -> Compiled:
    scope = scope_of(inputs[0])
    predicate = compile_expression(params.get("where"), scope, where=f"{where} (where)")
    select = compile_selection(params["where"], scope, where=f"{where} (where)")
    return Compiled(partial(Filter, predicate.function, select), inputs[0], Annotation(Path.CR), _identity(inputs[0]))


def compile_map(name: str, params: Mapping, inputs: list[Schema], where: str) -> Compiled:
    fields = params.get("set")
    if not isinstance(fields, Mapping) or not fields:
        raise QueryError(f"{where} (set): expected a table of field = expression, got {fields!r}")
    if "ts" in fields:
        raise QueryError(f"{where} (set): a map cannot set 'ts' (it would break the punctuation promise)")
    scope = scope_of(inputs[0])
    checked = [check_expression(_text(source, f"{where} (set.{field})"), scope, where=f"{where} (set.{field})")
               for field, source in fields.items()]
    # The output record is (input ts, *fields): the ts is copied unchecked (the "ts" kind is no field
    # type, so compile_tuple wraps nothing around it).  A Map never moves a record in time (§IV-A).
    ts = (ast.Subscript(ast.Name("_r0", ast.Load()), ast.Constant(0), ast.Load()), "ts")
    function = compile_tuple([ts, *checked], ("_r0",))
    schema = Schema(tuple(fields), tuple(kind for _, kind in checked))
    carries = {field: source.strip() for field, source in fields.items() if source.strip() in inputs[0].names}
    return Compiled(partial(Map, function, compile_tuples([ts, *checked], len(inputs[0]) + 1)), schema,
                    Annotation(Path.CR), carries)


def compile_union(name: str, params: Mapping, inputs: list[Schema], where: str) -> Compiled:
    if len(inputs) < 2:
        raise QueryError(f"{where} (inputs): a union needs at least two inputs, got {len(inputs)}")
    for i, schema in enumerate(inputs[1:], start=2):
        if schema != inputs[0]:
            raise QueryError(f"{where} (inputs): input {i} has fields {schema.as_dict()}, "
                             f"but input 1 has {inputs[0].as_dict()}; a union needs identical fields")
    return Compiled(partial(Union, len(inputs)), inputs[0], Annotation(Path.CR), _identity(inputs[0]))


def compile_join(name: str, params: Mapping, inputs: list[Schema], where: str, input_names: list[str]) -> Compiled:
    if len(inputs) != 2:
        raise QueryError(f"{where} (inputs): a join needs exactly two inputs [left, right], got {len(inputs)}")
    left, right = input_names
    if left == right:
        raise QueryError(f"{where} (inputs): a self-join needs two differently named inputs (add a map)")
    window_us = milliseconds_to_us(params.get("window_ms"), f"{where} (window_ms)")
    schema = Schema(tuple(f"{left}.{n}" for n in inputs[0].names) + tuple(f"{right}.{n}" for n in inputs[1].names),
                    inputs[0].types + inputs[1].types)
    on = params.get("on")
    # OW on its key and window (docs/explain.md): buffers are pruned only at punctuations, which
    # seal the window, so time punctuations make it replica-consistent without sorting (§IV-E).
    unkeyed = Annotation(Path.OW, frozenset({WINDOW}))
    if on is None:
        return Compiled(partial(Join, window_us, None), schema, unkeyed)
    scope = {**scope_of(inputs[0], 0, f"{left}."), **scope_of(inputs[1], 1, f"{right}.")}
    predicate = compile_expression(on, scope, where=f"{where} (on)", arity=2).function   # checks all of it
    keys = split_join_keys(on, scope)
    if keys is None:
        return Compiled(partial(Join, window_us, predicate), schema, unkeyed)
    # Equalities between the sides become buffer keys; only the rest is evaluated per pair (Alg. 2).
    residual = None if keys.residual is None else \
        compile_expression(keys.residual, scope, where=f"{where} (on)", arity=2).function
    factory = partial(KeyedJoin, window_us, (key_getter(keys.left), key_getter(keys.right)), residual)
    gate = frozenset({WINDOW, *_names(keys.left, inputs[0]), *_names(keys.right, inputs[1])})
    return Compiled(factory, schema, Annotation(Path.OW, gate),
                    join_keys=(tuple(_names(keys.left, inputs[0])), tuple(_names(keys.right, inputs[1]))))


_COMPUTE = re.compile(r"^\s*(\w+)\s*\(\s*([\w.]*)\s*\)\s*$")


def _summary(field: str, text: Any, schema: Schema, where: str) -> Summary:
    match = _COMPUTE.match(text) if isinstance(text, str) else None
    if match is None or match.group(1) not in FUNCTIONS:
        raise QueryError(f"{where} (compute.{field}): expected one of count(), sum(f), avg(f), min(f), max(f); "
                         f"got {text!r}")
    function, argument = match.groups()
    if function == "count":
        if argument:
            raise QueryError(f"{where} (compute.{field}): count() takes no field, got {text!r}")
        return Summary("count", None, None)
    if argument not in schema.names:
        raise QueryError(f"{where} (compute.{field}): unknown field {argument!r} "
                         f"(known fields: {', '.join(schema.names)})")
    kind = schema.types[schema.names.index(argument)]
    if function in ("sum", "avg") and kind not in ("int", "float"):
        raise QueryError(f"{where} (compute.{field}): {function}() needs an int or float field, {argument!r} is {kind}")
    return Summary(function, schema.index(argument), kind)


def compile_aggregate(name: str, params: Mapping, inputs: list[Schema], where: str) -> Compiled:
    schema = inputs[0]
    group_by = params.get("group_by", [])
    if not isinstance(group_by, list) or any(g not in schema.names for g in group_by):
        raise QueryError(f"{where} (group_by): expected a list of fields of {list(schema.names)}, got {group_by!r}")
    compute = params.get("compute")
    if not isinstance(compute, Mapping) or not compute:
        raise QueryError(f"{where} (compute): expected a table of name = \"count()\" / \"sum(f)\" …, got {compute!r}")
    summaries = tuple(_summary(field, text, schema, where) for field, text in compute.items())
    names = tuple(group_by) + tuple(compute)
    if len(set(names)) != len(names):
        raise QueryError(f"{where} (compute): output field names repeat: {list(names)}")
    output = Schema(names, tuple(schema.types[schema.names.index(g)] for g in group_by)
                    + tuple(s.output_type for s in summaries))
    group_indices = tuple(schema.index(g) for g in group_by)
    window = params.get("window")
    kind = window.get("kind") if isinstance(window, Mapping) else None
    if kind == "time":
        size = milliseconds_to_us(window.get("size_ms"), f"{where} (window.size_ms)")
        slide = milliseconds_to_us(window.get("slide_ms", window.get("size_ms")), f"{where} (window.slide_ms)")
        # OW on its groups and window: a window closes at the punctuation that seals it (§IV-F).
        return Compiled(partial(TimeWindowAggregate, size, slide, group_indices, summaries), output,
                        Annotation(Path.OW, frozenset({*group_by, WINDOW})), {g: g for g in group_by})
    if kind == "count":
        size = _positive_int(window.get("size"), f"{where} (window.size)")
        slide = _positive_int(window.get("slide", size), f"{where} (window.slide)")
        # OW on its groups alone: which records share a window depends on their order (Alg. 4).
        return Compiled(partial(CountWindowAggregate, size, slide, group_indices, summaries), output,
                        Annotation(Path.OW, frozenset(group_by) or None), {g: g for g in group_by})
    raise QueryError(f"{where} (window): expected {{kind = \"time\", size_ms, slide_ms}} or "
                     f"{{kind = \"count\", size, slide}}, got {window!r}")


def _identity(schema: Schema) -> dict[str, str]:
    return {name: name for name in schema.names}


def _names(positions, schema: Schema) -> list[str]:
    """The field names at record positions ``positions`` (1-based: position 0 is ts)."""
    return [TS if p == 0 else schema.names[p - 1] for p in positions]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise QueryError(f"{where}: expected an expression string, got {value!r}")
    return value


KINDS = {"filter": compile_filter, "map": compile_map, "union": compile_union,
         "join": compile_join, "aggregate": compile_aggregate}
