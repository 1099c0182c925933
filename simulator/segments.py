"""Time-parallel simulation: a run cut into time segments that can run anywhere, in any order.

Segment *i* of *N* owns the records whose timestamps fall in ``[begin, end)``.  It simulates from
``warm = begin − warmup`` (every node a fresh core, every source replaying its records from
``warm`` on) to ``stop = end + warmup`` (the sources go on past ``end``, as they do in one long
run), and keeps only the deliveries whose ``ts`` is in ``[begin, end)`` and the bandwidth buckets
that start there.  The last segment ends as a single run does (the sources close, the
applications drain).

Rules that make the merged segments equal one sequential run (for a static deployment):

1. *Memory ends.*  Everything a delivery depends on must be younger than the warmup: join and
   time-window contents (window sizes), held messages (the longest outage held on a link), a
   broken connection's redial and replay (peer time-out, reconnect period, acks once per
   punctuation).  :func:`default_warmup_us` adds these up.  Count windows remember every record
   since the stream began, so a query with one cannot be segmented (:func:`check_segmentable`).
2. *Clocks agree.*  A node's heartbeat and punctuation timers tick from the moment it starts, and
   a redial retries every :data:`~simulator.driver.RECONNECT_US`; segment boundaries and warm
   starts are whole multiples of all these periods (and of the bandwidth bucket) after the run's
   start, so a segment's timers tick at the same instants as the long run's.
3. *Sources are replayed, not restarted.*  A source's records, punctuations and random walk are
   generated from the run's start and skipped up to ``warm`` (:func:`simulator.sources.messages`),
   so every record is the same record in every segment that sees it.

What differs by design: wire offsets restart at 0 in each segment, so ``bytes`` in
``bandwidth.parquet`` may differ by a few bytes per batch (msgpack integer widths); deliveries do
not.  Dynamic deployments (replicas added, removed or restarted while the run goes on) are not
covered by rule 1: a node that restarted before a segment's warm start has a history the segment
does not replay (docs/simulator.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from replicast.simulator.driver import RECONNECT_US
from replicast.simulator.scenario import Scenario, ScenarioError


@dataclass(frozen=True)
class Segment:
    """One time segment of a run (µs of simulated time)."""

    index: int
    count: int
    begin: int       # keep records with begin <= ts < end
    end: int
    warm: int        # the simulation starts here
    stop: int        # and ends here; at the run's end it ends as the run does (sources close, drain)


def grid_us(scenario: Scenario) -> int:
    """The period every segment boundary is a multiple of, after the run's start (rule 2)."""
    periods = [round(scenario.heartbeat_ms * 1000), round(scenario.punctuation_ms * 1000), RECONNECT_US,
               round(scenario.bucket_s * 1e6)]
    return math.lcm(*periods)


def check_segmentable(query: Any, where: str) -> None:
    """Refuse queries whose output depends on every record since the start (rule 1)."""
    for name, spec in query.operators.items():
        window = spec.params.get("window")
        if isinstance(window, dict) and window.get("kind") == "count":
            raise ScenarioError(f"{where}: operator {name!r} has a count window, whose windows depend on every "
                                f"record since the stream began; --segments cannot split such a query (run it "
                                f"without --segments)")


def window_us(query: Any) -> int:
    """The longest time a record stays in an operator's state (join windows, time-window sizes)."""
    longest = 0
    for spec in query.operators.values():
        if "window_ms" in spec.params:
            longest = max(longest, round(float(spec.params["window_ms"]) * 1000))
        window = spec.params.get("window")
        if isinstance(window, dict) and window.get("kind") == "time":
            longest = max(longest, round(float(window.get("size_ms", 0)) * 1000))
    return longest


def longest_outage_us(trace: Any, servers: list[int], first_us: int, last_us: int) -> int:
    """The longest run of missing samples of any directed pair of ``servers`` in trace time
    ``[first_us, last_us)``, among outages that end (one still open at the trace's end holds its
    messages for ever, in every segment alike)."""
    if not hasattr(trace, "chunks"):
        return 0                           # a constant-delay network has no outages
    interval = trace.interval_us
    f0, f1 = max(0, first_us // interval), min(trace.n_frames, -(-last_us // interval))
    cols = np.array(sorted(set(servers)), dtype=np.intp)
    n = len(cols)
    off = ~np.eye(n, dtype=bool)
    run = np.zeros((n, n), dtype=np.int64)           # current run of missing frames per pair
    longest = 0
    for first, chunk in trace.chunks():
        lo, hi = max(f0, first), min(f1, first + len(chunk))
        if lo >= hi:
            if first >= f1:
                break
            continue
        missing = np.isnan(chunk[lo - first:hi - first][:, cols[:, None], cols]) & off
        for frame in missing:
            ended = run[~frame]
            if ended.size:
                longest = max(longest, int(ended.max()))
            run = np.where(frame, run + 1, 0)
    if f1 < trace.n_frames:                          # runs cut by the window's end still end later
        longest = max(longest, int(run.max(initial=0)))
    return longest * interval


def default_warmup_us(scenario: Scenario, query: Any, trace: Any, servers: list[int], start: int, end: int,
                      origin: int) -> int:
    """Rule 1's sum: the longest outage held, a peer time-out, a heartbeat, a reconnect, two
    punctuation intervals (the ack that frees a replayed log), the longest window, and one more
    reconnect period for the handshake and the path's own delays."""
    drain = round(scenario.drain_s * 1e6)
    outage = longest_outage_us(trace, servers, max(0, start - origin), end + drain - origin)
    return (outage + round(scenario.peer_timeout_ms * 1000) + round(scenario.heartbeat_ms * 1000)
            + 2 * RECONNECT_US + 2 * round(scenario.punctuation_ms * 1000) + window_us(query))


def plan(start: int, end: int, count: int, warmup_us: int, grid: int) -> list[Segment]:
    """``count`` segments of ``[start, end)`` with boundaries and warm starts on ``grid`` (rule 2)."""
    if count < 1:
        raise ScenarioError(f"--segments must be at least 1, got {count}")
    steps = max(1, (end - start) // grid)           # whole grid periods in the run
    if count > steps:
        raise ScenarioError(f"--segments {count}: the run has only {steps} periods of {grid / 1e6:g} s (the "
                            f"heartbeat, punctuation, reconnect and bucket periods' common multiple)")
    warm = -(-warmup_us // grid) * grid
    bounds = [start + (steps * i // count) * grid for i in range(count)] + [end]
    return [Segment(i, count, bounds[i], bounds[i + 1], max(start, bounds[i] - warm), min(end, bounds[i + 1] + warm))
            for i in range(count)]
