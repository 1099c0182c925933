"""Network coordinates: Vivaldi with a height term, fitted from measured round-trip times.

Vivaldi (Dabek et al., SIGCOMM 2004) places every node in a low-dimensional space so that the
distance between two coordinates predicts their RTT.  This is a numpy port of HashiCorp Serf's
``coordinate/`` package, which we take as the reference for the constants and the update rules:

1. An 8-dimensional Euclidean vector plus a non-Euclidean *height* (the access link, Dabek §5.4);
   distance = ``|x_i - x_j| + h_i + h_j`` plus both nodes' *adjustments* when that is positive
   (Lee et al., ToN 2010: the mean of the last 20 residuals, halved).
2. An update moves node ``i`` away from or towards ``j`` by ``cc * w * (rtt - dist)`` where
   ``w = e_i / (e_i + e_j)`` weighs by confidence, and the error estimate ``e_i`` follows the
   observed relative error with gain ``ce * w`` (capped at ``error_max``).
3. Gravity pulls every node towards the origin by ``(|x| / rho)^2`` to stop drift (Ledlie et al.,
   NSDI 2007), and each pair's RTT goes through a moving median of the last 3 samples first.
4. Serf works in seconds and so do we internally (its constants, e.g. ``height_min = 10 µs`` and
   ``rho = 150 s``, apply unchanged); the public API speaks milliseconds.

Serf updates one node per RTT sample.  Here one *round* updates every node at once against one peer
each, all reading the coordinates the round started with (a Jacobi step instead of Serf's
Gauss-Seidel one), so a round is a handful of numpy operations on ``(n, d)`` arrays.  Randomness (the
peer each node probes, the direction out of a coincident point) comes from the ``random.Random``
passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

_ZERO = 1.0e-6          # Serf's zeroThreshold (seconds)
_MS = 1.0e-3


@dataclass(frozen=True)
class VivaldiConfig:
    """Serf's ``coordinate.DefaultConfig()``: the tuning constants, in seconds where timed."""

    dimensionality: int = 8
    error_max: float = 1.5
    ce: float = 0.25
    cc: float = 0.25
    adjustment_window: int = 20
    height_min: float = 10.0e-6
    latency_filter: int = 3
    gravity_rho: float = 150.0


@dataclass(frozen=True)
class Coordinates:
    """Fitted coordinates of ``n`` nodes (seconds internally; read them through the ``*_ms`` methods)."""

    vec: np.ndarray             # (n, d)
    height: np.ndarray          # (n,)
    adjustment: np.ndarray      # (n,)
    error: np.ndarray           # (n,) Vivaldi's confidence estimate (dimensionless)

    def __len__(self) -> int:
        return len(self.height)

    def rtt_ms(self) -> np.ndarray:
        """The ``(n, n)`` matrix of predicted RTTs in ms (0 on the diagonal)."""
        raw = np.linalg.norm(self.vec[:, None] - self.vec[None], axis=-1) + self.height[:, None] + self.height[None]
        adjusted = raw + self.adjustment[:, None] + self.adjustment[None]
        rtt = np.where(adjusted > 0, adjusted, raw) / _MS
        np.fill_diagonal(rtt, 0.0)
        return rtt

    def to_point_ms(self, point: np.ndarray) -> np.ndarray:
        """Predicted RTT (ms) from every node to a height-less point of the Euclidean part (seconds)."""
        return (np.linalg.norm(self.vec - point, axis=-1) + self.height) / _MS


