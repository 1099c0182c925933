"""Scenario runs on the shipped Seattle trace: replication transparency under every fault kind, the
per-record lower bound, and the network's FIFO / outage rules."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from replicast.engine.replay import replay
from replicast.simulator.bound import lower_bounds
from replicast.simulator.network import FixedDelays, LinkEnvironment, Network
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import ScenarioError, load_scenario

DATA = Path(__file__).parent / "data"


def reference_equal(prepared, result) -> dict[str, bool]:
    reference = replay(prepared.query, result.inputs, replicas=1,
                       punctuation_us=round(prepared.scenario.punctuation_ms * 1000))
    return {app: Counter(records) == Counter(result.recorder.outputs[app]) for app, records in reference.outputs.items()}


@pytest.mark.parametrize("outage", ["hold", "drop"])
def test_faults_change_no_application_output(outage):
    scenario = load_scenario(DATA / "fig1-faults.toml")
    scenario.outage = outage
    prepared = Prepared(scenario)
    result = run(prepared, 3, keep_records=True)
    assert result.summary["completed"]
    assert all(reference_equal(prepared, result).values())
    assert result.summary["delivered"] == 675
    # The faults did bite: the CPU spike and the 2 s congestion delayed some records by seconds.
    assert result.summary["latency_ms"]["max"] > 5000


def test_without_replicas_a_crash_loses_output():
    """The same script at kmax = 1 crashes the only Join replica: the check must notice."""
    prepared = Prepared(load_scenario(DATA / "fig1-faults.toml"))
    result = run(prepared, 1, keep_records=True)
    equal = reference_equal(prepared, result)
    assert not equal["alerts"]


def test_lower_bound_never_beaten_and_met_within_processing_cost():
    scenario = load_scenario(DATA / "chain.toml")
    path_cost = sum(scenario.processing_us[k] for k in ("entry", "union", "filter", "application"))
    prepared = Prepared(scenario)
    for costs in (scenario.processing_us, {}):
        scenario.processing_us = dict(costs)
        result = run(prepared, 3, keep_records=True)
        homes = {s.stream: s.server for s in prepared.sources}
        bounds = lower_bounds(prepared.query, result.placement, prepared.servers, prepared.trace, result.inputs, homes,
                              prepared.origin)
        arrival = np.array(result.recorder.arrival_col)
        bound = np.array([bounds[r] for r in result.recorder.outputs["watch"]])
        excess = arrival - bound
        assert len(excess) > 1000 and excess.min() >= 0
        if costs:
            assert np.mean(excess <= path_cost) >= 0.9
        else:
            assert np.mean(excess == 0) >= 0.99      # only FIFO (a later frame's shorter delay) delays


def test_more_replicas_lower_latency():
    prepared = Prepared(load_scenario(DATA / "chain.toml"))
    p99 = [run(prepared, k).summary["latency_ms"]["p99"] for k in (1, 3)]
    assert p99[1] < p99[0]


def network(delays, outage="hold"):
    env = LinkEnvironment()
    got = []
    net = Network(env, FixedDelays(delays), {"a": 0, "b": 1}, lambda dst, src, items: got.append((env.now, items)),
                  outage=outage)
    return env, net, got


def test_links_are_fifo_and_outages_hold_or_refuse():
    env, net, got = network({"a": {"b": 20.0}})
    net.send("a", "b", ["first"], 0)
    net.congest("a", "b", 0, 5_000, -9_000)          # a later message would overtake without FIFO
    net.send("a", "b", ["second"], 1_000)
    net.cut("a", "b", 20_000, 50_000)
    net.send("a", "b", ["held"], 30_000)
    env.run()
    assert got == [(10_000, ["first"]), (10_000, ["second"]), (60_000, ["held"])]
    env, net, got = network({"a": {"b": 20.0}}, outage="drop")
    net.cut("a", "b", 0, 50_000)
    assert not net.send("a", "b", ["lost"], 0)


def test_trace_delays_and_held_sends_match_the_trace_store():
    """The per-frame delay tables, the link caches and the cached hold answer agree with plain
    ``TraceStore.one_way_us`` lookups: arrival = first time >= send with a sample + its delay, FIFO."""
    from replicast.traces.store import TraceStore

    trace = TraceStore.open("seattle")
    frames = np.stack([trace.frame(f) for f in range(trace.n_frames)])
    gappy = np.argsort(-np.isnan(frames).sum(axis=(0, 2)), kind="stable")[:6].tolist()   # nodes with outages
    nodes = sorted(set(gappy) | {0, 1, 2, 3})
    servers = {trace.nodes[i]: i for i in nodes}
    names = list(servers)
    origin, interval = 5_000_000, trace.interval_us
    env = LinkEnvironment()
    got: dict[int, int] = {}
    net = Network(env, trace, servers, lambda dst, src, items: got.__setitem__(items[0], env.now), origin_us=origin)
    net.congest(names[0], names[1], origin + 40 * interval, origin + 90 * interval, 7_000)
    rng = np.random.default_rng(3)
    expected, last, n = {}, {}, 0
    for now in np.sort(rng.integers(0, trace.duration_us, 4000)).tolist():
        for _ in range(3):
            src, dst = (names[i] for i in rng.choice(len(names), 2, replace=False))
            t = now
            while True:
                delay = trace.one_way_us(servers[src], servers[dst], max(0, t - origin))
                if {src, dst} == {names[0], names[1]} and origin + 40 * interval <= t < origin + 90 * interval:
                    delay = None if delay is None else delay + 7_000
                if delay is not None or t - origin >= trace.duration_us:
                    break
                t = (max(0, t - origin) // interval + 1) * interval + origin
            if delay is not None:
                expected[n] = last[src, dst] = max(t + delay, last.get((src, dst), 0))
            env.run(until=now) if now > env.now else None
            net.send(src, dst, [n], now)
            n += 1
    env.run()
    assert got == expected and len(expected) > 10_000 and len(expected) < n      # some held forever


@pytest.mark.pure_python        # counts through a patched Network.send
def test_bandwidth_table_counts_every_message_sent(monkeypatch):
    """bandwidth.parquet (records, exact wire bytes, cost) equals a tally of every message handed to
    the network, per minute and stream replica; with a link bandwidth the network gets the frame's
    exact size."""
    from collections import defaultdict

    from replicast.engine.messages import Batch
    from replicast.engine.wire import encode
    from replicast.simulator.driver import SourcePayload

    scenario = load_scenario(DATA / "chain.toml")
    scenario.duration_s, scenario.bandwidth_mbps = 300, 2.0
    prepared = Prepared(scenario)
    bucket_us = round(scenario.bucket_s * 1e6)
    tally = defaultdict(lambda: [0, 0, 0.0])
    send = Network.send

    def counting_send(net, src, dst, items, now, size_bytes=0):
        if type(items[0]) is not SourcePayload:
            assert size_bytes == sum(len(encode(m)) for m in items)
            for m in items:
                batch = type(m) is Batch
                entry = tally[(now // bucket_us * bucket_us, f"{m.stream.source}>{m.stream.target}" if batch else "control")]
                entry[1] += len(encode(m))
                if batch:
                    entry[0] += len(m.records)
                    entry[2] += len(m.records) * (net.delay_us(src, dst, now) or 0) / 1000.0 / scenario.bucket_s
        return send(net, src, dst, items, now, size_bytes)

    monkeypatch.setattr(Network, "send", counting_send)
    table = run(prepared, 2).recorder.bandwidth().to_pylist()
    got = {(row["t_us"], row["stream"]): [row["records"], row["bytes"], row["cost"]] for row in table}
    assert len(got) == len(table) > 50 and got.keys() == tally.keys()
    for key, (records, size, cost) in tally.items():
        assert got[key][:2] == [records, size] and got[key][2] == pytest.approx(cost)


def test_scenario_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('trace = "seattle"\nquery = "q.toml"\nservers = 3\nkmax = 0\n[[sources]]\nkind="cpu"\n'
                   'stream="x"\nservers="all"\n')
    with pytest.raises(ScenarioError, match=r"bad.toml: 'kmax' must be a positive integer"):
        load_scenario(bad)


def test_the_link_environment_runs_calls_and_simpy_events_in_time_order_calls_first_on_a_tie():
    """LinkEnvironment (public SimPy API only): a timed call goes before a SimPy event of the same
    time, a SimPy delay counts from the call that scheduled it, processes read the same ``now``,
    and ``run(until=…)`` stops there with the calls due by then done."""
    import simpy.core
    env = LinkEnvironment(initial_time=100)
    log = []

    def call(name):
        log.append((name, env.now))
        if name == "c1":                                  # a timer set from a call: 5 µs after it
            env.timeout(5).callbacks.append(lambda event: log.append(("t@c1+5", env.now)))

    def process():
        yield env.timeout(10)
        log.append(("p", env.now))
        env.call_at(env.now, call, "c@p")                # due at once: before the next event
        yield env.timeout(1)
        log.append(("p+1", env.now))

    env.process(process())
    env.call_at(110, call, "c@110")
    env.call_at(103, call, "c1")
    env.call_at(130, call, "c@130")
    env.run(until=120)
    assert log == [("c1", 103), ("t@c1+5", 108), ("c@110", 110), ("p", 110), ("c@p", 110), ("p+1", 111)]
    assert env.now == 120
    env.run()
    assert log[-1] == ("c@130", 130) and env.now == 130
    with pytest.raises(simpy.core.EmptySchedule):
        env.step()


def test_the_simulator_reaches_into_no_private_simpy_names():
    """SimPy's public API only (simulator/network.py, LinkEnvironment): no attribute of SimPy's
    internals is read or set anywhere in the simulator."""
    import ast
    from pathlib import Path
    private = {"_queue", "_now", "_eid", "_active_proc", "_ok", "_value", "_defused"}
    root = Path(__file__).resolve().parents[2] / "simulator"
    found = [(path.name, node.lineno, node.attr) for path in sorted(root.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Attribute) and node.attr in private]
    assert not found, found
