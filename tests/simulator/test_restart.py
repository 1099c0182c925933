"""A restarted server must not make applications receive wrong records (§III replication
transparency).  The restarted node's aggregate replicas missed part of their input: they rejoin
from a peer's snapshot, and the output is exactly the reference's."""

import pytest

from replicast.simulator.scenario import Fault
from tests.simulator.test_lifecycle_faults import S, run_with


@pytest.mark.parametrize("crash_s, restart_s", [(2, 4), (5, 8), (30, 33)])
def test_restarting_a_server_with_aggregate_replicas_changes_no_application_output(crash_s, restart_s):
    # seattle-5 hosts replicas of correlate, rtt_by_dst and load_trend (both aggregates), load and ping.
    run_with([Fault("crash", ("seattle-5",), crash_s * S), Fault("restart", ("seattle-5",), restart_s * S)])
