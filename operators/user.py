"""User-defined operators in a query file: ``kind = "python"`` (docs/queries.md).

A user operator is a subclass of :class:`~operators.base.Operator` importable as
``"package.module:Class"``; the query table names it (``class``), gives its keyword arguments
(``args``), its output fields (``fields``: the records it emits are ``(ts, *fields)``), and its
Blazes annotation (``label`` = CR / CW / OR / OW, ``gate`` = the fields whose partitions an
order-sensitive path never mixes; docs/explain.md).  A class may declare the same as class
attributes ``label`` and ``gate``; the query table wins.  An operator that declares nothing is
taken to be ``OW_*``, the most severe annotation: coordination analysis then sorts its input
where it can and says where that is not enough.

Seals per key (docs/explain.md, "Seal per key"): a user operator that declares ``key_seals =
"close"`` (query key or class attribute) promises to act on them — the engine then hands it each
seal ``(key, p)`` of a key its gate is compatible with through
:meth:`~operators.base.Operator.on_key_seal`, and it emits what that key's partition completes,
as a built-in keyed window does (Blazes §V-B1).  ``"ignore"`` (the default) leaves it to
whole-stream punctuations.

Replica consistency of the operator under its declaration is the user's to check, with
:func:`operators.testing.check_replica_consistency` (DESIGN.md §5).  This module is pure: it takes
the class itself.  Importing the user's module for a ``"module:Class"`` string is I/O, done by the
query file loader (:func:`engine.query_file.import_operator_class`), which hands its importer to
:class:`~operators.query.QueryBuilder`.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from replicast.operators.base import Operator
from replicast.operators.blazes import parse_annotation
from replicast.operators.compile import Compiled
from replicast.operators.errors import QueryError
from replicast.operators.record import FIELD_TYPES, Schema


def operator_class(value: Any, where: str) -> type[Operator]:
    """``value`` checked to be a subclass of :class:`~operators.base.Operator`."""
    if not isinstance(value, type) or not issubclass(value, Operator):
        raise QueryError(f"{where} (class): expected \"package.module:Class\", got {value!r}")
    return value


def refuse_import(path: str, where: str) -> type[Operator]:
    """The importer of a builder given none: pure code passes the class itself, not its import path."""
    raise QueryError(f"{where} (class): {path!r} names a module to import; load the query with "
                     f"replicast.engine.query_file (which imports it) or give the class itself")


def compile_python(name: str, params: Mapping, inputs: list[Schema], where: str) -> Compiled:
    cls = operator_class(params.get("class"), where)
    args = params.get("args", {})
    if not isinstance(args, Mapping):
        raise QueryError(f"{where} (args): expected a table of keyword arguments, got {args!r}")
    fields = params.get("fields")
    if not isinstance(fields, Mapping) or not fields or any(t not in FIELD_TYPES for t in fields.values()):
        raise QueryError(f"{where} (fields): expected a table of output field = type "
                         f"({', '.join(FIELD_TYPES)}), got {fields!r}")
    try:
        probe = cls(**args)
    except Exception as error:  # the user's constructor: any failure is a query error
        raise QueryError(f"{where} (args): {cls.__name__}(**{dict(args)!r}) failed: "
                         f"{type(error).__name__}: {error}") from None
    if probe.n_inputs != len(inputs):
        raise QueryError(f"{where} (inputs): {cls.__name__} has {probe.n_inputs} input(s), the query gives "
                         f"{len(inputs)}")
    input_fields = {n for schema in inputs for n in schema.names}
    annotation = parse_annotation(params.get("label", getattr(cls, "label", None)),
                                  params.get("gate", _listed(getattr(cls, "gate", None))), input_fields, where)
    closes = _key_seals(params.get("key_seals", getattr(cls, "key_seals", "ignore")), annotation, where)
    # Seals other than time punctuations (which the base class forwards) do not cross user code:
    # it may close on them (``key_seals = "close"``), but the analysis cannot see what it copies.
    return Compiled(partial(cls, **args), Schema.of(dict(fields)), annotation, closes_on_key_seals=closes)


#: What a user operator does with seals per key (``key_seals``): whether it closes on them.
KEY_SEALS = {"ignore": False, "close": True}


def _key_seals(value: Any, annotation, where: str) -> bool:
    """The ``key_seals`` declaration: ``"close"`` only on an order-sensitive path with a gate
    (a confluent one needs no coordination; ``OW_*`` mixes every partition, so no seal is compatible)."""
    if value not in KEY_SEALS:
        raise QueryError(f"{where} (key_seals): expected one of {', '.join(map(repr, KEY_SEALS))}, got {value!r}")
    if KEY_SEALS[value] and (not annotation.path.order_sensitive or not annotation.gate):
        raise QueryError(f"{where} (key_seals): 'close' needs an order-sensitive label (OR, OW) with a gate naming "
                         f"the sealed fields, got {annotation}")
    return KEY_SEALS[value]


def _listed(gate: Any) -> Any:
    return list(gate) if isinstance(gate, (tuple, frozenset, set)) else gate
