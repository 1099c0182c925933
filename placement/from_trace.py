"""A :class:`~placement.model.Network` from RTT frames of a trace (``traces.store.TraceStore.frame``).

* The measured latency of a pair is the median RTT over the frames, halved (one way, DESIGN.md §8);
  a pair never measured takes the other direction's, else the coordinates' prediction.
* Coordinates are fitted by replaying the frames through Vivaldi (:func:`placement.coordinates.fit`).
  The frames of a real trace are noisy (Seattle: a sample is ±22 % off its pair's median half the
  time), so the default latency filter is a moving median of 25 samples rather than Serf's 3: on the
  shipped trace that brings the median relative error from 44 % to 27 % (docs/placement.md).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Sequence

import numpy as np

from replicast.placement.coordinates import Coordinates, VivaldiConfig, fit, relative_errors
from replicast.placement.model import Network, uniform_network

TRACE_VIVALDI = dataclasses.replace(VivaldiConfig(), latency_filter=25)


def median_rtt(frames: np.ndarray) -> np.ndarray:
    """Per-pair median RTT (ms) over ``frames[k, src, dst]``, NaN for pairs never measured."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # all-NaN pairs stay NaN
        return np.nanmedian(frames, axis=0)


def fill(rtt: np.ndarray, coordinates: Coordinates) -> np.ndarray:
    """``rtt`` with missing pairs taken from the reverse direction, then from the coordinates."""
    rtt = np.where(np.isnan(rtt), rtt.T, rtt)
    rtt = np.where(np.isnan(rtt), coordinates.rtt_ms(), rtt)
    np.fill_diagonal(rtt, 0.0)
    return rtt


def network_from_frames(servers: Sequence[str], frames: np.ndarray, rng: Any, *, rounds: int = 3000,
                        config: VivaldiConfig = TRACE_VIVALDI, capacity: float = 1.0) -> tuple[Network, float]:
    """The network of ``servers`` (frames' node order) and the coordinates' median relative RTT error."""
    frames = np.asarray(frames, dtype=float)
    coordinates = fit(frames, len(servers), rng, rounds=rounds, config=config)
    measured = median_rtt(frames)
    error = float(np.median(relative_errors(coordinates, measured)))
    return uniform_network(servers, fill(measured, coordinates) / 2.0, capacity=capacity, coordinates=coordinates), error
