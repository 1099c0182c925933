"""Punctuation waits over arrays: when a sorter or a window can release a row (§IV-A, §IV-C, §IV-F).

A replica's punctuations are a step function of time: ``(times, values)``, both non-decreasing,
one event per punctuation it forwards.  At a replica:

* each input port's duplicate filter forwards a punctuation the first time a copy carries a value
  above the largest seen (§IV-B): the port's punctuation at time ``t`` is the **maximum** over the
  upstream replicas of the last value arrived from each by ``t`` (their values may differ: a Union
  replica's frontier depends on the order its inputs' punctuations arrived in);
* the operator forwards its *frontier*, the **minimum** over ports (``operators.base``, §IV-A);
* a sorter releases a row of timestamp ``ts`` at the first frontier ``≥ ts`` (§IV-C), a time
  window ``[a, b)`` closes at the first frontier ``≥ b − 1`` (Alg. 3, ``operators.aggregate``);
  a row's own copy always arrives before the punctuation that covers it on its link (FIFO), so the
  punctuation's arrival is the release.

Every function works on whole arrays: a step function is evaluated at all event times at once with
``searchsorted``.
"""

from __future__ import annotations

import numpy as np

from replicast.simulator.timing_links import NEVER

#: The frontier before any punctuation (``operators.base.NO_PUNCTUATION``).
NOTHING = np.int64(-(2**63))

#: A step function of punctuations: ``(times, values)``.
Steps = tuple[np.ndarray, np.ndarray]

EMPTY: Steps = (np.empty(0, np.int64), np.empty(0, np.int64))


def _at(steps: Steps, when: np.ndarray) -> np.ndarray:
    """The largest value of ``steps`` arrived by each of ``when`` (NOTHING before the first)."""
    times, values = steps
    live = times < NEVER
    times, values = times[live], values[live]
    if not len(times):
        return np.full(len(when), NOTHING, np.int64)
    # arrivals over a FIFO link are in send order, and values grow with it; the running maxima
    # make both monotone also where a crash cut the sequence short
    times, values = np.maximum.accumulate(times), np.maximum.accumulate(values)
    i = np.searchsorted(times, when, side="right") - 1
    return np.where(i >= 0, values[np.maximum(i, 0)], NOTHING)


def frontier(ports: list[list[Steps]]) -> Steps:
    """The punctuations a replica forwards, from the copies arriving on each of its ``ports``."""
    times = [t[t < NEVER] for copies in ports for t, _ in copies]
    when = np.unique(np.concatenate(times)) if times else np.empty(0, np.int64)
    if not len(when) or not ports:
        return EMPTY
    low = None
    for copies in ports:
        port = np.full(len(when), NOTHING, np.int64)
        for steps in copies:
            np.maximum(port, _at(steps, when), out=port)
        low = port if low is None else np.minimum(low, port)
    before = np.concatenate(([NOTHING], low[:-1]))
    rises = low > before
    return when[rises], low[rises]


def release(steps: Steps, ts: np.ndarray) -> np.ndarray:
    """When each row of ``ts`` is covered: the first punctuation ``≥ ts`` (NEVER: none comes)."""
    times, values = steps
    if not len(times):
        return np.full(len(ts), NEVER, np.int64)
    i = np.searchsorted(values, ts, side="left")
    return np.where(i < len(times), times[np.minimum(i, len(times) - 1)], NEVER)


def shifted(steps: Steps, cost_us: int, crash: int | None) -> Steps:
    """``steps`` emitted ``cost_us`` later by a replica that stops at ``crash`` (None: never)."""
    times, values = steps
    if cost_us:
        times = times + cost_us
    if crash is not None:
        keep = times < crash
        times, values = times[keep], values[keep]
    return times, values
