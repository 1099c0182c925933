"""Per-node clocks in the simulator (simulator/clocks.py, docs/simulator.md "Clocks") and the votes
its restart fault keeps (engine/core/views.py rule 1).

The entry-stamped pipeline stamps each event with its stamper's clock, so what the application
receives shows whose clock stamped it, and when."""

from collections import defaultdict
from pathlib import Path

import pytest

from replicast.engine.core.states import StamperRole
from replicast.engine.core.views import VoteMemory
from replicast.engine.node import NodeOptions
from replicast.engine.query_file import load_query
from replicast.simulator.clocks import Clock, ClockSpec
from replicast.simulator.driver import Observer, Simulation
from replicast.simulator.network import FixedDelays
from replicast.simulator.scenario import ScenarioError, parse_scenario

QUERY = load_query(Path(__file__).resolve().parents[2] / "examples/entry-stamped-query.toml")
MS = 1_000
S = 1_000_000
NODES = ["e1", "e2", "f1", "app", "src"]
PLACEMENT = {"cpu": ["e1", "e2"], "pass": ["f1"], "out": ["app"]}
OPTIONS = NodeOptions(punctuation_us=50 * MS, heartbeat_us=100 * MS, peer_timeout_us=500 * MS,
                      entry_modes={"cpu": "entry"})


class Deliveries(Observer):
    def __init__(self):
        self.stamps: dict[float, int] = {}
        self.all: dict[float, set[int]] = defaultdict(set)     # every timestamp each event arrived with
        self.sent_at: dict[float, int] = {}

    def delivered(self, node, event):
        for record in event.records:
            self.stamps[record[2]] = record[0]
            self.all[record[2]].add(record[0])


def simulation(clocks=None) -> tuple[Simulation, Deliveries]:
    rtt = {a: {b: 20.0 for b in NODES if b != a} for a in NODES}
    observer = Deliveries()
    sim = Simulation(QUERY, PLACEMENT, FixedDelays(rtt, NODES), {n: i for i, n in enumerate(NODES)},
                     options=OPTIONS, observer=observer, start_us=10 * S, clocks=clocks)
    return sim, observer


def publish(sim: Simulation, observer: Deliveries, first: int, n: int, start: int) -> None:
    for i in range(first, first + n):
        when = start + (i - first) * 100 * MS
        observer.sent_at[float(i)] = when
        sim.env.call_at(when, sim.publish, "src", "cpu", f'{{"server": "s", "load": {i}.0}}'.encode())


def stamper(sim: Simulation) -> str:
    [node] = [name for name, n in sim.nodes.items() if n.alive for h in n.core.hosted.values()
              if h.stamp is not None and h.stamp.role is StamperRole.STAMPING]
    return node


def test_the_clock_model_reads_offset_plus_drift_from_the_start_and_inverts_to_the_first_true_time():
    clock = Clock(ClockSpec(offset_us=250 * MS, drift_ppm=100.0), origin_us=10 * S)
    assert clock.local(10 * S) == 10 * S + 250 * MS
    assert clock.local(20 * S) == 20 * S + 250 * MS + 1 * MS          # 100 ppm of 10 s
    for local in (10 * S, 10 * S + 250 * MS, 31 * S + 7):
        true = clock.true(local)
        assert clock.local(true) >= local > clock.local(true - 1)
    assert Clock().local(123) == 123 == Clock().true(123)


def test_every_stamp_reads_the_stampers_clock_offset_and_drift_included():
    """e1 runs 3 s ahead and 500 ppm fast, e2 is exact: whoever stamps, each event's timestamp is
    what the stamper's clock read when the event arrived (20 ms after it was published here)."""
    spec = ClockSpec(offset_us=3 * S, drift_ppm=500.0)
    sim, observer = simulation({"e1": spec})
    publish(sim, observer, 0, 40, 11 * S)
    sim.run(until=20 * S)
    clock = Clock(spec, 10 * S)
    who = stamper(sim)
    expected = clock.local if who == "e1" else (lambda t: t)
    assert len(observer.stamps) == 40
    for event, ts in observer.stamps.items():
        arrival = observer.sent_at[event] + 10 * MS       # one way, src → stamper
        assert 0 <= ts - expected(arrival) <= 1, (who, event, ts, expected(arrival))
    assert who == "e1"                                   # e1, the lowest index, stamps from the start


