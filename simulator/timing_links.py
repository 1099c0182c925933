"""The timing tier's network over arrays: one-way delays frame by frame, held outages and FIFO
links (the rules of :mod:`simulator.network`, applied to many sends at once; docs/simulator.md,
"The timing tier")."""

from __future__ import annotations

from typing import Any

import numpy as np

#: "Never": a row a replica does not emit (crashed, lost, or a link that never comes back).
NEVER = np.int64(2**62)


class Links:
    """One-way delays of the links a deployment uses, frame by frame (int64 µs; -1 = outage), for the
    frames ``[first, last]``; ``pairs`` are the (server, server) links needed."""

    def __init__(self, trace: Any, servers: dict[str, int], origin: int, first: int, last: int,
                 pairs: list[tuple[str, str]] | None = None):
        self.interval = trace.interval_us
        self.origin = origin
        self.last_frame = trace.n_frames - 1
        self.first = first
        if pairs is None:
            pairs = [(a, b) for a in servers for b in servers if a != b]
        self.column = {pair: i for i, pair in enumerate(pairs)}
        src = np.array([servers[a] for a, _ in pairs], np.intp)
        dst = np.array([servers[b] for _, b in pairs], np.intp)
        self._trace, self._pairs, self._beyond = trace, list(zip(src.tolist(), dst.tolist())), {}
        #: a source stream's rows (the same in every configuration): summaries and arrivals per link,
        #: kept for this window (simulator.timing.Hops), and the times of replicas that read only them
        self.shared_summaries: dict = {}
        self.shared_replicas: dict = {}
        self.shared_arrivals: dict = {}
        count = last - first + 1
        # int32 (µs up to 35 min; frame numbers): an hour of 10-s frames over 3000 links is 5 MB each
        self.delays = np.empty((count, len(pairs)), np.int32)
        for f in range(first, last + 1):
            rtt = trace.frame(f)[src, dst].astype(np.float64)
            # round(rtt * 500) as TraceStore.one_way_us and Network._frame_delays do
            self.delays[f - first] = np.where(np.isnan(rtt), -1, np.rint(np.nan_to_num(rtt) * 500.0))
        # Hold mode: for each frame, the first frame at or after it in which the pair is measured.
        ahead = np.where(self.delays >= 0, np.arange(count, dtype=np.int32)[:, None], np.int32(count))
        self.recovers = np.minimum.accumulate(ahead[::-1], axis=0)[::-1]   # == count: not in these frames
        self._overtaking(count)

    def _overtaking(self, count: int) -> None:
        """Where FIFO can bind, per frame and link: ``risk[f, c]``, the send time in frame ``f``
        after which a send can arrive later than some send of a later frame could (whose arrivals
        are at least ``start + d``, or a held frame's recovery).  Within a frame arrivals only grow
        with the send time, so when no send is past its frame's threshold — nearly always: a
        delay falls between frames by milliseconds, frames are seconds long — :meth:`arrive`
        skips :func:`fifo` (the same result, without its scatter-maximum)."""
        columns = np.arange(self.delays.shape[1])
        start = self.origin + (self.first + np.arange(count, dtype=np.int64)) * self.interval
        delays = self.delays.astype(np.int64)
        recover = np.minimum(self.recovers, count - 1)
        held_at = np.where(self.recovers < count,
                           self.origin + (self.first + recover.astype(np.int64)) * self.interval
                           + delays[recover, columns], NEVER)
        held = delays < 0
        lower = np.where(held, held_at, start[:, None] + delays)
        after = np.full_like(lower, NEVER)             # the earliest arrival any later frame allows
        after[:-1] = np.minimum.accumulate(lower[::-1], axis=0)[::-1][1:]
        risk = np.where(held, np.where(held_at > after, -1, NEVER), after - delays)
        # one contiguous row per link: a hop reads one link's frames
        self.by_link, self.risk_by_link = np.ascontiguousarray(delays.T), np.ascontiguousarray(risk.T)

    def sends(self, t: np.ndarray) -> "Sends":
        """``t`` (one replica's emission times) summarised for :meth:`send`."""
        return Sends(t, self.origin + self.first * self.interval, self.interval, len(self.delays))

    def send(self, column: int, sends: "Sends", tally: list) -> np.ndarray | None:
        """:meth:`arrive` for sends that are all records, when every send is live and in the frames
        read (the common case; None otherwise: call :meth:`arrive`).  The same result, by frames:
        a frame's one-way delay (or, held in an outage, its recovery time) is looked up once, the
        cost (§V-A) is the frame's record count × its delay, and FIFO is checked on the frames'
        first and latest sends (:class:`Sends`, shared by every link the replica sends on)."""
        if not sends.clean:
            return None
        local, present = sends.local, sends.present
        delays = self.by_link[column]
        held = (delays < 0) & present if delays.min() < 0 else None
        if held is not None and not held.any():
            held = None
        if held is not None:                 # every send of a held frame arrives at its recovery + delay
            frames = np.flatnonzero(held) + self.first
            recover = self._recoveries(column, frames)
            never = recover >= NEVER
            recover = np.where(never, self.first, recover)
            recovered = np.full(len(delays), NEVER, np.int64)
            recovered[held] = np.where(never, NEVER, self.origin + recover * self.interval
                                       + self._delays_at(column, recover))
            delays = np.where(delays < 0, 0, delays)   # an outage costs nothing (as the recorder counts)
        arrival = np.take(delays, local)
        arrival += sends.t
        tally[0] += len(arrival)
        tally[1] += int(sends.count @ delays)
        if held is not None:
            mine = held[local]
            arrival[mine] = recovered[local[mine]]
        latest = sends.latest
        if not (latest > self.risk_by_link[column]).any():
            return arrival                   # no send can be overtaken here (_overtaking)
        # fifo() by frames: within a frame arrivals grow with the send time (a held frame's are
        # one time), so a frame's latest arrival is its latest send's, and a send is held up
        # only by the frames before its own
        top, low = latest + delays, sends.first() + delays
        if held is not None:
            top, low = np.where(held, np.where(recovered < NEVER, recovered, -1), top), np.where(held, recovered, low)
        before = np.empty(len(delays), np.int64)
        before[0] = -1
        np.maximum.accumulate(np.where(present, top, -1)[:-1], out=before[1:])
        overtaken = (before > low) & present & (low < NEVER)     # frames whose first rows wait
        if overtaken.any():               # (elsewhere before <= a frame's first arrival: no change)
            rows = np.flatnonzero(np.take(overtaken, local))
            arrival[rows] = np.maximum(arrival[rows], before[local[rows]])
        return arrival

    def _delay(self, column: int, frame: int) -> int:
        """Link ``column``'s one-way delay in any frame of the trace (-1: an outage)."""
        a, b = self._pairs[column]
        rtt = float(self._trace.frame(frame)[a, b])
        return -1 if rtt != rtt else round(rtt * 500.0)

    def _recovery(self, column: int, frame: int) -> int:
        """The first frame at or after ``frame`` in which link ``column`` is measured (NEVER: none)."""
        loaded = self.first + len(self.delays)
        if self.first <= frame < loaded:
            found = int(self.recovers[frame - self.first, column]) + self.first
            if found < loaded:
                return found
            frame = loaded
        key = (column, frame)
        if key not in self._beyond:          # an outage past the frames read at once: rare, scalar
            self._beyond[key] = next((f for f in range(frame, self.last_frame + 1) if self._delay(column, f) >= 0),
                                     int(NEVER))
        return self._beyond[key]

    def arrive(self, a: str, b: str, sent: np.ndarray, tally: list | None = None, records: int = 0) -> np.ndarray:
        """Arrival at ``b`` of messages leaving ``a`` at ``sent`` (NEVER: not sent), FIFO on the link.
        With ``tally``, the first ``records`` sends are records: their count and the sum of their
        one-way delays at send (µs; 0 in an outage, as the recorder counts them) are added to it
        (the network cost of §V-A is records × delay)."""
        if not len(sent):
            return sent.copy()
        column = self.column[(a, b)]
        live = sent < NEVER
        every = bool(live.all())
        t = sent if every else np.where(live, sent, self.origin)
        relative = (t - self.origin) // self.interval - self.first
        if relative.min() >= 0 and relative.max() < len(self.delays):
            # the common case, all sends in the frames read: per-link rows, no masks (a hop is
            # the timing tier's inner loop: docs/simulator.md, "Speed")
            delay = self.by_link[column][relative]
            return self._arrive(column, t, relative, relative + self.first, delay, live, every, tally, records, True)
        frame = np.clip(relative + self.first, 0, self.last_frame)
        relative = frame - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        delay = np.empty(len(t), np.int64)
        delay[inside] = self.delays[relative[inside], column]
        if not inside.all():                 # sent after the frames read (a long hold upstream)
            delay[~inside] = [self._delay(column, f) for f in frame[~inside].tolist()]
        return self._arrive(column, t, relative, frame, delay, live, every, tally, records, False)

    def _arrive(self, column: int, t: np.ndarray, relative: np.ndarray, frame: np.ndarray, delay: np.ndarray,
                live: np.ndarray, every: bool, tally: list | None, records: int, inside: bool) -> np.ndarray:
        held = delay < 0 if delay.min() < 0 else None
        if tally is not None and records:
            if every and held is None:
                tally[0] += records
                tally[1] += int(delay[:records].sum())
            else:
                counted = live[:records] if held is None else live[:records] & ~held[:records]
                tally[0] += int(live[:records].sum())
                tally[1] += int(np.where(counted, delay[:records], 0).sum())
        arrival = t + delay
        if held is not None:
            recover = self._recoveries(column, frame[held])
            never = recover >= NEVER
            recover = np.where(never, self.first, recover)
            until = self.origin + recover * self.interval
            arrival[held] = np.where(never, NEVER, until + self._delays_at(column, recover))
        if not every:
            arrival[~live] = NEVER
        if inside and not (t > self.risk_by_link[column][relative]).any():
            return arrival                   # no send can be overtaken here (_overtaking)
        return fifo(frame - frame.min(), arrival, int(frame.max() - frame.min()) + 1)

    def _recoveries(self, column: int, frames: np.ndarray) -> np.ndarray:
        """:meth:`_recovery` for many frames: from the table where it answers, else one by one."""
        relative = frames - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        out = np.empty(len(frames), np.int64)
        out[inside] = self.recovers[relative[inside], column].astype(np.int64) + self.first
        redo = ~inside | (out >= self.first + len(self.delays))
        if redo.any():
            out[redo] = [self._recovery(column, f) for f in frames[redo].tolist()]
        return out

    def _delays_at(self, column: int, frames: np.ndarray) -> np.ndarray:
        relative = frames - self.first
        inside = (relative >= 0) & (relative < len(self.delays))
        out = np.empty(len(frames), np.int64)
        out[inside] = self.delays[relative[inside], column]
        if not inside.all():
            out[~inside] = [self._delay(column, f) for f in frames[~inside].tolist()]
        return out


