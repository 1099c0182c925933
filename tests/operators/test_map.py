"""Map (§IV-D)."""

from replicast.operators.compile import compile_map
from replicast.operators.record import Schema

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


def test_batch_path_equals_the_per_record_function_at_the_64_bit_edges():
    m = make(same="x", up="x + 1", down="x - 1", label="name").factory()
    edges = [(1, 2**63 - 1, "a"), (2, -2**63, "b"), (3, 0, "c"), (4, 2**63 - 2, "d"), (5, -2**63 + 1, "e")]
    expected = []
    for record in edges:
        try:
            expected.append(m.function(record))
        except ArithmeticError:
            pass
    assert m.on_batch(0, edges) == expected == [(3, 0, 1, -1, "c"), (4, 2**63 - 2, 2**63 - 1, 2**63 - 3, "d"),
                                                (5, -2**63 + 1, -2**63 + 2, -2**63, "e")]
    assert m.errors == 2
    ok = [r for r in edges if r[0] >= 3]
    assert m.apply(ok) == [m.function(r) for r in ok]      # the comprehension, no fallback
