"""The simulated link comes back when a real one would: after the handshake's two round trips."""

from pathlib import Path

from replicast.engine.query_file import load_query
from replicast.simulator.driver import Simulation
from replicast.simulator.network import FixedDelays

QUERY = load_query(Path(__file__).parent / "data" / "chain-query.toml")


def test_a_dropped_connection_is_back_after_two_round_trips():
    """engine/handshake.py: Hello each way, then the dialer's Proof and the acceptor's Proof — the
    dialer can send data two RTTs after it started dialling (the acceptor half an RTT earlier)."""
    placement = {"cpu_0": ["a"], "cpu_1": ["a"], "cpu_2": ["a"], "load": ["b"], "busy": ["b"], "watch": ["b"]}
    rtt_us = 30_000
    sim = Simulation(QUERY, placement, FixedDelays({"a": {"b": rtt_us / 1000}}), {"a": 0, "b": 1})
    sim.run(until=1_000)
    assert frozenset("ab") in sim.connected
    sim.drop_connection("a", "b")
    dropped = sim.env.now
    sim.run(until=dropped + 2 * rtt_us - 1)
    assert frozenset("ab") not in sim.connected
    sim.run(until=dropped + 2 * rtt_us + 1)       # SimPy stops before the events at `until`
    assert frozenset("ab") in sim.connected
