"""The timing tier's punctuation waits (simulator/timing_punctuation.py) against the reference tier.

The shipped sim-fig1 scenario (30 Seattle servers, sources punctuating once a minute) with the
Fig. 1 query's order-sensitive part added, as examples/fig1.toml has it: a time-window aggregate
(60-s windows sliding 30 s), a count-window aggregate behind a sorter, and two ordered applications.
Their deliveries wait tens of seconds for punctuations, so a tier that ignored the waits would be
that much early; both tiers must deliver the same records within 1 ms of each other, except the
few the timing tier is known not to model (tests/simulator/test_timing.py, docs/simulator.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from replicast.examples import example_path
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, load_scenario
from replicast.simulator.timing import arrivals, differences, run_timing
from replicast.simulator.timing_punctuation import frontier, release

SIMULATED_S = 600
ORDERED_PART = """
[[operators]]
name = "rtt_by_dst"
kind = "aggregate"
input = "ping"
group_by = ["dst"]
window = { kind = "time", size_ms = 60000, slide_ms = 30000 }
compute = { samples = "count()", avg_rtt_ms = "avg(rtt_ms)", max_rtt_ms = "max(rtt_ms)" }

[[operators]]
name = "load_trend"
kind = "aggregate"
input = "load"
group_by = ["server"]
window = { kind = "count", size = 4, slide = 2 }
compute = { avg_load = "avg(load)", peak = "max(load)" }

[[applications]]
name = "rtt_stats"
input = "rtt_by_dst"

[[applications]]
name = "load_trends"
input = "load_trend"
ordered = true

