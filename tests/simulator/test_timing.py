"""The timing tier (simulator/timing.py) against the reference tier (the node cores).

On the shipped Fig. 4 scenario (examples/sim-fig1.toml: 30 Seattle servers, the Fig. 1 query) over
a few simulated minutes, at several kmax, random and min-cost deployments, with and without
crashes: both tiers deliver the same records to the same applications, and each delivery's time
agrees within 1 ms except for a few the timing tier does not model (docs/simulator.md, "The timing
tier"): those are bounded here by what was measured, so a regression fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from replicast.examples import example_path
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, load_scenario
from replicast.simulator.timing import TimingUnsupported, differences as compare, run_timing

WINDOW_S = 180


def differences(prepared: Prepared, kmax: int, deployment: str | None = None) -> np.ndarray:
    """timing − reference arrival (µs) of every delivery; asserts both delivered the same records."""
    reference = run(prepared, kmax, keep_records=True, deployment=deployment)
    timing = run_timing(prepared, kmax, deployment=deployment)
    diff, unmatched = compare(reference, timing)
    assert unmatched == 0
    assert len(diff) == reference.summary["delivered"] > 0
    return diff


@pytest.fixture(scope="module")
def prepared():
    scenario = load_scenario(example_path("sim-fig1.toml"))
    scenario.duration_s = WINDOW_S
    return Prepared(scenario)


@pytest.mark.parametrize("kmax,deployment", [(1, "random"), (3, "random"), (5, "random"), (2, "min-cost"),
                                             (4, "min-cost"), (3, "random-from-min-cost")])
def test_delivery_times_equal_the_reference_tier(prepared, kmax, deployment):
    diff = differences(prepared, kmax, deployment)
    # Never later than the reference by more than the CPU cost it adds per hop (µs).
    assert diff.max() <= 1000
    # Earlier only where the reference waits behind another operator's or a control message on the
    # same FIFO link (not modelled): measured at most 0.07 % of deliveries, by at most 210 ms.
    late = np.abs(diff) > 1000
    assert late.mean() <= 0.002, f"{late.sum()} of {len(diff)} deliveries differ by more than 1 ms"
    assert diff.min() >= -250_000


def test_windows_change_nothing(prepared):
    """A run timed a minute at a time (rows carried over a Join window between them) delivers what
    one window does, at the same times."""
    whole = run_timing(prepared, 3)
    by_minute = run_timing(prepared, 3, window_us=60_000_000)
    assert whole.deliveries.num_rows == by_minute.deliveries.num_rows > 0
    diff, unmatched = compare_tables(whole, by_minute)
    assert unmatched == 0 and not diff.any()


def compare_tables(a, b):
    from replicast.simulator.timing import arrivals

    x, y = arrivals(a.outputs, a.deliveries), arrivals(b.outputs, b.deliveries)
    unmatched = sum(abs(len(x.get(k, [])) - len(y.get(k, []))) for k in x.keys() | y.keys())
    return np.concatenate([np.subtract(x[k], y[k]) for k in x.keys() & y.keys()]), unmatched


def test_crashes_remove_paths(prepared):
    scenario = load_scenario(example_path("sim-fig1.toml"))
    scenario.duration_s = WINDOW_S
    scenario.faults = (Fault("crash", ("correlate#0",), 60_000_000), Fault("crash", ("load#1",), 110_000_000))
    crashed = Prepared(scenario)
    diff = differences(crashed, 3)
    assert np.abs(diff).max() <= 1000


def test_refuses_what_it_does_not_time(prepared):
    scenario = load_scenario(example_path("sim-fig1.toml"))
    scenario.duration_s = 60
    scenario.outage = "drop"
    with pytest.raises(TimingUnsupported, match="outage = 'drop'"):
        run_timing(Prepared(scenario), 2)


class FrameTrace:
    """A trace of hand-written frames (RTT ms, NaN = outage) with the TraceStore calls both tiers use."""

    interval_us = 10_000_000

    def __init__(self, frames):
        self.frames = np.array(frames, np.float32)
        self.n_frames, self.n_nodes = len(frames), self.frames.shape[1]
        self.nodes = [f"n{i}" for i in range(self.n_nodes)]

    def frame(self, index):
        return self.frames[index]


@pytest.mark.parametrize("loaded", [9, 2])
def test_links_arrive_as_the_network_delivers(loaded):
    """Links.arrive (arrays) against simulator.network.Network (one send at a time): delays falling
    from frame to frame (FIFO binds), and outages of one and of several frames (held); with every
    frame read at once, and with only the first three (later sends and recoveries looked up)."""
    from replicast.simulator.network import LinkEnvironment, Network
    from replicast.simulator.timing import Links

    rtts = [400.0, 40.0, np.nan, 300.0, 20.0, np.nan, np.nan, np.nan, 100.0, 2.0]
    trace = FrameTrace([[[0.0, r], [r, 0.0]] for r in rtts])
    servers = {"a": 0, "b": 1}
    sent = np.sort(np.random.default_rng(1).integers(0, 100_000_000, 3000))
    env = LinkEnvironment()
    got = []
    network = Network(env, trace, servers, lambda dst, src, items: got.append((env.now, items[0])))
    for i, t in enumerate(sent.tolist()):
        env.run(until=t) if t > env.now else None
        network.send("a", "b", [i], t)
    env.run()
    expected = np.empty(len(sent), np.int64)
    for when, i in got:
        expected[i] = when
    links = Links(trace, servers, 0, 0, loaded)
    assert np.array_equal(links.arrive("a", "b", sent), expected)
    if loaded < 9:                     # a send past the frames read: not for the path by frames
        assert links.send(links.column[("a", "b")], links.sends(sent), [0, 0]) is None
        return
    # the path by frames (Links.send: per-frame delays, recoveries and FIFO bounds) gives the same
    # arrivals and cost, for sends in time order and shuffled (a Join's rows are not in time order)
    for order in (np.arange(len(sent)), np.random.default_rng(2).permutation(len(sent))):
        by_frames, general = [0, 0], [0, 0]
        fast = links.send(links.column[("a", "b")], links.sends(sent[order]), by_frames)
        assert np.array_equal(fast, expected[order])
        assert np.array_equal(fast, links.arrive("a", "b", sent[order], general, len(sent)))
        assert by_frames == general and by_frames[0] == len(sent)
