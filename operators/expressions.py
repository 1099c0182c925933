"""Restricted expressions for query files: ``where``, ``set``, ``on`` and ``compute``.

An expression uses Python expression syntax restricted to: field names (dotted names such as
``ping.dst`` are field names too, as a join names its output fields), literals (int, float, str,
bool), arithmetic (``+ - * / // % **``, unary ``-``/``+``), comparisons, ``and``/``or``/``not``, and
calls to ``abs``, ``min``, ``max`` and ``round``.  Anything else is rejected with a
:class:`~operators.errors.QueryError` naming the place (file and operator, given by the caller)
and the offending token.

A checked expression is compiled to a Python function over record tuples, with field names
replaced by tuple indexing, so evaluation costs one native call per record.  Static types are
inferred so that a query's output schemas are known before anything runs.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import Callable, Mapping

from replicast.operators.errors import QueryError
from replicast.operators.record import normalise

FUNCTIONS: dict[str, Callable] = {"abs": abs, "min": min, "max": max, "round": round}
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def finite_float(value: object) -> float:
    """The value of a float-typed output field: a float, finite, and never ``-0.0``.

    ``max(1, 0.5)`` is typed float but returns the int 1, so the value is converted; ``-0.0`` and
    non-finite values would break bit-exact replica consistency (see :mod:`operators.record`).
    """
    result = normalise(float(value))
    if result - result == 0.0:          # false for inf and nan
        return result
    raise ArithmeticError(f"non-finite result {result}")

def int64(value: object) -> int:
    """The value of an int-typed output field: it must fit the wire's 64-bit ints (a Map can make
    wider ones: ``x * 10**30``, ``round(1e300)``); otherwise an evaluation error (the record is
    dropped and counted, the same on every replica)."""
    if _INT_MIN <= value <= _INT_MAX:
        return value
    raise ArithmeticError(f"int result of {value.bit_length()} bits does not fit in 64 bits")


#: Largest int power computed (bits); wider is an evaluation error (``2 ** 10**12`` takes minutes).
MAX_POWER_BITS = 4096


def power(base: object, exponent: object) -> object:
    """``base ** exponent`` without the hang: an int power of more than :data:`MAX_POWER_BITS` bits
    is an evaluation error before it is computed (output fields must fit 64 bits anyway)."""
    if type(base) in (int, bool) and type(exponent) in (int, bool) and exponent > 0 and abs(base) > 1 \
            and (abs(base).bit_length() - 1) * exponent > MAX_POWER_BITS:
        raise ArithmeticError(f"int power with exponent {exponent} is wider than {MAX_POWER_BITS} bits")
    return base ** exponent


def float_power(base: object, exponent: object) -> float:
    """``**`` of two ints whose exponent may be negative: typed float (``2 ** -1`` is 0.5)."""
    return float(power(base, exponent))


_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_NUMERIC = ("int", "float", "bool")


@dataclass(frozen=True)
class FieldRef:
    """Where a field lives: argument ``arg`` of the compiled function, tuple position ``index``."""

    arg: int
    index: int
    type: str


Scope = Mapping[str, FieldRef]


def dotted_name(node: ast.AST) -> str | None:
    """``ping.dst`` for ``Attribute(Name('ping'), 'dst')``; None for anything that is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _describe(node: ast.AST) -> str:
    names = {"IfExp": "conditional expression", "Subscript": "subscript", "Lambda": "lambda",
             "ListComp": "comprehension", "GeneratorExp": "comprehension", "JoinedStr": "f-string"}
    return names.get(type(node).__name__, type(node).__name__.lower())


