"""Finite values that overflow, ints wider than 64 bits, and the type of ``**`` (docs/architecture.md):
each is a deterministic evaluation error — the same records dropped and counted on every replica —
never an exception that escapes an operator, and never a record the wire cannot encode."""

from __future__ import annotations

import math

import msgpack
import pytest

from replicast.engine.query_file import parse_query
from replicast.operators.aggregate import TimeWindowAggregate
from replicast.operators.count_aggregate import CountWindowAggregate
from replicast.operators.errors import InputError
from replicast.operators.expressions import FieldRef, compile_expression
from replicast.operators.record import Schema, make_record
from replicast.operators.summaries import Summary

BIG = 1e308


def window(summary: Summary) -> TimeWindowAggregate:
    return TimeWindowAggregate(1_000, 1_000, (), (summary,))


def close(aggregate, records):
    aggregate.on_batch(0, records)
    return aggregate.on_punctuation(0, 10_000)[0]


def test_avg_of_values_whose_sum_overflows_is_exact():
    assert close(window(Summary("avg", 1, "float")), [(1, BIG), (2, BIG)]) == [(1_000, BIG)]
    assert close(window(Summary("avg", 1, "float")), [(1, BIG), (2, BIG), (3, -BIG)]) == [(1_000, BIG / 3)]


def test_a_sum_that_overflows_is_a_counted_drop_and_the_other_windows_survive():
    aggregate = TimeWindowAggregate(1_000, 1_000, (1,), (Summary("sum", 2, "float"),))
    out = close(aggregate, [(1, "a", BIG), (2, "a", BIG), (3, "b", 1.5)])
    assert out == [(1_000, "b", 1.5)]
    assert aggregate.errors == 1 and "sum" in aggregate.last_error


def test_the_result_does_not_depend_on_the_order_of_the_records():
    values = [BIG, BIG, -BIG, 1e292, -3.5, BIG / 7]
    results = {tuple(close(window(Summary("avg", 1, "float")), [(i + 1, v) for i, v in enumerate(order)]))
               for order in (values, values[::-1], sorted(values), values[2:] + values[:2])}
    assert len(results) == 1


def test_an_int_sum_wider_than_64_bits_is_a_counted_drop():
    aggregate = CountWindowAggregate(2, 2, (), (Summary("sum", 1, "int"),))
    assert aggregate.on_batch(0, [(1, 2**62), (2, 2**62)]) == []
    assert aggregate.errors == 1
    assert aggregate.on_batch(0, [(3, 2**62), (4, -2**62)]) == [(4, 0)]


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 10**30])
def test_input_ints_wider_than_64_bits_are_rejected(value):
    with pytest.raises(InputError, match="64-bit"):
        make_record(Schema.of({"n": "int"}), 1, {"n": value}, "stream 's'")


def test_an_int_too_large_for_a_float_field_is_rejected_not_raised():
    with pytest.raises(InputError, match="finite float"):
        make_record(Schema.of({"x": "float"}), 1, {"x": 10**400}, "stream 's'")


QUERY = """
[[streams]]
name = "s"
fields = {{ x = "int", f = "float" }}
[[operators]]
name = "m"
kind = "map"
input = "s"
set = {{ y = "{expression}" }}
[[applications]]
name = "app"
input = "m"
"""


def map_of(expression: str):
    query = parse_query(QUERY.format(expression=expression), "q.toml")
    return query.new_operator("m"), query.schemas["m"]


@pytest.mark.parametrize("expression, good", [("x * 10**30", (2, 0, 2.0)), ("round(f)", (2, 3, 2.0)),
                                              ("abs(x)", (2, 3, 2.0)), ("x ** 99", (2, 1, 2.0))])
def test_a_map_producing_an_int_wider_than_64_bits_drops_and_counts_the_record(expression, good):
    operator, schema = map_of(expression)
    assert schema.types == ("int",)
    out = operator.on_batch(0, [(1, -2**63, 1e300), good])
    assert operator.errors == 1, operator.last_error
    assert [r[0] for r in out] == [2]
    msgpack.packb(out)                       # what is emitted can be encoded


def test_an_int_power_is_typed_by_its_exponent():
    scope = {"x": FieldRef(0, 1, "int")}
    assert compile_expression("x ** 2", scope, where="q").type == "int"
    negative = compile_expression("x ** -1", scope, where="q")
    assert negative.type == "float" and negative.function((0, 4)) == 0.25
    variable = compile_expression("x ** x", scope, where="q")
    assert variable.type == "float" and variable.function((0, 2)) == 4.0
    operator, schema = map_of("x ** -1")
    assert schema.types == ("float",)
    assert operator.on_batch(0, [(1, 4, 0.0), (2, 0, 0.0)]) == [(1, 0.25)] and operator.errors == 1


def test_a_huge_power_is_an_error_at_once_not_a_hang():
    operator, _ = map_of("x ** x")
    assert operator.on_batch(0, [(1, 2**40, 0.0)]) == [] and operator.errors == 1
    assert math.isfinite(compile_expression("f ** 2", {"f": FieldRef(0, 1, "float")}, where="q").function((0, 3.0)))
