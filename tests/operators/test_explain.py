"""Coordination analysis (operators/blazes.py, operators/coordination.py): annotations, Blazes'
rules, the planner reading the verdict, and errors naming the operator (docs/explain.md)."""

from pathlib import Path

import pytest

from replicast.engine.query_file import load_query, parse_query
from replicast.examples import example_path
from replicast.operators.blazes import Label, compatible
from replicast.operators.coordination import Coordination, analyse
from replicast.operators.coordination_cost import first_arrivals, waits
from replicast.operators.errors import QueryError
from replicast.operators.plan import ReplicaId, plan

CORPUS = sorted((Path(__file__).parent / "data" / "explain").glob("*.toml"))

CPU = '[[streams]]\nname = "{}"\nfields = {{ server = "str", load = "float" }}\n{}\n'
U = "replicast.examples.user_operators:"


def cpu(name, seal=""):
    return CPU.format(name, f"seal = {seal}" if seal else "")


def test_built_in_operators_carry_their_blazes_annotations():
    analysis = analyse(load_query(example_path("fig1.toml")), 2)
    got = {name: (str(r.annotation), r.coordination) for name, r in analysis.nodes.items() if r.annotation}
    assert got == {
        "load": ("CR", Coordination.NONE), "ping": ("CR", Coordination.NONE),
        "correlate": ("OW_{dst,server,window}", Coordination.SEAL_PUNCTUATION),
        "hot": ("CR", Coordination.NONE),
        "rtt_by_dst": ("OW_{dst,window}", Coordination.SEAL_PUNCTUATION),
        "load_trend": ("OW_{server}", Coordination.SORT),
        "alerts": ("OR_*", Coordination.SORT), "rtt_stats": ("CR", Coordination.NONE),
        "load_trends": ("OR_*", Coordination.SORT),
    }
    assert analysis.agrees and not analysis.diverging()
    assert all(str(e.label) == "Seal_ts" and e.rep for e in analysis.edges)


@pytest.mark.parametrize("path", CORPUS + [example_path("fig1.toml"), example_path("explain-user-operators.toml")],
                         ids=lambda p: p.stem)
def test_the_planner_sorts_exactly_where_the_analysis_says(path):
    query = load_query(path)
    physical = plan(query, 2)
    analysis = analyse(query, 2)
    for name in (*query.operators, *query.applications):
        assert physical.sorts_input(name) == (analysis.nodes[name].coordination is Coordination.SORT)
        assert query.order_sensitive(name) == physical.sorts_input(name)


def test_what_sorts_is_what_sorted_before_for_built_ins():
    """Built-ins: count windows and ordered applications sort; time windows and joins do not."""
    query = load_query(example_path("fig1.toml"))
    sorting = {n for n in (*query.operators, *query.applications) if plan(query, 1).sorts_input(n)}
    assert sorting == {"load_trend", "alerts", "load_trends"}


def _count_window(coordination=""):
    return parse_query(cpu("a") + cpu("b") + '''
[[operators]]
name = "all"
kind = "union"
inputs = ["a", "b"]

[[operators]]
name = "trend"
kind = "aggregate"
input = "all"
group_by = ["server"]
window = { kind = "count", size = 3 }
compute = { peak = "max(load)" }
''' + coordination + '''
[[operators]]
name = "high"
kind = "filter"
input = "trend"
where = "peak > 0.5"

[[applications]]
name = "out"
input = "high"
''', "count.toml")


def test_declined_sorting_is_taint_then_diverge_with_rep_and_run_without():
    query = _count_window('coordination = "none"')
    assert not plan(query, 2).sorts_input("trend")
    replicated, single = analyse(query, 2), analyse(query, 1)
    assert replicated.nodes["trend"].output.label is Label.DIVERGE
    assert single.nodes["trend"].output.label is Label.RUN
    assert any("(4)  Taint" in step for step in replicated.nodes["trend"].steps)
    # (p): a confluent filter keeps the label it is given, and nothing downstream is blamed.
    assert replicated.nodes["high"].output.label is Label.DIVERGE and replicated.diverging() == ["trend"]
    assert "sort at punctuation" in replicated.nodes["trend"].remedy
    assert analyse(_count_window(), 2).agrees