class _Checker:
    """Validates an expression tree, infers its type and rewrites field names to tuple indexing."""

    def __init__(self, source: str, scope: Scope, where: str, arg_names: tuple[str, ...]):
        self.source, self.scope, self.where, self.arg_names = source, scope, where, arg_names

    def fail(self, node: ast.AST, problem: str) -> QueryError:
        token = ast.get_source_segment(self.source, node) or type(node).__name__
        return QueryError(f"{self.where}: {problem}: {token!r} in expression {self.source!r}")

    def visit(self, node: ast.AST) -> tuple[ast.AST, str]:
        name = dotted_name(node)
        if name is not None:
            return self._field(node, name)
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise self.fail(node, f"{_describe(node)} is not allowed")
        return method(node)

    def _field(self, node: ast.AST, name: str) -> tuple[ast.AST, str]:
        if name in ("True", "False"):
            return ast.Constant(name == "True"), "bool"
        ref = self.scope.get(name)
        if ref is None:
            known = ", ".join(sorted(self.scope)) or "none"
            raise self.fail(node, f"unknown field (known fields: {known})")
        load = ast.Name(self.arg_names[ref.arg], ast.Load())
        return ast.Subscript(load, ast.Constant(ref.index), ast.Load()), ref.type

    def visit_Constant(self, node: ast.Constant) -> tuple[ast.AST, str]:
        kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(node.value))
        if kind is None:
            raise self.fail(node, "only int, float, str and bool literals are allowed")
        return node, kind

    def visit_BoolOp(self, node: ast.BoolOp) -> tuple[ast.AST, str]:
        values = [self.visit(v)[0] for v in node.values]
        return ast.BoolOp(node.op, values), "bool"

    def visit_UnaryOp(self, node: ast.UnaryOp) -> tuple[ast.AST, str]:
        operand, kind = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return ast.UnaryOp(node.op, operand), "bool"
        if isinstance(node.op, (ast.USub, ast.UAdd)) and kind in _NUMERIC:
            return ast.UnaryOp(node.op, operand), "int" if kind == "bool" else kind
        raise self.fail(node, f"operator not allowed on {kind}")

    def visit_BinOp(self, node: ast.BinOp) -> tuple[ast.AST, str]:
        if not isinstance(node.op, _ARITHMETIC):
            raise self.fail(node, "only + - * / // % ** are allowed")
        left, lkind = self.visit(node.left)
        right, rkind = self.visit(node.right)
        kind = self._arithmetic_type(node, node.op, lkind, rkind)
        if isinstance(node.op, ast.Pow):
            # An int power is an int only for an exponent known to be >= 0 (a literal); otherwise
            # it may be a float (2 ** -1), so it is typed float and evaluated as one.
            literal = isinstance(node.right, ast.Constant) and type(node.right.value) is int and node.right.value >= 0
            if kind == "int" and not literal:
                return ast.Call(ast.Name("_float_power", ast.Load()), [left, right], []), "float"
            return ast.Call(ast.Name("_power", ast.Load()), [left, right], []), kind
        return ast.BinOp(left, node.op, right), kind

    def _arithmetic_type(self, node: ast.AST, op: ast.operator, lkind: str, rkind: str) -> str:
        if lkind == rkind == "str" and isinstance(op, ast.Add):
            return "str"
        if lkind not in _NUMERIC or rkind not in _NUMERIC:
            raise self.fail(node, f"arithmetic on {lkind} and {rkind}")
        if isinstance(op, ast.Div) or "float" in (lkind, rkind):
            return "float"
        return "int"

    def visit_Compare(self, node: ast.Compare) -> tuple[ast.AST, str]:
        bad = [op for op in node.ops if not isinstance(op, _COMPARISONS)]
        if bad:
            raise self.fail(node, "only == != < <= > >= comparisons are allowed")
        left = self.visit(node.left)[0]
        comparators = [self.visit(c)[0] for c in node.comparators]
        return ast.Compare(left, node.ops, comparators), "bool"

    def visit_Call(self, node: ast.Call) -> tuple[ast.AST, str]:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            raise self.fail(node.func, f"call not allowed (allowed functions: {', '.join(FUNCTIONS)})")
        if node.keywords or not node.args:
            raise self.fail(node, f"{name}() takes positional arguments only")
        args = [self.visit(a) for a in node.args]
        kinds = [kind for _, kind in args]
        func = ast.Name(name, ast.Load())
        return ast.Call(func, [a for a, _ in args], []), self._call_type(node, name, kinds)

    def _call_type(self, node: ast.AST, name: str, kinds: list[str]) -> str:
        if any(kind not in _NUMERIC for kind in kinds) and not (name in ("min", "max") and set(kinds) == {"str"}):
            raise self.fail(node, f"{name}() of {', '.join(kinds)}")
        if name == "round":
            return "int" if len(kinds) == 1 else kinds[0]
        if name == "abs":
            return kinds[0]
        return "float" if "float" in kinds else kinds[0]


@dataclass(frozen=True)
class Compiled:
    """A checked expression: ``function(*records)`` evaluates it; ``type`` is its inferred type."""

    source: str
    function: Callable
    type: str


def compile_selection(source: str, scope: Scope, *, where: str) -> Callable[[list], list]:
    """A function of a list of records returning those for which ``source`` is true, in order.

    The expression is inlined in one list comprehension, so a batch costs no Python call per
    record (a third less than ``filter`` with a compiled predicate; docs/performance.md).  It raises on the
    first record whose evaluation fails: callers then evaluate record by record to count errors.

    >>> from operators.expressions import FieldRef, compile_selection
    >>> compile_selection("x > 1", {"x": FieldRef(0, 1, "int")}, where="example")([(0, 1), (1, 2), (2, 3)])
    [(1, 2), (2, 3)]
    """
    body, _ = check_expression(source, scope, where=where)
    record, batch = ast.Name("_r0", ast.Store()), ast.Name("_batch", ast.Load())
    selection = ast.ListComp(ast.Name("_r0", ast.Load()), [ast.comprehension(record, batch, [body], 0)])
    return _to_function(selection, ("_batch",))


