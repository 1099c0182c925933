"""Filter (§IV-D)."""

from replicast.operators.compile import compile_filter, scope_of
from replicast.operators.expressions import compile_expression
from replicast.operators.filter import Filter
from replicast.operators.record import Schema

SCHEMA = Schema.of({"x": "int", "y": "int"})


def make(where):
    """As a query compiles it: a whole batch in one comprehension, record by record after an error."""
    return compile_filter("f", {"where": where}, [SCHEMA], "test").factory()


def test_a_predicate_alone_filters_the_same():
    f = Filter(compile_expression("x > 1 and y != 0", scope_of(SCHEMA), where="test").function)
    assert f.on_batch(0, [(1, 2, 1), (2, 1, 0), (3, 0, 5)]) == [(1, 2, 1)]


def test_passes_matching_records_only():
    f = make("x > 1 and y != 0")
    assert f.on_batch(0, [(1, 2, 1), (2, 1, 0), (3, 0, 5)]) == [(1, 2, 1)]


def test_evaluation_errors_drop_and_count_the_record():
    f = make("x / y > 1")
    assert f.on_batch(0, [(1, 4, 2), (2, 4, 0), (3, 9, 3)]) == [(1, 4, 2), (3, 9, 3)]
    assert f.errors == 1 and "ZeroDivisionError" in f.last_error


def test_forwards_punctuation_immediately():
    f = make("x > 0")
    assert f.on_punctuation(0, 7) == ([], 7)
    assert f.on_punctuation(0, 5) == ([], None)     # not an advance
