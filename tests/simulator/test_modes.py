"""The engine modes in the simulator (docs/modes.md, Fig. 2 in miniature): every mode delivers the same
records as the one-process reference; replication is never slower than no replication for the same
record; after a crash ``none`` stops, ``failover`` pauses for about its failure detector's time, and
``replication`` does not pause.

The scenario (data/modes.toml) is the paper's §VI-B setting on fixed delays: the load Union at W
(and P, replicated), the ping Union at P (and W), the Join at O (and Q); sources and applications
on ``src``.  A crash of W takes the load Union's first replica, the one the applications' path
goes through without replication.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from replicast.engine.core.modes import MODES, Mode
from replicast.engine.replay import replay
from replicast.simulator.network import FixedDelays
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, ScenarioError, load_scenario, parse_scenario

DATA = Path(__file__).parent / "data"
SERVERS = ["src", "W", "P", "O", "Q"]
RTT_MS = {"src": {"W": 20, "P": 60, "O": 30, "Q": 50}, "W": {"P": 40, "O": 30, "Q": 70},
          "P": {"O": 80, "Q": 30}, "O": {"Q": 40}}
CRASH_S = 10
#: A replicated operator asks its peer for a snapshot when it starts (docs/lifecycle.md), one
#: round trip that no replication does not make: records of the first moments are compared after it.
WARM_UP_S = 1


@lru_cache(maxsize=None)
def simulate(mode: str, crash: bool):
    scenario = load_scenario(DATA / "modes.toml")
    scenario.mode = Mode(mode)
    if crash:
        scenario.faults = [Fault("crash", ("W",), CRASH_S * 1_000_000)]
    prepared = Prepared(scenario, trace=FixedDelays(RTT_MS, SERVERS))
    return prepared, run(prepared, 2, keep_records=True)


def arrivals(result) -> dict[tuple[str, tuple], list[int]]:
    """(application, record) -> the arrival times of its copies, in order."""
    table = result.recorder.deliveries()
    seen, out = Counter(), {}
    for app, arrival in zip(table.column("app").to_pylist(), table.column("arrival").to_pylist()):
        record = result.recorder.outputs[app][seen[app]]
        seen[app] += 1
        out.setdefault((app, record), []).append(arrival)
    return out


def reference(prepared, result) -> dict[str, Counter]:
    ref = replay(prepared.query, result.inputs, replicas=1, punctuation_us=round(prepared.scenario.punctuation_ms * 1000))
    return {app: Counter(records) for app, records in ref.outputs.items()}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_delivers_the_reference(mode):
    prepared, result = simulate(mode, crash=False)
    assert result.summary["completed"] and result.summary["mode"] == mode
    outputs = {app: Counter(records) for app, records in result.recorder.outputs.items()}
    assert outputs == reference(prepared, result)
    assert all(outputs.values())


@pytest.mark.parametrize("baseline, crash", [("none", False), ("none", True), *((m, False) for m in MODES[2:])])
def test_replication_is_never_slower_than_a_baseline(baseline, crash):
    """Every record reaches an application through replication no later than through ``baseline``:
    replication takes the fastest of all paths, the baselines one of them (and deterministic replicas
    wait for punctuations, process pairs for acknowledgements)."""
    prepared, replicated = simulate("replication", crash)
    _, other = simulate(baseline, crash)
    fast, slow = arrivals(replicated), arrivals(other)
    compared = 0
    for key, times in slow.items():
        if key[1][0] >= prepared.start + WARM_UP_S * 1_000_000:
            assert all(f <= s for f, s in zip(sorted(fast[key]), sorted(times))), key
            compared += 1
    assert compared > 200


def latencies_after_crash(mode: str, app: str) -> tuple[list[float], float]:
    """Latencies (s) of ``app``'s records stamped after the crash, and the worst one before it."""
    prepared, result = simulate(mode, crash=True)
    crash = prepared.start + CRASH_S * 1_000_000
    before, after = [], []
    for (name, record), times in arrivals(result).items():
        if name == app:
            (after if record[0] >= crash else before).extend((t - record[0]) / 1e6 for t in times)
    return after, max(before)


