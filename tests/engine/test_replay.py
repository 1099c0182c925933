"""Replication transparency, end to end: replicated replay with crashes equals the reference (§III)."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from replicast.engine.event_file import read_events
from replicast.engine.query_file import load_query
from replicast.engine.replay import replay, scheduled_replay, source_batches, source_messages
from replicast.operators.errors import InputError
from replicast.operators.query import QueryBuilder
from tests.operators.strategies import TRICKY_FLOATS

ROOT = Path(__file__).resolve().parents[2]
FIG1, FIG1_EVENTS = ROOT / "examples" / "fig1.toml", ROOT / "examples" / "fig1-events.jsonl"
FIELDS = {"k": "int", "v": "float"}


@st.composite
def random_queries(draw):
    """A random DAG where every node's output has fields {k: int, v: float}, so any node feeds any operator."""
    q = QueryBuilder("<random>")
    nodes = []
    for i in range(draw(st.integers(1, 2))):
        q.stream(f"s{i}", FIELDS)
        nodes.append(f"s{i}")
    kinds = draw(st.lists(st.sampled_from(["filter", "map", "union", "join", "time", "count"]), min_size=1, max_size=3))
    if draw(st.booleans()):                     # often end with a window behind whatever merged the streams
        kinds.append(draw(st.sampled_from(["time", "count"])))
    for i, kind in enumerate(kinds):
        name = f"o{i}"
        # Prefer the newest nodes so operators chain (count windows behind unions and joins, …).
        pick = lambda: draw(st.sampled_from(nodes[-2:]))  # noqa: E731
        if kind == "filter":
            q.filter(name, pick(), where=draw(st.sampled_from(["v > 0", "k != 1", "v * 2 < 5 or k == 0"])))
        elif kind == "map":
            q.map(name, pick(), set={"k": draw(st.sampled_from(["k", "(k + 1) % 3"])),
                                     "v": draw(st.sampled_from(["v * 0.5", "v + 0.1", "-v"]))})
        elif kind == "union":
            q.union(name, [nodes[-1], draw(st.sampled_from(nodes))])
        elif kind == "join":
            left, right = draw(st.lists(st.sampled_from(nodes), min_size=2, max_size=2, unique=True)) \
                if len(nodes) > 1 else (nodes[0], None)
            if right is None:
                q.map(f"{name}m", left, set={"k": "k", "v": "v"})
                right = f"{name}m"
            q.join(f"{name}j", [left, right], window_ms=draw(st.sampled_from([125, 250, 700, 2500])),
                   on=draw(st.sampled_from([f"{left}.k == {right}.k", f"{left}.v < {right}.v", None])) or None)
            q.map(name, f"{name}j", set={"k": f"{left}.k", "v": f"{left}.v + {right}.v"})
        else:
            function = draw(st.sampled_from(["sum", "avg", "min", "max"]))
            window = ({"kind": "time", "size_ms": draw(st.sampled_from([500, 1000, 2500])),
                       "slide_ms": draw(st.sampled_from([250, 500, 1000]))}
                      if kind == "time" else
                      {"kind": "count", "size": draw(st.integers(1, 4)), "slide": draw(st.integers(1, 3))})
            q.aggregate(name, pick(), group_by=["k"], window=window, compute={"v": f"{function}(v)"})
        nodes.append(name)
    # The newest node always feeds an application, so the operator chain is never dead code.
    for i, node in enumerate([nodes[-1], *draw(st.lists(st.sampled_from(nodes), max_size=1))]):
        q.application(f"app{i}", node, ordered=draw(st.booleans()))
    return q.build()


@st.composite
def random_inputs(draw, query):
    streams = {}
    for name in query.streams:
        # Timestamps on a 125 ms grid, ±1 µs, so records land exactly on punctuations (n·P − 1) and on
        # window and join-window boundaries, where off-by-one mistakes live.
        ts = sorted(draw(st.lists(st.builds(lambda n, d: max(0, n * 125_000 + d), st.integers(0, 40),
                                            st.sampled_from([-1, 0, 1])), min_size=3, max_size=30)))
        records = [(t, draw(st.integers(0, 2)), draw(TRICKY_FLOATS)) for t in ts]
        if records and draw(st.booleans()):            # equal records from distinct events
            i = draw(st.integers(0, len(records) - 1))
            records.insert(i, records[i])
        streams[name] = records
    return streams