def compile_expression(source: str, scope: Scope, *, where: str, arity: int = 1) -> Compiled:
    """Check ``source`` against ``scope`` and compile it to a function of ``arity`` record tuples.

    ``where`` names the place for error messages, e.g. ``"fig1.toml: operator 'slow' (where)"``.

    >>> from operators.expressions import FieldRef, compile_expression
    >>> e = compile_expression("x * 2 > 3", {"x": FieldRef(0, 1, "int")}, where="example")
    >>> e.function((0, 2)), e.type
    (True, 'bool')
    """
    arg_names = tuple(f"_r{i}" for i in range(arity))
    body, kind = check_expression(source, scope, where=where, arity=arity)
    return Compiled(source, _to_function(body, arg_names), kind)


def compile_tuple(parts: list[tuple[ast.AST, str]], arg_names: tuple[str, ...]) -> Callable:
    """A function building the tuple of ``parts`` (checked trees with their types).

    Computed float-typed parts go through :func:`finite_float`, so the tuple's floats are exact and
    finite; computed int-typed parts are checked to fit the wire's 64 bits (:func:`int64`).  A plain
    field reference is copied as it is: a record's fields already hold such values (inputs are
    checked, operators' outputs too), so checking them again changes nothing.
    """
    return _to_function(_tuple(parts), arg_names)


def compile_tuples(parts: list[tuple[ast.AST, str]], width: int) -> Callable[[list], list]:
    """A function of a list of records of ``width`` fields (``ts`` included) returning the tuple of
    ``parts`` (trees over ``_r0``) for each, in order: :func:`compile_tuple` inlined in one list
    comprehension that unpacks each record into locals, so a batch costs no Python call and no
    indexing per record (a quarter less than ``map`` over the compiled function; docs/performance.md).  It
    raises on the first record whose evaluation fails: callers then evaluate record by record (with
    :func:`compile_tuple`'s function) to count errors."""
    fields = [f"_f{i}" for i in range(width)]
    element = _Unpacked().visit(_tuple([(copy.deepcopy(tree), kind) for tree, kind in parts]))
    target = ast.Tuple([ast.Name(name, ast.Store()) for name in fields], ast.Store())
    batch = ast.Name("_batch", ast.Load())
    return _to_function(ast.ListComp(element, [ast.comprehension(target, batch, [], 0)]), ("_batch",))


class _Unpacked(ast.NodeTransformer):
    """``_r0[i]`` becomes the local ``_f<i>`` of :func:`compile_tuples`' comprehension."""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        return ast.Name(f"_f{node.slice.value}", ast.Load())


def _is_field(tree: ast.AST) -> bool:
    """Whether a checked tree is a plain field reference (only fields become subscripts)."""
    return isinstance(tree, ast.Subscript)


def _tuple(parts: list[tuple[ast.AST, str]]) -> ast.Tuple:
    elements = []
    for i, (tree, kind) in enumerate(parts):
        if _is_field(tree) or kind not in ("int", "float"):
            elements.append(tree)
        elif kind == "float":
            elements.append(ast.Call(ast.Name("_finite_float", ast.Load()), [tree], []))
        else:
            # _int64 inlined: (v if MIN <= (v := tree) <= MAX else _int64(v)), which raises.  A
            # comparison costs a fifth of the call it replaces on the hot path.
            value = f"_v{i}"
            store, load = ast.Name(value, ast.Store()), ast.Name(value, ast.Load())
            test = ast.Compare(ast.Constant(_INT_MIN), [ast.LtE(), ast.LtE()],
                               [ast.NamedExpr(store, tree), ast.Constant(_INT_MAX)])
            fail = ast.Call(ast.Name("_int64", ast.Load()), [ast.Name(value, ast.Load())], [])
            elements.append(ast.IfExp(test, load, fail))
    return ast.Tuple(elements, ast.Load())


def check_expression(source: str, scope: Scope, *, where: str, arity: int = 1) -> tuple[ast.AST, str]:
    """Like :func:`compile_expression` but returns the rewritten tree, for building larger functions."""
    if not isinstance(source, str) or not source.strip():
        raise QueryError(f"{where}: expected an expression string, got {source!r}")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as error:
        raise QueryError(f"{where}: invalid expression {source!r}: {error.msg} at column {error.offset}") from None
    return _Checker(source.strip(), scope, where, tuple(f"_r{i}" for i in range(arity))).visit(tree.body)


def _to_function(body: ast.AST, arg_names: tuple[str, ...]) -> Callable:
    args = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in arg_names], kwonlyargs=[], kw_defaults=[], defaults=[])
    module = ast.Expression(ast.Lambda(args, body))
    ast.fix_missing_locations(module)
    # Only the four whitelisted functions are reachable: builtins are removed.
    namespace = {"__builtins__": {}, "_finite_float": finite_float, "_int64": int64, "_power": power,
                 "_float_power": float_power, **FUNCTIONS}
    return eval(compile(module, "<replicast expression>", "eval"), namespace)