def _race(then=""):
    return parse_query(cpu("cpu") + '''
[[streams]]
name = "ping"
fields = { src = "str", dst = "str", rtt_ms = "float" }

[[operators]]
name = "latest"
kind = "python"
inputs = ["cpu", "ping"]
class = "''' + U + '''LatestLoad"
fields = { dst = "str", rtt_ms = "float", load = "float" }
''' + then + '''
[[applications]]
name = "out"
input = "''' + ("agg" if then else "latest") + '"\n', "race.toml")


def test_a_race_between_inputs_is_ndread_then_inst_and_rule_3_makes_a_window_diverge():
    analysis = analyse(_race(), 2)
    latest = analysis.nodes["latest"]
    assert str(latest.annotation) == "OR_{dst}" and latest.coordination is Coordination.SORT
    assert latest.output.label is Label.INST and "(1)  NDRead_{dst}" in latest.steps[0]
    assert "deterministic" in latest.remedy and "interleaving" in latest.problem
    assert analyse(_race(), 1).nodes["latest"].output.label is Label.RUN
    chained = analyse(_race('''
[[operators]]
name = "agg"
kind = "aggregate"
input = "latest"
group_by = ["dst"]
window = { kind = "time", size_ms = 1000 }
compute = { n = "count()" }
'''), 2)
    agg = chained.nodes["agg"]
    assert agg.output.label is Label.DIVERGE and any("(3)  Taint" in s for s in agg.steps)
    assert "fix latest first" in agg.remedy


def test_seals_survive_identity_maps_and_unions_whose_every_input_seals():
    text = cpu("a", '["server"]') + cpu("b", '["server"]') + cpu("c") + '''
[[operators]]
name = "ab"
kind = "union"
inputs = ["a", "b"]

[[operators]]
name = "abc"
kind = "union"
inputs = ["a", "b", "c"]

[[operators]]
name = "renamed"
kind = "map"
input = "ab"
set = { host = "server", load = "load" }

[[operators]]
name = "computed"
kind = "map"
input = "ab"
set = { server = "server + '!'", load = "load" }

[[operators]]
name = "agg"
kind = "aggregate"
input = "renamed"
group_by = ["host"]
window = { kind = "time", size_ms = 1000 }
compute = { n = "count()" }

[[applications]]
name = "out"
input = "agg"
'''
    for name in ("abc", "computed"):
        text += f'\n[[applications]]\nname = "out_{name}"\ninput = "{name}"\n'
    analysis = analyse(parse_query(text, "seals.toml"), 2)
    labels = {name: str(r.output) for name, r in analysis.nodes.items()}
    assert labels["a"] == "Seal_server, Seal_ts" and labels["ab"] == "Seal_server, Seal_ts"
    assert labels["abc"] == "Seal_ts" and labels["computed"] == "Seal_ts"
    assert labels["renamed"] == "Seal_host, Seal_ts"
    agg = analysis.nodes["agg"]
    assert agg.coordination is Coordination.SEAL_KEY and agg.key_seal == frozenset({"host"})   # the engine seals it


def test_compatible_is_blazes_predicate_with_ts_sealing_windows():
    assert compatible(frozenset({"server", "window"}), frozenset({"ts"}))
    assert compatible(frozenset({"server"}), frozenset({"server"}))
    assert not compatible(frozenset({"server"}), frozenset({"ts"}))
    assert not compatible(None, frozenset({"server"}))            # OW_*: no seal is compatible
    assert not compatible(frozenset({"server"}), frozenset({"server", "site"}))


def test_an_undeclared_user_operator_is_taken_as_the_most_severe():
    query = parse_query(cpu("cpu") + f'''
[[operators]]
name = "nth"
kind = "python"
input = "cpu"
class = "{U}EveryNth"
fields = {{ server = "str", load = "float" }}

[[applications]]
name = "out"
input = "nth"
''')
    report = analyse(query, 2).nodes["nth"]
    assert str(report.annotation) == "OW_*" and not report.annotation.declared
    assert report.coordination is Coordination.SORT and report.output.label is Label.SEAL