@pytest.mark.parametrize("mode", [m for m in MODES if m != "none"])
def test_every_replicated_mode_survives_the_crash_exactly(mode):
    prepared, result = simulate(mode, crash=True)
    assert result.summary["completed"]
    assert {app: Counter(records) for app, records in result.recorder.outputs.items()} == reference(prepared, result)


@pytest.mark.parametrize("app", ["loads", "pairs"])
def test_after_a_crash_none_stops_failover_pauses_replication_goes_on(app):
    """Fig. 2 after the crash of W."""
    prepared, _ = simulate("none", crash=True)
    timeout = prepared.scenario.peer_timeout_ms / 1000
    heartbeat = prepared.scenario.heartbeat_ms / 1000

    after, _ = latencies_after_crash("none", app)
    assert after == []                                        # nothing reaches the application any more

    after, worst_before = latencies_after_crash("replication", app)
    assert len(after) > 100 and max(after) < worst_before + 0.1   # another path, no pause

    for mode in ("failover", "deterministic"):         # deterministic replicas fail over too (§VI-B)
        after, worst_before = latencies_after_crash(mode, app)
        assert len(after) > 100
        # Records stamped just after the crash wait for the detector (nothing heard for peer_timeout,
        # checked at heartbeats), then take the standby's path.
        assert timeout - heartbeat < max(after) < timeout + heartbeat + worst_before + 0.1, mode
        assert sorted(after)[len(after) // 2] < worst_before + 0.1, mode     # and then it runs as before


@pytest.mark.parametrize("crash", [False, True])
def test_a_process_pair_primary_holds_its_output_for_a_round_trip_to_its_backup(crash):
    """Synchronization against failover, record by record: the same paths (each replica follows its
    preferred upstream), plus one primary–backup round trip per pair on the path — the load Union's
    pair W–P (40 ms) for ``loads``, and the Join's pair O–Q (40 ms) after it for ``pairs``.  Once the
    crash of W is detected, the load Union's survivor has no partner to wait for (§VI-B: "the
    latency dropped since [they] no more had synchronization partners")."""
    prepared, synchronized = simulate("synchronization", crash)
    _, failover = simulate("failover", crash)
    slow, fast = arrivals(synchronized), arrivals(failover)
    settled = prepared.start + (CRASH_S + prepared.scenario.peer_timeout_ms / 1000 + 1) * 1_000_000
    held = {app: {(min(slow[key]) - min(times)) // 1000 for key, times in fast.items()
                  if key[0] == app and (not crash or key[1][0] >= settled)} for app in ("loads", "pairs")}
    load_pair, join_pair = RTT_MS["W"]["P"], RTT_MS["O"]["Q"]
    if crash:
        assert held == {"loads": {0}, "pairs": {join_pair}}
        assert synchronized.summary["lifecycle"]["takeovers"] >= 1
    else:
        assert held == {"loads": {load_pair}, "pairs": {load_pair + join_pair}}
        assert synchronized.summary["lifecycle"]["determinants"] > 500


def test_mode_is_checked_in_scenarios(tmp_path):
    doc = {"trace": "seattle", "query": "q.toml", "servers": 2, "sources": [], "mode": "replicated"}
    with pytest.raises(ScenarioError, match=f"'mode' must be one of {', '.join(MODES)}, got 'replicated'"):
        parse_scenario(doc, tmp_path / "s.toml")
    doc["mode"] = "failover"
    assert parse_scenario(doc, tmp_path / "s.toml").mode is Mode.FAILOVER


def test_placement_changes_are_refused_outside_replication():
    scenario = load_scenario(DATA / "modes.toml")
    scenario.mode = Mode.FAILOVER
    scenario.faults = [Fault("add", ("load", "Q"), 1_000_000)]
    with pytest.raises(ScenarioError, match="only mode \"replication\" does"):
        run(Prepared(scenario, trace=FixedDelays(RTT_MS, SERVERS)), 2)
