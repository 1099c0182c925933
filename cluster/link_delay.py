"""When bytes cross an emulated wide-area link: the trace's delay at the time they were sent.

The rules are the simulator's (:mod:`simulator.network` rules 1–3, ``outage = "hold"``), applied
to wall-clock time:

* trace time ``t = start + elapsed`` (``start`` is the trace time at the relay's origin); past the
  trace's end the last frame holds, as in the simulator and :class:`traces.store.TraceStore`;
* bytes read at ``t`` leave after the one-way delay ``RTT/2`` of the directed pair ``src -> dst``
  in the frame at ``t`` (:meth:`~traces.store.TraceStore.one_way_us`);
* during an outage (a missing sample) the link holds them until the trace shows the pair again,
  then they take the delay of that frame; an outage that lasts to the trace's end holds for ever;
* FIFO per connection direction (:class:`Fifo`): a byte never overtakes an earlier one.

Pure: time comes in as arguments (µs since the relay's origin).
"""

from __future__ import annotations

import bisect
from typing import Protocol


class Trace(Protocol):
    duration_us: int

    def one_way_us(self, src: int, dst: int, t_us: int) -> int | None: ...

    def outages(self, src: int, dst: int) -> list[tuple[int, int]]: ...


class LinkDelay:
    """One direction ``src -> dst`` (trace node indexes) of an emulated link."""

    def __init__(self, trace: Trace, src: int, dst: int, start_us: int):
        if start_us < 0:
            raise ValueError(f"start_us={start_us}: trace time starts at 0")
        self.trace, self.src, self.dst, self.start_us = trace, src, dst, start_us
        self._outages: list[tuple[int, int]] | None = None   # read on the first outage only
        self._starts: list[int] = []

    def trace_time_us(self, elapsed_us: int) -> int:
        """The trace time at ``elapsed_us`` after the origin (clamped into the trace)."""
        return min(self.start_us + max(elapsed_us, 0), self.trace.duration_us - 1)

    def leave_us(self, elapsed_us: int) -> int | None:
        """When (µs since the origin) bytes read at ``elapsed_us`` arrive at the far end, before
        FIFO ordering; None if the link never comes back."""
        t = self.trace_time_us(elapsed_us)
        delay = self.trace.one_way_us(self.src, self.dst, t)
        if delay is not None:
            return elapsed_us + delay
        end = self._outage_end(t)
        if end is None or end >= self.trace.duration_us:
            return None
        delay = self.trace.one_way_us(self.src, self.dst, end)
        if delay is None:                    # cannot happen with the store's outages(); be safe
            return None
        return elapsed_us + (end - t) + delay

    def _outage_end(self, t: int) -> int | None:
        if self._outages is None:
            self._outages = self.trace.outages(self.src, self.dst)
            self._starts = [start for start, _ in self._outages]
        i = bisect.bisect_right(self._starts, t) - 1
        if i >= 0 and self._outages[i][0] <= t < self._outages[i][1]:
            return self._outages[i][1]
        return None


class Fifo:
    """One direction of one connection: arrival times never decrease (TCP keeps order)."""

    __slots__ = ("last_us", "stalled")

    def __init__(self):
        self.last_us = 0
        self.stalled = False             # a held-for-ever byte blocks everything after it

    def arrival_us(self, leave_us: int | None) -> int | None:
        """The arrival time of bytes that would arrive at ``leave_us`` (None: never)."""
        if self.stalled or leave_us is None:
            self.stalled = True
            return None
        self.last_us = max(self.last_us, leave_us)
        return self.last_us