class Vivaldi:
    """The coordinates of ``n`` nodes, improved one round of RTT observations at a time."""

    def __init__(self, n: int, rng: Any, config: VivaldiConfig = VivaldiConfig()):
        self.n = n
        self.config = c = config
        self._np_rng = np.random.default_rng(rng.getrandbits(64))
        self.vec = np.zeros((n, c.dimensionality))
        self.height = np.full(n, c.height_min)
        self.adjustment = np.zeros(n)
        self.error = np.full(n, c.error_max)
        self._residuals = np.zeros((n, c.adjustment_window))
        self._residual_at = np.zeros(n, dtype=np.int64)
        self._samples = np.full((n, n, c.latency_filter), np.nan)
        self._sample_at = np.zeros((n, n), dtype=np.int64)
        self.resets = 0

    @property
    def coordinates(self) -> Coordinates:
        return Coordinates(self.vec.copy(), self.height.copy(), self.adjustment.copy(), self.error.copy())

    def random_peers(self) -> np.ndarray:
        """One peer per node, never the node itself (Serf's ``Simulate`` probes one random node per cycle)."""
        peers = self._np_rng.integers(0, self.n - 1, size=self.n)
        return peers + (peers >= np.arange(self.n))

    def observe(self, nodes: np.ndarray, peers: np.ndarray, rtt_ms: np.ndarray) -> None:
        """One round: ``nodes[k]`` measured ``rtt_ms[k]`` to ``peers[k]`` (NaN: no answer, skipped).

        ``nodes`` must not repeat (every node moves at most once a round).
        """
        ok = np.isfinite(rtt_ms) & (rtt_ms >= 0) & (nodes != peers)
        i, j = nodes[ok], peers[ok]
        if not len(i):
            return
        c = self.config
        rtt = self._filtered(i, j, np.asarray(rtt_ms, dtype=float)[ok] * _MS)
        # Serf updateVivaldi
        vec_j, height_j, adjustment_j, error_j = self.vec[j], self.height[j], self.adjustment[j], self.error[j]
        dist = self._distance(self.vec[i], self.height[i], self.adjustment[i], vec_j, height_j, adjustment_j)
        rtt = np.maximum(rtt, _ZERO)
        wrongness = np.abs(dist - rtt) / rtt
        weight = self.error[i] / np.maximum(self.error[i] + error_j, _ZERO)
        self.error[i] = np.minimum(c.ce * weight * wrongness + self.error[i] * (1 - c.ce * weight), c.error_max)
        self._apply_force(i, c.cc * weight * (rtt - dist), vec_j, height_j)
        # Serf updateAdjustment: the raw distance after the move
        if c.adjustment_window:
            raw = np.linalg.norm(self.vec[i] - vec_j, axis=-1) + self.height[i] + height_j
            self._residuals[i, self._residual_at[i]] = rtt - raw
            self._residual_at[i] = (self._residual_at[i] + 1) % c.adjustment_window
            self.adjustment[i] = self._residuals[i].sum(axis=1) / (2.0 * c.adjustment_window)
        # Serf updateGravity: towards an origin of height height_min and no adjustment
        to_origin = np.linalg.norm(self.vec[i], axis=-1) + self.height[i] + c.height_min
        to_origin = np.where(to_origin + self.adjustment[i] > 0, to_origin + self.adjustment[i], to_origin)
        origin = np.zeros_like(vec_j)
        self._apply_force(i, -np.square(to_origin / c.gravity_rho), origin, np.full(len(i), c.height_min))
        self._reset_invalid()

    # -- Serf's building blocks --------------------------------------------------------------------

    def _filtered(self, i: np.ndarray, j: np.ndarray, rtt: np.ndarray) -> np.ndarray:
        """Moving median of the last ``latency_filter`` samples of each pair (Serf ``latencyFilter``)."""
        slot = self._sample_at[i, j] % self.config.latency_filter
        self._samples[i, j, slot] = rtt
        self._sample_at[i, j] += 1
        window = np.sort(self._samples[i, j], axis=1)           # NaNs (unfilled slots) sort last
        filled = np.minimum(self._sample_at[i, j], self.config.latency_filter)
        return window[np.arange(len(i)), filled // 2]

    @staticmethod
    def _distance(vec_i, height_i, adjustment_i, vec_j, height_j, adjustment_j) -> np.ndarray:
        raw = np.linalg.norm(vec_i - vec_j, axis=-1) + height_i + height_j
        adjusted = raw + adjustment_i + adjustment_j
        return np.where(adjusted > 0, adjusted, raw)

    def _apply_force(self, i: np.ndarray, force: np.ndarray, vec_j: np.ndarray, height_j: np.ndarray) -> None:
        """Serf ``ApplyForce``: move along the unit vector from ``j`` to ``i``; stretch the height."""
        delta = self.vec[i] - vec_j
        mag = np.linalg.norm(delta, axis=-1)
        apart = mag > _ZERO
        unit = np.empty_like(delta)
        unit[apart] = delta[apart] / mag[apart, None]
        if not apart.all():                       # coincident points: a random direction
            random = self._np_rng.random((int((~apart).sum()), delta.shape[1])) - 0.5
            unit[~apart] = random / np.linalg.norm(random, axis=-1, keepdims=True)
        self.vec[i] += unit * force[:, None]
        grown = (self.height[i] + height_j) * force / np.where(apart, mag, 1.0) + self.height[i]
        self.height[i] = np.where(apart, np.maximum(grown, self.config.height_min), self.height[i])

    def _reset_invalid(self) -> None:
        bad = ~(np.isfinite(self.vec).all(axis=1) & np.isfinite(self.height) & np.isfinite(self.error)
                & np.isfinite(self.adjustment))
        if bad.any():
            self.resets += int(bad.sum())
            self.vec[bad], self.height[bad] = 0.0, self.config.height_min
            self.adjustment[bad], self.error[bad] = 0.0, self.config.error_max


def fit(frames: Iterable[np.ndarray], n: int, rng: Any, *, rounds: int = 3000,
        config: VivaldiConfig = VivaldiConfig()) -> Coordinates:
    """Coordinates fitted by replaying RTT ``frames`` (``(n, n)`` arrays in ms, NaN = no answer).

    Round ``r`` uses frame ``r mod len(frames)``: each node probes one random peer and sees the RTT
    that frame holds, as a node running Vivaldi over the traced network would.
    """
    frames = list(frames)
    vivaldi = Vivaldi(n, rng, config)
    everyone = np.arange(n)
    for r in range(rounds):
        peers = vivaldi.random_peers()
        vivaldi.observe(everyone, peers, frames[r % len(frames)][everyone, peers])
    return vivaldi.coordinates


def relative_errors(coordinates: Coordinates, rtt_ms: np.ndarray) -> np.ndarray:
    """``|predicted - measured| / measured`` over every off-diagonal pair with a positive measurement."""
    predicted = coordinates.rtt_ms()
    measured = np.asarray(rtt_ms, dtype=float)
    use = np.isfinite(measured) & (measured > 0) & ~np.eye(len(measured), dtype=bool)
    return np.abs(predicted[use] - measured[use]) / measured[use]