def max_crashes(query, k):
    return (k - 1) * (len(query.streams) + len(query.operators))


@settings(max_examples=250)
@given(st.data())
def test_replicated_replay_with_crashes_equals_the_reference(data):
    query = data.draw(random_queries())
    streams = data.draw(random_inputs(query))
    k = data.draw(st.integers(1, 4))
    crash = data.draw(st.integers(0, max_crashes(query, k)))
    seed = data.draw(st.integers(0, 2**32))
    punctuation_us = data.draw(st.sampled_from([250_000, 333_333, 1_000_000]))
    reference = replay(query, streams, replicas=1, punctuation_us=punctuation_us)
    result = scheduled_replay(query, streams, replicas=k, seed=seed, crash=crash, punctuation_us=punctuation_us)
    for app, spec in query.applications.items():
        assert Counter(result.outputs[app]) == Counter(reference.outputs[app]), app
        if spec.ordered:
            assert result.outputs[app] == reference.outputs[app], app


@settings(max_examples=150)
@given(st.data())
def test_the_straight_through_reference_equals_the_scheduled_run_with_one_replica(data):
    """``replay(replicas=1)`` skips the schedule (docs/replay.md); its output must be the scheduled run's."""
    query = data.draw(random_queries())
    streams = data.draw(random_inputs(query))
    punctuation_us = data.draw(st.sampled_from([250_000, 333_333, 1_000_000]))
    straight = replay(query, streams, replicas=1, punctuation_us=punctuation_us)
    scheduled = scheduled_replay(query, streams, replicas=1, seed=data.draw(st.integers(0, 2**32)),
                                 punctuation_us=punctuation_us)
    for app, spec in query.applications.items():
        assert Counter(straight.outputs[app]) == Counter(scheduled.outputs[app]), app
        if spec.ordered:
            assert straight.outputs[app] == scheduled.outputs[app], app


def test_the_reference_run_sends_batches_not_records():
    query = load_query(FIG1)
    streams = read_events(FIG1_EVENTS, query)
    straight, scheduled = replay(query, streams), scheduled_replay(query, streams, replicas=1, seed=3)
    for app, spec in query.applications.items():
        assert Counter(straight.outputs[app]) == Counter(scheduled.outputs[app]), app
        if spec.ordered:
            assert straight.outputs[app] == scheduled.outputs[app], app
    # Dense input: one message per punctuation interval through each node, not one per record.
    q = QueryBuilder()
    q.stream("s", FIELDS)
    q.filter("f", "s", where="v > 0")
    q.application("app", "f")
    dense = {"s": [(i * 1000, i % 3, float(i)) for i in range(3000)]}          # 3 s of event time
    result = replay(q.build(), dense)
    assert len(result.outputs["app"]) == 2999
    assert result.messages <= 3 * (3 + 2)                # 3 nodes; 3 intervals, the first punctuation, CLOSED


def test_source_batches_carry_the_source_messages_in_order():
    records = [(5, "a"), (1_500_000, "b"), (1_600_000, "c"), (3_200_001, "d"), (3_200_001, "e")]
    flat = lambda messages: [item for _, batch, p in messages for item in (*batch, *([p] if p is not None else []))]  # noqa: E731
    assert flat(source_batches(records, 1_000_000)) == flat(source_messages(records, 1_000_000))
    assert [len(batch) for _, batch, _ in source_batches(records, 1_000_000)] == [0, 1, 2, 2]
    with pytest.raises(InputError, match="'s': records are not in timestamp order"):
        source_batches(records[::-1], 1_000_000, "'s'")          # at once, before any batch is taken
    assert flat(source_batches([], 1_000_000)) == flat(source_messages([], 1_000_000)) == [2**63 - 1]


def test_fig1_with_three_replicas_and_two_crashes_matches_for_50_seeds():
    query = load_query(FIG1)
    streams = read_events(FIG1_EVENTS, query)
    reference = replay(query, streams, replicas=1)
    assert all(reference.outputs.values())                      # every application gets output
    for seed in range(50):
        result = replay(query, streams, replicas=3, crash=2, seed=seed)
        assert len(result.crashed) == 2
        assert result.duplicates > 0                            # replication really happened
        for app in query.applications:
            assert Counter(result.outputs[app]) == Counter(reference.outputs[app]), (seed, app)
        assert result.outputs["alerts"] == reference.outputs["alerts"]          # ordered application