[[applications]]
name = "hot_sorted"
input = "hot_0"
ordered = true
"""
WAITING = ("rtt_stats", "load_trends", "hot_sorted")


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ordered")
    query = Path(example_path("sim-fig1-query.toml")).read_text(encoding="utf-8") + ORDERED_PART
    (folder / "query.toml").write_text(query, encoding="utf-8")
    text = Path(example_path("sim-fig1.toml")).read_text(encoding="utf-8")
    lines = ['query = "query.toml"' if line.startswith("query =") else line for line in text.splitlines()]
    (folder / "scenario.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "scenario.toml"


def prepare(path: Path, faults: tuple = (), duration_s: float = SIMULATED_S) -> Prepared:
    scenario = load_scenario(path)
    scenario.duration_s = duration_s
    scenario.faults = faults
    return Prepared(scenario)


def compare(prepared: Prepared, kmax: int, deployment: str | None = None):
    reference = run(prepared, kmax, keep_records=True, deployment=deployment)
    timing = run_timing(prepared, kmax, deployment=deployment)
    diff, unmatched = differences(reference, timing)
    assert unmatched == 0
    assert len(diff) == reference.summary["delivered"] > 0
    for app in WAITING:
        assert timing.summary["per_app"][app] == reference.summary["per_app"][app] > 0
    return reference, timing, diff


@pytest.mark.parametrize("kmax,deployment", [(1, "random"), (3, "random"), (5, "min-cost"),
                                             (2, "random-from-min-cost")])
def test_waits_for_punctuations_as_the_reference_tier(scenario_path, kmax, deployment):
    reference, timing, diff = compare(prepare(scenario_path), kmax, deployment)
    assert diff.max() <= 1000
    late = np.abs(diff) > 1000
    # as in test_timing.py: earlier only where the reference waits behind other messages on a link
    assert late.mean() <= 0.002, f"{late.sum()} of {len(diff)} deliveries differ by more than 1 ms"
    assert diff.min() >= -250_000
    # the waits are real: an ordered application's p50 is tens of seconds (punctuations every 60 s)
    ordered = timing.deliveries.filter(timing.deliveries.column("app").cast("string").to_numpy(
        zero_copy_only=False) == "hot_sorted")
    assert np.median(ordered.column("latency_us").to_numpy()) > 10_000_000


def _app_diff(reference, timing, app: str) -> np.ndarray:
    """timing − reference arrival (µs) of every delivery to ``app``."""
    expected = arrivals(reference.recorder.outputs, reference.recorder.deliveries())
    got = arrivals(timing.outputs, timing.deliveries)
    return np.concatenate([np.subtract(got[key], expected[key]) for key in expected if key[0] == app])


def test_crashes_cut_punctuation_paths(scenario_path):
    faults = (Fault("crash", ("correlate#0",), 120_000_000), Fault("crash", ("ping#1",), 300_000_000))
    _, _, diff = compare(prepare(scenario_path, faults), 3)
    late = np.abs(diff) > 1000
    assert late.mean() <= 0.002 and diff.max() <= 1000


def test_windows_change_nothing(scenario_path):
    """Timed two minutes at a time (count windows carried across, punctuations read ahead) the run
    delivers what one window does, at the same times."""
    prepared = prepare(scenario_path)
    whole = run_timing(prepared, 3)
    pieces = run_timing(prepared, 3, window_us=120_000_000)
    x, y = arrivals(whole.outputs, whole.deliveries), arrivals(pieces.outputs, pieces.deliveries)
    assert whole.deliveries.num_rows == pieces.deliveries.num_rows > 0
    assert x == y


def test_frontier_is_the_minimum_over_ports_of_the_maximum_over_copies():
    never = np.int64(2**62)
    a = (np.array([10, 30, 50]), np.array([100, 200, 300]))          # port 0, copy a
    b = (np.array([20, 25, never]), np.array([150, 250, 350]))       # port 0, copy b (the last lost)
    c = (np.array([40, 60]), np.array([220, 400]))                   # port 1
    times, values = frontier([[a, b], [c]])
    # port 0: 100@10 150@20 250@25 (300@50); port 1: 220@40 400@60 -> min rises at 40 and 60
    assert times.tolist() == [40, 60] and values.tolist() == [220, 300]
    assert release((times, values), np.array([0, 220, 221, 300, 301])).tolist() == [40, 40, 60, 60, never]


@pytest.mark.slow
@pytest.mark.parametrize("kmax,deployment", [(3, "random-from-min-cost"), (2, "min-cost")])
def test_an_hour_against_the_reference_tier(scenario_path, kmax, deployment):
    """The 1-hour check of docs/simulator.md ("The timing tier") on the ordered scenario: every
    delivery within 1 ms except the few the timing tier does not model, quantiles per application to
    the ms."""
    reference, timing, diff = compare(prepare(scenario_path, duration_s=3600), kmax, deployment)
    late = np.abs(diff) > 1000
    # over an hour the unmodelled effects (FIFO behind other messages, a peer time-out's redial) reach
    # the bound docs/simulator.md measured for them, at the unordered applications (-475 ms here)
    assert diff.max() <= 1000 and late.mean() <= 0.002 and diff.min() >= -6_000_000
    waiting = {app: _app_diff(reference, timing, app) for app in WAITING}
    assert all(np.abs(d).max() <= 1000 for d in waiting.values()), {a: int(d.min()) for a, d in waiting.items()}
    for app in WAITING:
        got, expected = (table.filter(table.column("app").cast("string").to_numpy(zero_copy_only=False) == app)
                         .column("latency_us").to_numpy() for table in (timing.deliveries,
                                                                        reference.recorder.deliveries()))
        assert np.allclose(np.quantile(got, [0.5, 0.99, 0.999, 1]), np.quantile(expected, [0.5, 0.99, 0.999, 1]),
                           rtol=0, atol=1000), app


def test_refuses_seals_per_key(scenario_path):
    from replicast.simulator.timing import TimingUnsupported

    prepared = prepare(scenario_path, duration_s=60)
    prepared.sources[0].seal = ("server",)
    with pytest.raises(TimingUnsupported, match="seal"):
        run_timing(prepared, 2)


def test_refuses_per_server_clocks(scenario_path):
    from replicast.simulator.clocks import ClockSpec
    from replicast.simulator.timing import TimingUnsupported

    prepared = prepare(scenario_path, duration_s=60)
    prepared.scenario.clocks = {next(iter(prepared.servers)): ClockSpec()}
    with pytest.raises(TimingUnsupported, match="clocks"):
        run_timing(prepared, 2)