BAD = [
    (cpu("cpu", '["host"]'), "stream 'cpu' (seal)"),
    (cpu("cpu") + '[[operators]]\nname = "f"\nkind = "filter"\ninput = "cpu"\nwhere = "load > 1"\n'
     'coordination = "none"\n', "(f): unknown key(s) ['coordination']"),
    (cpu("cpu") + '[[operators]]\nname = "w"\nkind = "aggregate"\ninput = "cpu"\n'
     'window = { kind = "time", size_ms = 5 }\ncompute = { n = "count()" }\ncoordination = "none"\n',
     "operator 'w' (coordination): it is OW_{window}"),
    (cpu("cpu") + f'[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "{U}Scale"\n'
     'fields = { server = "str", load = "float" }\ncoordination = "none"\n', "operator 'u' (coordination): it is CR"),
    (cpu("cpu") + '[[operators]]\nname = "t"\nkind = "aggregate"\ninput = "cpu"\nwindow = { kind = "count", size = 2 }\n'
     'compute = { n = "count()" }\ncoordination = "never"\n', "operator 't' (coordination)"),
    (cpu("cpu") + f'[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "{U}Rises"\n'
     'fields = { server = "str", load = "float" }\nlabel = "XW"\n', "operator 'u' (label)"),
    (cpu("cpu") + f'[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "{U}Rises"\n'
     'fields = { server = "str", load = "float" }\ngate = ["host"]\n', "operator 'u' (gate)"),
    (cpu("cpu") + f'[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "{U}Scale"\n'
     'fields = { server = "str", load = "float" }\nlabel = "CR"\ngate = ["server"]\n', "operator 'u' (gate)"),
    (cpu("cpu") + '[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "no.such:Op"\n'
     'fields = { server = "str" }\n', "operator 'u' (class): cannot import"),
    (cpu("cpu") + f'[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\nclass = "{U}LatestLoad"\n'
     'fields = { server = "str" }\n', "operator 'u' (inputs): LatestLoad has 2 input(s)"),
    (cpu("cpu") + '[[operators]]\nname = "u"\nkind = "python"\ninput = "cpu"\n'
     'class = "replicast.operators.record:Schema"\nfields = { server = "str" }\n', "is not a subclass"),
]


@pytest.mark.parametrize("text,fragment", BAD)
def test_a_query_it_cannot_analyse_names_the_operator_and_why(text, fragment):
    with pytest.raises(QueryError) as error:
        query = parse_query(text + '[[applications]]\nname = "out"\ninput = "cpu"\n', "bad.toml")
        analyse(query, 2)
    assert fragment in str(error.value) and "bad.toml" in str(error.value)


def test_waiting_is_the_slowest_source_behind_a_window_and_zero_with_seals():
    """Three sources 10, 40 and 70 ms from the aggregate's replica: a window waits for the farthest."""
    query = load_query(next(p for p in CORPUS if p.stem == "23_sealed_sources"))
    analysis = analyse(query, 1)
    physical = plan(query, 1)
    hosts = {ReplicaId(n, 0): i for i, n in enumerate(("c1", "c2", "c3", "all", "agg", "out"))}
    latency = [[0.0] * 6 for _ in range(6)]
    for source, ms in ((0, 10.0), (1, 40.0), (2, 70.0)):
        latency[source][3] = ms
    latency[3][4] = 5.0
    arrivals = first_arrivals(analysis, hosts, latency, physical.stream_replicas)
    assert arrivals[ReplicaId("agg", 0)] == {"c1": 15.0, "c2": 45.0, "c3": 75.0}
    (wait,) = waits(analysis, arrivals)
    assert wait.name == "agg" and wait.slowest == "c3"
    assert wait.extra_ms == {"c1": 60.0, "c2": 30.0, "c3": 0.0}
    assert wait.keyed_ms == {"c1": 0.0, "c2": 0.0, "c3": 0.0}


def test_the_consistency_checker_feeds_user_operators_what_the_planner_gives_them():
    """operators/testing.py with the analysis's verdict: Rises (OW_{server}) is consistent when sorted,
    and the checker finds the divergence when sorting is declined."""
    import random

    from replicast.examples.user_operators import Rises
    from replicast.operators.testing import check_replica_consistency

    rng = random.Random(3)
    records = sorted((rng.randrange(5_000_000), rng.choice("abc"), round(rng.random(), 3)) for _ in range(60))
    assert check_replica_consistency(Rises, [records], random.Random(1), sorted_input=True) == []
    assert check_replica_consistency(Rises, [records], random.Random(1), sorted_input=False)
