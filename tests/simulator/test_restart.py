"""A restarted server must not make applications receive wrong records (§III replication
transparency).  The restarted node's aggregate replicas missed part of their input: they may stay
silent, but never emit a window computed from part of it; their peers keep the output complete."""

from collections import Counter
from pathlib import Path

import pytest

from engine.replay import replay
from simulator.run import Prepared, run
from simulator.scenario import Fault, load_scenario

DATA = Path(__file__).parent / "data"
S = 1_000_000


@pytest.mark.parametrize("crash_s, restart_s", [(2, 4), (5, 8), (30, 33)])
def test_restarting_a_server_with_aggregate_replicas_changes_no_application_output(crash_s, restart_s):
    scenario = load_scenario(DATA / "fig1-faults.toml")
    # seattle-5 hosts replicas of correlate, rtt_by_dst and load_trend (both aggregates), load and ping.
    scenario.faults = [Fault("crash", ("seattle-5",), crash_s * S), Fault("restart", ("seattle-5",), restart_s * S)]
    prepared = Prepared(scenario)
    result = run(prepared, 3, keep_records=True)
    assert result.summary["completed"]
    reference = replay(prepared.query, result.inputs, replicas=1, punctuation_us=round(scenario.punctuation_ms * 1000))
    for app, records in reference.outputs.items():
        got = Counter(result.recorder.outputs[app])
        assert not got - Counter(records), f"{app}: wrong records delivered: {list(got - Counter(records))[:3]}"
        assert got == Counter(records), f"{app}: records missing"
