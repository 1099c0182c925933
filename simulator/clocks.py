"""Per-node clocks for simulated runs: an offset and a drift against the simulation's true time.

Real servers' clocks are synchronised (NTP, §II-B) but never equal: each reads the true time plus
an offset, and runs fast or slow by some parts per million.  The node cores only ever see their
own node's clock (``now``), so a simulated run can give each node its own and show what skew does
(docs/simulator.md, "Clocks").  Rules:

1. A node's clock reads ``true + offset_us + (true - origin) × drift_ppm / 10⁶`` (µs, rounded
   down), ``origin`` being the run's start: at the start every clock is off by its offset alone.
2. The default clock (offset 0, drift 0) reads the true time exactly, so runs without clocks are
   unchanged, and the drivers skip the conversion for it.
3. :meth:`Clock.true` is the inverse the drivers arm timers with: the first true time at which the
   clock reads at least a given local time.  A clock never runs backwards (drift > −10⁶ ppm).

Nothing here reads a real clock: it is arithmetic on integers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Drift is kept in parts per billion: integer arithmetic, and 0.001 ppm resolution.
_BILLION = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ClockSpec:
    """How one node's clock is off (rule 1): ``offset_us`` ahead (negative: behind), running
    ``drift_ppm`` fast (negative: slow)."""

    offset_us: int = 0
    drift_ppm: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.offset_us, int) or isinstance(self.offset_us, bool):
            raise ValueError(f"clock offset_us must be an integer (µs), got {self.offset_us!r}")
        if not isinstance(self.drift_ppm, (int, float)) or isinstance(self.drift_ppm, bool) \
                or not -1_000_000 < self.drift_ppm < 1_000_000:
            raise ValueError(f"clock drift_ppm must be a number in (-1000000, 1000000), got {self.drift_ppm!r}")

    @property
    def exact(self) -> bool:
        """Whether this clock reads the true time (rule 2)."""
        return self.offset_us == 0 and self.drift_ppm == 0


class Clock:
    """One node's clock in one run: :class:`ClockSpec` from the run's ``origin_us`` (rule 1)."""

    __slots__ = ("offset", "origin", "rate", "exact")

    def __init__(self, spec: ClockSpec = ClockSpec(), origin_us: int = 0):
        self.offset, self.origin = spec.offset_us, origin_us
        self.rate = _BILLION + round(spec.drift_ppm * 1_000)     # local µs per 10⁹ true µs, since origin
        self.exact = spec.exact

    def local(self, true_us: int) -> int:
        """What this clock reads at simulated time ``true_us``."""
        if self.exact:
            return true_us
        return self.origin + self.offset + (true_us - self.origin) * self.rate // _BILLION

    def true(self, local_us: int) -> int:
        """The first simulated time at which this clock reads ``local_us`` or later (rule 3)."""
        if self.exact:
            return local_us
        # the smallest d with d * rate // 10⁹ >= local - origin - offset,
        # i.e. d = ceil((local - origin - offset) * 10⁹ / rate)
        return self.origin - (-(local_us - self.origin - self.offset) * _BILLION // self.rate)
