"""Finds the equalities between a join's two sides in its ``on`` expression (§IV-E; docs/performance.md).

``on = "a.k == b.k and a.v < b.v"`` is the conjunction of an equality between a left field and a
right field and a *residual* predicate.  Every output pair satisfies all such equalities, so a join
can index each side's buffer by those fields and evaluate only the residual on the pairs whose
keys are equal (:class:`~operators.keyed_join.KeyedJoin`).

Rules:

1. Only top-level conjuncts count (``A and (B and C)`` has three): under ``or``/``not`` an equality
   does not constrain every output pair.
2. Only ``left_field == right_field`` with plain field names on both sides, one of each input (either
   order), becomes a key.  Computed operands (``a.k + 1 == b.k``) stay in the residual.  Records never
   hold NaN (:mod:`operators.record`: inputs are checked finite, float expressions go through
   ``finite_float``), and for the int, float, bool and str values records do hold, ``x == y``
   exactly when a dict finds ``y`` under ``x`` (equal numbers hash equal), so a dict lookup by key
   selects the same pairs as evaluating the equalities.
3. The residual is the remaining conjuncts, in their order, joined by ``and``: the pair passes when
   the keys are equal and the residual is true, which is when the whole expression is true.
   Evaluation errors can only come from the residual, so a pair the whole expression dropped with
   an error is dropped by the residual too (or never considered, when its keys differ).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from replicast.operators.expressions import FieldRef, Scope, dotted_name


@dataclass(frozen=True)
class JoinKeys:
    """Key positions of each side (``left[i]`` must equal ``right[i]``) and the residual source (or None)."""

    left: tuple[int, ...]
    right: tuple[int, ...]
    residual: str | None


def split_join_keys(source: str, scope: Scope) -> JoinKeys | None:
    """The key equalities and residual of an ``on`` expression already checked against ``scope``; None without keys.

    >>> from operators.expressions import FieldRef
    >>> scope = {"a.k": FieldRef(0, 1, "int"), "a.v": FieldRef(0, 2, "float"),
    ...          "b.k": FieldRef(1, 1, "int"), "b.v": FieldRef(1, 2, "float")}
    >>> split_join_keys("b.k == a.k and a.v < b.v", scope)
    JoinKeys(left=(1,), right=(1,), residual='a.v < b.v')
    """
    conjuncts = _conjuncts(ast.parse(source.strip(), mode="eval").body)
    pairs, rest = [], []
    for node in conjuncts:
        pair = _side_equality(node, scope)
        (rest if pair is None else pairs).append(node if pair is None else pair)
    if not pairs:
        return None
    residual = None
    if rest:
        residual = ast.unparse(rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest))
    return JoinKeys(tuple(left for left, _ in pairs), tuple(right for _, right in pairs), residual)


def _conjuncts(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [c for value in node.values for c in _conjuncts(value)]
    return [node]


def _side_equality(node: ast.AST, scope: Scope) -> tuple[int, int] | None:
    """(left position, right position) if ``node`` is ``field == field`` across the two sides."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return None
    refs = [_field(node.left, scope), _field(node.comparators[0], scope)]
    if None in refs or refs[0].arg == refs[1].arg:
        return None
    left, right = sorted(refs, key=lambda ref: ref.arg)
    return left.index, right.index


def _field(node: ast.AST, scope: Scope) -> FieldRef | None:
    name = dotted_name(node)
    return None if name is None else scope.get(name)