class Sends:
    """One replica's emission times as :meth:`Links.send` reads them, computed once for all the
    links it sends on: each send's frame (``local``: counted from the first frame read), and per
    frame read the number of sends and the latest send (-1: none).  ``clean`` is False
    when a send is NEVER or outside the frames read (:meth:`Links.arrive` handles those).  The
    per-frame latest send decides whether FIFO can bind (:meth:`Links._overtaking`)."""

    def __init__(self, t: np.ndarray, base: int, interval: int, frames: int):
        self.t, self.clean = t, False
        if not len(t) or t.max() >= NEVER or t.min() < base:
            return
        self.local = (t - base) // interval
        if self.local.max() >= frames:
            return
        self.count = np.bincount(self.local, minlength=frames)
        self.present = self.count > 0
        self.clean = True
        #: per frame, the latest send (-1 in a frame without sends)
        self.latest = np.full(len(self.count), -1, np.int64)
        np.maximum.at(self.latest, self.local, t)
        self._first: np.ndarray | None = None

    def first(self) -> np.ndarray:
        """Per frame, the first send (NEVER in a frame without sends; made when FIFO may bind)."""
        if self._first is None:
            self._first = np.full(len(self.count), NEVER, np.int64)
            np.minimum.at(self._first, self.local, self.t)
        return self._first


def fifo(frame: np.ndarray, arrival: np.ndarray, frames: int) -> np.ndarray:
    """Rule 2 of :mod:`simulator.network`: no message overtakes one sent earlier on its link.

    Within one frame a link's arrival is a non-decreasing function of the send time (``t + d``, or
    one recovery time for a whole held outage), so the running maximum over sends in time order is
    ``max(arrival, the largest arrival of the sends of earlier frames)``: a maximum per frame and a
    prefix maximum over frames, without sorting the sends.  (NEVER, a lost message, holds nothing up.)
    """
    if len(arrival) < 2:
        return arrival
    finite = arrival < NEVER
    latest = np.full(frames, -1, np.int64)
    np.maximum.at(latest, frame[finite], arrival[finite])
    before = np.empty(frames, np.int64)            # the largest arrival of the frames before each one
    before[0] = -1
    np.maximum.accumulate(latest[:-1], out=before[1:])
    bound = before[frame]
    if not (finite & (bound > arrival)).any():
        return arrival                             # nothing overtook anything (the common case)
    return np.where(finite, np.maximum(arrival, bound), NEVER)
