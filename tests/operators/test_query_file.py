"""Query files: TOML and the builder give the same query; mistakes are named precisely."""

from pathlib import Path

import pytest

from replicast.engine.query_file import load_query, parse_query
from replicast.operators.errors import QueryError
from replicast.operators.query import QueryBuilder

ROOT = Path(__file__).resolve().parents[2]

SMALL = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[streams]]
name = "ping"
fields = { src = "str", dst = "str", rtt_ms = "float" }

[[operators]]
name = "j"
kind = "join"
inputs = ["cpu", "ping"]
window_ms = 500
on = "cpu.server == ping.dst"

[[operators]]
name = "scaled"
kind = "map"
input = "j"
set = { server = "cpu.server", slowness = "ping.rtt_ms * cpu.load" }

[[operators]]
name = "stats"
kind = "aggregate"
input = "scaled"
group_by = ["server"]
window = { kind = "time", size_ms = 1000, slide_ms = 500 }
compute = { n = "count()", total = "sum(slowness)", worst = "max(slowness)" }

[[applications]]
name = "app"
input = "stats"
ordered = true
"""


def build_small():
    q = QueryBuilder("<text>")
    q.stream("cpu", {"server": "str", "load": "float"})
    q.stream("ping", {"src": "str", "dst": "str", "rtt_ms": "float"})
    q.join("j", ["cpu", "ping"], window_ms=500, on="cpu.server == ping.dst")
    q.map("scaled", "j", set={"server": "cpu.server", "slowness": "ping.rtt_ms * cpu.load"})
    q.aggregate("stats", "scaled", group_by=["server"], window={"kind": "time", "size_ms": 1000, "slide_ms": 500},
                compute={"n": "count()", "total": "sum(slowness)", "worst": "max(slowness)"})
    q.application("app", "stats", ordered=True)
    return q.build()


def test_file_and_builder_build_the_same_query():
    from_file, from_code = parse_query(SMALL, "<text>"), build_small()
    assert from_file == from_code
    assert from_file.schemas["j"].names == ("cpu.server", "cpu.load", "ping.src", "ping.dst", "ping.rtt_ms")
    assert from_file.schemas["stats"].as_dict() == {"server": "str", "n": "int", "total": "float", "worst": "float"}


def test_bundled_fig1_query_loads():
    query = load_query(ROOT / "examples" / "fig1.toml")
    assert set(query.applications) == {"alerts", "rtt_stats", "load_trends"}
    assert query.order_sensitive("load_trend") and not query.order_sensitive("correlate")


@pytest.mark.parametrize("change, expected", [
    (("kind = \"map\"", "kind = \"mapp\""), "[[operators]] #2 (scaled): unknown kind 'mapp'"),
    (("window_ms = 500", "window_ms = -5"), "operator 'j' (window_ms): expected a positive number of milliseconds"),
    (("cpu.server == ping.dst", "cpu.server == ping.nope"), "operator 'j' (on): unknown field"),
    (("sum(slowness)", "median(slowness)"), "operator 'stats' (compute.total): expected one of count()"),
    (("input = \"stats\"", "input = \"nothing\""), "application 'app' (input): unknown stream or operator 'nothing'"),
    (("group_by = [\"server\"]", "group_by = [\"region\"]"), "operator 'stats' (group_by)"),
    (("load = \"float\"", "load = \"double\""), "field 'load': unknown type 'double'"),
    (("ordered = true", "ordered = true\ncolour = 3"), "[[applications]] #1: unknown key(s) ['colour']"),
    (("slowness = \"ping.rtt_ms * cpu.load\"", "slowness = \"os.system(1)\""), "call not allowed"),
    (("name = \"scaled\"", "name = \"j\""), "operator name 'j' is already used"),
    (("[[streams]]\nname = \"cpu\"", "[streams]\nname = \"cpu\""), "invalid TOML"),
])
def test_errors_name_file_operator_and_problem(change, expected):
    text = SMALL.replace(*change, 1)
    assert text != SMALL
    with pytest.raises(QueryError) as error:
        parse_query(text, "q.toml")
    assert str(error.value).startswith("q.toml")
    assert expected in str(error.value)


def test_cycles_are_reported():
    q = QueryBuilder("c.toml")
    q.stream("s", {"x": "int"})
    q.union("a", ["s", "b"])
    q.union("b", ["s", "a"])
    q.application("app", "a")
    with pytest.raises(QueryError, match="cycle"):
        q.build()


def test_union_needs_identical_fields():
    q = QueryBuilder("u.toml")
    q.stream("s", {"x": "int"})
    q.stream("t", {"x": "float"})
    q.union("u", ["s", "t"])
    q.application("app", "u")
    with pytest.raises(QueryError, match="identical fields"):
        q.build()


@pytest.mark.parametrize("change, expected", [
    (("window_ms = 500", "window_ms = 500\nwhere = \"x\""), "[[operators]] #1 (j): unknown key(s) ['where'] (allowed: "),
    (("ordered = true", "ordered = true\nfoo = 1\nbar = 2"), "[[applications]] #1: unknown key(s) ['bar', 'foo']"),
    (("name = \"cpu\"", "nam = \"cpu\""), "[[streams]] #1: unknown key(s) ['nam'] (allowed: ['fields', 'name', 'seal'])"),
    (("name = \"cpu\"\n", ""), "[[streams]] #1: missing key 'name'"),
    (("[[streams]]\nname = \"cpu\"", "junk = 1\n[[streams]]\nname = \"cpu\""), "q.toml: unknown key(s) ['junk'] (allowed: "
                                                                            "['applications', 'operators', 'streams'])"),
    (("[[applications]]", "[[applications]]\nname = \"x\"\n[[applications]]"), "[[applications]] #1: missing key 'input'"),
])
def test_the_keys_of_each_table_are_its_schemas(change, expected):
    """Which keys a table may hold is its msgspec schema (one per operator kind): one line naming the table."""
    text = SMALL.replace(*change, 1)
    assert text != SMALL
    with pytest.raises(QueryError) as error:
        parse_query(text, "q.toml")
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)
