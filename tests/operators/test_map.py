"""Map (§IV-D)."""

from operators.compile import compile_map
from operators.record import Schema

SCHEMA = Schema.of({"x": "int", "name": "str"})


def make(**fields):
    return compile_map("m", {"set": fields}, [SCHEMA], "test")


def test_computes_fields_in_table_order_and_keeps_ts():
    compiled = make(double="x * 2", label="name + '!'", half="x / 2")
    assert compiled.schema == Schema(("double", "label", "half"), ("int", "str", "float"))
    assert compiled.factory().on_batch(0, [(5, 3, "a")]) == [(5, 6, "a!", 1.5)]


def test_negative_zero_is_normalised():
    (record,) = make(z="x * -0.0").factory().on_batch(0, [(1, 1, "a")])
    assert str(record[1]) == "0.0"


def test_non_finite_and_failing_results_are_counted_errors():
    m = make(r="1 / x", big="10.0 ** x").factory()
    assert m.on_batch(0, [(1, 0, "a"), (2, 400, "b"), (3, 2, "c")]) == [(3, 0.5, 100.0)]
    assert m.errors == 2