@pytest.mark.pure_python        # patches a method of a class the native build compiles
def test_count_windows_behind_a_union_need_the_planners_sorter(monkeypatch):
    """Union output order varies by replica; the sorter in front of count windows makes them agree (§IV-C)."""
    q = QueryBuilder()
    q.stream("s0", FIELDS)
    q.stream("s1", FIELDS)
    q.union("u", ["s0", "s1"])
    q.aggregate("c", "u", group_by=["k"], window={"kind": "count", "size": 2, "slide": 1}, compute={"v": "sum(v)"})
    q.application("app", "c")
    query = q.build()
    streams = {"s0": [(i * 100_000, 0, float(i)) for i in range(20)],
               "s1": [(i * 100_000 + 50_000, 0, float(100 + i)) for i in range(20)]}

    def agrees():
        reference = Counter(replay(query, streams, replicas=1).outputs["app"])
        return all(Counter(replay(query, streams, replicas=2, seed=s, crash=1).outputs["app"]) == reference
                   for s in range(10))

    assert agrees()
    from replicast.operators.plan import PhysicalPlan
    monkeypatch.setattr(PhysicalPlan, "sorts_input", lambda self, name: False)
    assert not agrees()


def test_sources_punctuate_every_interval_and_close():
    messages = source_messages([(5, "a"), (1_500_000, "b"), (1_600_000, "c"), (3_200_001, "d")], 1_000_000)
    punctuations = [p for _, _, p in messages if p is not None]
    assert punctuations == [-1, 999_999, 2_999_999, 2**63 - 1]


def test_cannot_crash_every_replica_of_an_operator():
    query = load_query(FIG1)
    limit = 2 * (len(query.streams) + len(query.operators))      # all but one of 3 replicas of each
    streams = read_events(FIG1_EVENTS, query)
    assert len(replay(query, streams, replicas=3, crash=limit).crashed) == limit
    with pytest.raises(InputError, match=f"between 0 and {limit} replicas can crash"):
        replay(query, streams, replicas=3, crash=limit + 1)


def replicast(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "replicast.engine.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_cli_check_reports_ok_and_writes_json_lines(tmp_path):
    out = tmp_path / "out.jsonl"
    run = replicast("replay", FIG1, "--input", FIG1_EVENTS, "--replicas", 3, "--crash", 2, "--seed", 4,
                    "--check", "--output", out)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("OK: ")
    first = json.loads(out.read_text().splitlines()[0])
    assert first["app"] in ("alerts", "rtt_stats", "load_trends") and isinstance(first["ts"], int)


@pytest.mark.parametrize("events, expected", [
    ('{"stream": "cpu_a", "ts": 5, "server": "a"}\n', "events.jsonl:1: fields do not match"),
    ('{"stream": "cpu_z", "ts": 5}\n', "events.jsonl:1: unknown stream 'cpu_z'"),
    ('{"stream": "cpu_a", "ts": 5, "server": "a", "load": 1}\n{"stream": "cpu_a", "ts": 4, "server": "a", '
     '"load": 1}\n', "events.jsonl:2: ts 4 of stream 'cpu_a' is earlier"),
    ('{"stream": "cpu_a", "ts": 5.5, "server": "a", "load": 1}\n', "events.jsonl:1: 'ts' must be an integer"),
    ('{"stream": "cpu_a", "ts": 5, "server": "a", "load": "high"}\n', "events.jsonl:1: field 'load' must be float"),
    ('{"stream": "cpu_a", "ts": 5, "server": "a", "load": NaN}\n', "must be a finite float"),
    ('not json\n', "events.jsonl:1: not valid JSON"),
])
def test_cli_bad_input_exits_2_with_one_clear_line(tmp_path, events, expected):
    path = tmp_path / "events.jsonl"
    path.write_text(events)
    run = replicast("replay", FIG1, "--input", path)
    assert run.returncode == 2
    assert expected in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_cli_bad_query_exits_2_naming_the_file_and_operator(tmp_path):
    query = tmp_path / "q.toml"
    query.write_text(FIG1.read_text().replace('where = "ping.rtt_ms > 120', 'where = "open(ping.rtt_ms) > 120'))
    run = replicast("replay", query, "--input", FIG1_EVENTS)
    assert run.returncode == 2
    assert "q.toml: operator 'hot' (where): call not allowed" in run.stderr
