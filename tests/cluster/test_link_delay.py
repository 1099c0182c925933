"""The relay's delay rules on a hand-made trace: current frame, hold through outages, FIFO, clamping."""

from __future__ import annotations

import numpy as np
import pytest

from replicast.cluster.link_delay import Fifo, LinkDelay
from tests.traces.conftest import write_trace
from replicast.traces.store import TraceStore

S = 1_000_000


@pytest.fixture
def trace(tmp_path):
    """Two nodes, 1 s frames: 0 -> 1 RTT 300, 100, outage, outage, 200 ms; 1 -> 0 always 40 ms,
    except an outage in the last frame, which lasts to the end of the trace."""
    frames = np.full((5, 2, 2), np.nan)
    frames[:, 0, 1] = [300, 100, np.nan, np.nan, 200]
    frames[:, 1, 0] = [40, 40, 40, 40, np.nan]
    return TraceStore.open(write_trace(tmp_path / "t", frames, interval_us=S))


def test_delay_is_half_the_rtt_of_the_frame_at_send_time(trace):
    link = LinkDelay(trace, 0, 1, start_us=0)
    assert link.leave_us(0) == 150_000
    assert link.leave_us(S - 1) == S - 1 + 150_000
    assert link.leave_us(S) == S + 50_000
    assert LinkDelay(trace, 0, 1, start_us=S).leave_us(0) == 50_000       # the origin is at trace time 1 s


def test_an_outage_holds_bytes_until_the_pair_is_back_then_takes_that_frames_delay(trace):
    link = LinkDelay(trace, 0, 1, start_us=0)
    assert link.leave_us(2 * S) == 4 * S + 100_000
    assert link.leave_us(3 * S + 500_000) == 4 * S + 100_000
    # past the trace's end the last frame holds (as in the simulator)
    assert link.leave_us(60 * S) == 60 * S + 100_000


def test_an_outage_to_the_end_of_the_trace_holds_for_ever(trace):
    back = LinkDelay(trace, 1, 0, start_us=0)
    assert back.leave_us(3 * S) == 3 * S + 20_000
    assert back.leave_us(4 * S) is None
    assert back.leave_us(100 * S) is None


def test_fifo_never_lets_a_byte_overtake_an_earlier_one(trace):
    link, fifo = LinkDelay(trace, 0, 1, start_us=0), Fifo()
    # 300 ms RTT then 100 ms: a byte sent at 1.0 s would arrive (1.05 s) before one sent at 0.99 s (1.14 s)
    assert link.leave_us(S) < link.leave_us(S - 10_000)
    assert fifo.arrival_us(link.leave_us(S - 10_000)) == S + 140_000
    assert fifo.arrival_us(link.leave_us(S)) == S + 140_000                 # waits for the earlier byte
    assert fifo.arrival_us(link.leave_us(S + 100_000)) == S + 150_000       # then the new delay again
    fifo = Fifo()
    assert fifo.arrival_us(None) is None and fifo.arrival_us(link.leave_us(0)) is None   # held for ever blocks all


def test_trace_time_before_zero_is_refused(trace):
    with pytest.raises(ValueError):
        LinkDelay(trace, 0, 1, start_us=-1)