@pytest.mark.pure_python        # wraps the core's handle_timer on the instance
def test_timers_fire_when_a_drifting_clock_reads_their_deadline():
    """A clock 20 % slow: its node's heartbeats (every 100 ms on its clock) come every 125 ms of
    simulated time; its punctuations too, so stamps stay in its own time."""
    spec = ClockSpec(offset_us=0, drift_ppm=-200_000.0)
    sim, observer = simulation({"e1": spec})
    fired = []
    node = sim.nodes["e1"]
    handle = node.core.handle_timer

    def record(*, now):
        fired.append((sim.env.now, now))
        handle(now=now)
    node.core.handle_timer = record
    publish(sim, observer, 0, 10, 11 * S)
    sim.run(until=13 * S)
    clock = Clock(spec, 10 * S)
    assert len(fired) > 10
    for true, local in fired:
        assert local == clock.local(true)
        assert clock.local(true - 1) < local or true == 10 * S   # not a µs later than needed
    assert len(observer.stamps) == 10


def test_the_restart_fault_keeps_a_voters_promises():
    """A node restarted in the simulator gets back what its voter stored (durable votes), not a
    blank memory: the stamper e1 (2 s ahead) and the filter's node crash and restart; e2 (1 s
    behind) takes over, stamping at e1's last punctuation until its own clock passes it."""
    sim, observer = simulation({"e1": ClockSpec(offset_us=2 * S), "e2": ClockSpec(offset_us=-1 * S)})
    publish(sim, observer, 0, 60, 11 * S)
    sim.env.call_at(12 * S, sim.crash, "e1")
    sim.env.call_at(13 * S, sim.crash, "f1")
    terms = {}
    sim.env.call_at(13 * S + 1, lambda: terms.setdefault("before", {
        n: sim.votes[n].streams["cpu"].promised for n in sim.votes}))
    sim.env.call_at(14 * S, sim.restart, "f1")
    sim.env.call_at(14 * S, sim.restart, "e1")
    sim.run(until=20 * S)
    for node in ("e1", "f1"):
        voter = sim.nodes[node].core.voter
        assert voter.memory is VoteMemory.DURABLE
        assert voter.streams["cpu"].promised >= terms["before"][node] > 0
    assert len(observer.all) == 60 and all(len(ts) == 1 for ts in observer.all.values())
    assert stamper(sim) == "e2"
    stamps = [observer.stamps[float(i)] for i in range(60)]
    assert stamps == sorted(stamps)                      # never behind a punctuation e1 emitted


def test_a_scenario_gives_servers_clocks_and_names_what_is_wrong(tmp_path):
    base = {"trace": "t", "query": "q.toml", "servers": ["a", "b"], "sources": []}
    scenario = parse_scenario({**base, "clocks": {"a": {"offset_ms": 250.5, "drift_ppm": -20}}}, tmp_path / "s.toml")
    assert scenario.clocks == {"a": ClockSpec(250_500, -20.0)}
    with pytest.raises(ScenarioError, match=r"s\.toml: \[clocks\.a\]: unknown key\(s\) \['skew'\]"):
        parse_scenario({**base, "clocks": {"a": {"skew": 1}}}, tmp_path / "s.toml")
    with pytest.raises(ScenarioError, match=r"\[clocks\.a\]: 'drift_ppm' must be in"):
        parse_scenario({**base, "clocks": {"a": {"drift_ppm": -2e6}}}, tmp_path / "s.toml")


def test_a_scenarios_clocks_reach_its_servers_and_must_name_servers_of_the_run():
    """``replicast simulate``'s path: chain.toml runs with one server's clock 40 ms ahead; a clock
    for a server not in the run is one line naming the file."""
    from replicast.simulator.run import Prepared, run
    from replicast.simulator.scenario import load_scenario
    scenario = load_scenario(Path(__file__).parent / "data" / "chain.toml")
    scenario.duration_s = 5.0
    prepared = Prepared(scenario)
    first = sorted(prepared.servers)[0]
    scenario.clocks = {"nowhere": ClockSpec(1)}
    with pytest.raises(ScenarioError, match=r"chain\.toml: \[clocks\] names \['nowhere'\], which are not servers"):
        run(Prepared(scenario), 1)
    scenario.clocks = {first: ClockSpec(40 * MS)}
    result = run(Prepared(scenario), 1)
    assert result.summary["delivered"] > 0
