"""The simulated wide-area network: trace-driven one-way delays over FIFO links (DESIGN.md §8).

Rules of this module:

1. The one-way delay of a message is the trace's RTT/2 between the two servers at *send* time,
   using the directed sample ``src -> dst`` (:meth:`traces.store.TraceStore.one_way_us`), plus any
   scripted congestion.  The network converts a trace frame once into a table of µs delays among
   its servers and keeps the current one at hand, so a send on a link without scripted faults costs
   a range check and two list indexes, not a trace lookup; links with faults cache their own delay.
   :meth:`Network.delay_us` is the one path every delay takes (sends, held links, redials).
2. Links are directed node pairs and FIFO, as on TCP: a message never arrives before one sent
   earlier on the same link (``arrival = max(send + delay, previous arrival)``).
3. A missing sample (or a scripted cut) is an outage.  ``outage = "hold"``: the link keeps what is
   sent and delivers it once the trace shows the pair again (TCP retransmission).  ``"drop"``:
   :meth:`Network.send` refuses, and the driver drops the connection (in-flight messages are lost
   with it; see :class:`~simulator.driver.Simulation`).  A held link remembers when its outage ends,
   so sends during a long outage do not look ahead frame by frame each time.
4. Messages are moved in batches: everything one node sends to one node in one call is one link
   item.  Link items are plain timed calls of :class:`LinkEnvironment` (a SimPy environment that,
   like ``simpy.rt``, overrides public methods only), not SimPy events: the earliest call due no later
   than SimPy's next event (timers, CPU, faults; a link item goes first on a tie) runs first.  A hop
   costs a heap push and pop, not a SimPy Timeout (no process and no Store per message either);
   :class:`LinkEnvironment` says what this costs in SimPy API and what it saves.
5. Optional bandwidth (bits/s per link) serialises items on the link: a long batch delays the
   ones behind it.  Per-record processing cost (CPU) is :class:`Processing`, charged by the driver.

Nothing here knows about operators, routing or placement: the network carries opaque items.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import simpy
from simpy.core import EmptySchedule, Infinity
from simpy.events import NORMAL

#: Outage behaviours (rule 3).
OUTAGE_MODES = ("hold", "drop")
NEVER = 2**62


class FixedDelays:
    """A constant "trace": RTTs in ms between named nodes (for tests and hand-made networks).

    ``rtt_ms[a][b]`` is the RTT from ``a`` to ``b``; a missing pair means the same as ``b -> a``.
    """

    interval_us = 3_600_000_000

    def __init__(self, rtt_ms: dict[str, dict[str, float]], nodes: Sequence[str] | None = None):
        self.nodes = list(nodes or sorted({*rtt_ms, *(b for row in rtt_ms.values() for b in row)}))
        index = {name: i for i, name in enumerate(self.nodes)}
        self.n_nodes = len(self.nodes)
        self._one_way = [[0] * self.n_nodes for _ in self.nodes]
        for a, row in rtt_ms.items():
            for b, rtt in row.items():
                self._one_way[index[a]][index[b]] = round(rtt * 500.0)
                if b not in rtt_ms or a not in rtt_ms[b]:
                    self._one_way[index[b]][index[a]] = round(rtt * 500.0)
        self.n_frames = 1
        self.duration_us = self.interval_us

    def one_way_us(self, src: int, dst: int, t_us: int) -> int | None:
        return self._one_way[src][dst]


class Link:
    """One directed node pair: FIFO state and a delay cache."""

    __slots__ = ("src", "dst", "a", "b", "ra", "rb", "last", "epoch", "frame_start", "frame_end", "delay", "busy",
                 "hold", "plain")

    def __init__(self, src: str, dst: str, a: int, b: int, ra: int = -1, rb: int = -1):
        self.src, self.dst, self.a, self.b = src, dst, a, b
        self.ra, self.rb = ra, rb  # rows of a and b in the network's per-frame delay table
        self.last = 0              # arrival time of the latest item (FIFO, rule 2)
        self.epoch = 0             # bumped when the connection drops: older items are lost
        self.frame_start = self.frame_end = -1
        self.delay: int | None = None
        self.busy = 0              # bandwidth: when the link finishes transmitting
        self.hold = (0, 0, 0)      # an outage [from, until) and the delay at ``until`` (hold mode)
        self.plain = True          # no scripted faults: the network's current frame table applies


class Calls:
    """The simulated time and the heap of timed calls: :class:`LinkEnvironment`'s hot state, in an
    object of its own so that, natively built (replicast/native_build.py), the driver and the
    network read and push it as a C struct (the environment itself subclasses SimPy's, a Python
    class, whose attributes are dictionary lookups)."""

    def __init__(self, now: int):
        self.now = now                   # µs: the time of whatever runs, a call or a SimPy event
        self.heap: list = []             # (when, seq, function, args); seq keeps equal times FIFO
        self.seq = 0
        #: The time of SimPy's next event (its peek: an int, or Infinity when it has none), kept by
        #: LinkEnvironment.schedule and step.
        self.simpy_next: Any = Infinity

    def push(self, when: int, function: Callable, args: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, function, args))


class LinkEnvironment(simpy.Environment):
    """A SimPy environment that also runs plain timed calls (:meth:`call_at`) from a heap of its own.

    Like ``simpy.rt.RealtimeEnvironment`` it changes SimPy only through public methods it
    overrides, and it reads SimPy only through public ones (``simpy>=4.1,<5``):

    * :meth:`step`: the earliest call due no later than SimPy's next event runs first, so at equal
      times a link item goes before a timer or fault; else SimPy's own ``step``.
    * :attr:`now`: the time of whatever runs, a call or an event.  SimPy's own clock moves only
      with its events, so while calls run it may lag behind :attr:`now`.
    * :meth:`schedule`: every SimPy event enters the queue here (``Timeout``, ``succeed``,
      process start); a delay counts from :attr:`now`, as the caller means it, and the time of
      SimPy's next event is kept exact, so a step compares two integers instead of asking SimPy.
    * :meth:`peek`: the earlier of the next call and SimPy's next event.

    Why not a SimPy ``Timeout`` per link item (public API too): measured on sim-fig1, first 600 s
    of Seattle at kmax 3 (323 675 link items, 87 000 CPU waits), alternating three times on one
    machine, the run took 3.52-3.56 CPU s with these calls and 3.83-4.13 s with a ``Timeout`` per
    item and per CPU wait (+12 %); the network layer alone (``benchmarks/simulator.py``) ran at
    0.87 M hops/s against 0.56 M.  A call costs a heap push and pop and no SimPy API at all:
    :meth:`simpy.Environment.peek` is asked once per SimPy event, not per call.
    """

    def __init__(self, initial_time: int = 0):
        super().__init__(initial_time)
        #: The time and the timed calls (the driver keeps a reference: ``calls.now`` after every hop).
        self.calls = Calls(initial_time)
        self._simpy_now = initial_time   # SimPy's own clock: the time of its last event

    @property
    def now(self) -> int:
        return self.calls.now

    def call_at(self, when: int, function: Callable, *args: Any) -> None:
        """Run ``function(*args)`` at simulated time ``when`` (≥ now)."""
        self.calls.push(when, function, args)

    def schedule(self, event: simpy.Event, priority: int = NORMAL, delay: int = 0) -> None:
        calls = self.calls
        at = calls.now + delay
        super().schedule(event, priority, at - self._simpy_now)
        if at < calls.simpy_next:
            calls.simpy_next = at

    def peek(self) -> float:
        calls = self.calls
        heap = calls.heap
        return heap[0][0] if heap and heap[0][0] <= calls.simpy_next else calls.simpy_next

    def step(self) -> None:
        calls = self.calls
        heap = calls.heap
        if heap and heap[0][0] <= calls.simpy_next:
            # Every call due no later than SimPy's next event, in one go; a call may schedule SimPy
            # events (timers), which schedule() notes in simpy_next.
            while True:
                when, _, function, args = heapq.heappop(heap)
                calls.now = when
                function(*args)
                if not heap or heap[0][0] > calls.simpy_next:
                    return
        if calls.simpy_next == Infinity:
            raise EmptySchedule()
        calls.now = self._simpy_now = calls.simpy_next   # the event SimPy's step pops is at simpy_next
        try:
            super().step()
        finally:
            calls.simpy_next = super().peek()


class Network:
    """FIFO links between servers; ``deliver(dst, src, items)`` is called at each arrival."""

    def __init__(self, env: LinkEnvironment, trace: Any, servers: dict[str, int],
                 deliver: Callable[[str, str, list], None], *, outage: str = "hold",
                 bandwidth_bps: float | None = None, origin_us: int = 0):
        if outage not in OUTAGE_MODES:
            raise ValueError(f"outage mode must be one of {OUTAGE_MODES}, got {outage!r}")
        self.env, self.trace, self.servers, self.deliver = env, trace, servers, deliver
        self.outage = outage
        self.bandwidth_bps = bandwidth_bps
        self.interval = trace.interval_us
        self.origin = origin_us    # simulated time of the trace's t = 0
        self.last_frame = trace.n_frames - 1
        self.links: dict[tuple[str, str], Link] = {}
        self._faults: dict[frozenset, list[tuple[int, int, int | None]]] = {}   # pair -> (t1, t2, extra or None=cut)
        self.hops = 0              # link items delivered
        self.messages = 0          # messages inside them
        if not isinstance(env, LinkEnvironment):
            raise TypeError("Network needs a simulator.network.LinkEnvironment")
        self.calls: Calls = env.calls
        # Traces with frames: one-way delays (µs, None = outage) among our servers, a frame at a
        # time, as Python lists (a numpy lookup per link and frame would cost more than the hop).
        # ``_frame_cols`` picks our servers' rows/columns out of a trace frame.
        ordered = sorted(set(servers.values()))
        self._rows = {index: row for row, index in enumerate(ordered)} if hasattr(trace, "frame") else None
        self._frame_cols = np.array(ordered, dtype=np.intp)
        self._frames: OrderedDict[int, list[list[int | None]]] = OrderedDict()
        # The frame table of the latest lookup and when it holds (the fast path of links without
        # scripted faults); empty until the first lookup, and always for traces without frames.
        self._table_start = self._table_end = -1
        self._table: list[list[int | None]] = []
        #: The one-way delay the link had when :meth:`send` was last called (None: an outage), for
        #: an observer that accounts bandwidth × delay (it would otherwise look the delay up again).
        self.sent_delay: int | None = None

    # -- scripted faults ------------------------------------------------------------------------
    def cut(self, a: str, b: str, t1: int, t2: int) -> None:
        """No connectivity between ``a`` and ``b`` in ``[t1, t2)``."""
        self._faults.setdefault(frozenset((a, b)), []).append((t1, t2, None))
        self._invalidate(a, b)

    def congest(self, a: str, b: str, t1: int, t2: int, extra_us: int) -> None:
        """``extra_us`` more one-way delay between ``a`` and ``b`` in ``[t1, t2)``."""
        self._faults.setdefault(frozenset((a, b)), []).append((t1, t2, extra_us))
        self._invalidate(a, b)

    def _invalidate(self, a: str, b: str) -> None:
        for key in ((a, b), (b, a)):
            if key in self.links:
                self.links[key].frame_end = -1
                self.links[key].hold = (0, 0, 0)
                self.links[key].plain = False

    # -- delays ---------------------------------------------------------------------------------
    def link(self, src: str, dst: str) -> Link:
        link = self.links.get((src, dst))
        if link is None:
            a, b = self.servers[src], self.servers[dst]
            rows = self._rows or {}
            link = self.links[(src, dst)] = Link(src, dst, a, b, rows.get(a, -1), rows.get(b, -1))
            link.plain = frozenset((src, dst)) not in self._faults
        return link

    def delay_us(self, src: str, dst: str, now: int) -> int | None:
        """One-way delay of a message sent at ``now`` (None = outage); see rule 1."""
        return self._delay(self.links.get((src, dst)) or self.link(src, dst), now)

    def _delay(self, link: Link, now: int) -> int | None:
        """The one delay path: the current frame table, else the link's cache, else a lookup."""
        if link.plain and self._table_start <= now < self._table_end:
            return self._table[link.ra][link.rb]
        if link.frame_start <= now < link.frame_end:
            return link.delay
        return self._lookup(link, now)

    def _lookup(self, link: Link, now: int) -> int | None:
        """Rule 1 from the trace (and the link's scripted faults); caches the answer on the link
        until its frame or fault window ends, and the frame's table on the network."""
        t = now - self.origin
        if t < 0:
            t = 0
        frame = t // self.interval
        if frame > self.last_frame:
            frame = self.last_frame
        start = frame * self.interval + self.origin if frame else -NEVER
        end = (frame + 1) * self.interval + self.origin if frame < self.last_frame else NEVER
        if self._rows is not None:
            table = self._frame_delays(frame)
            self._table_start, self._table_end, self._table = start, end, table
            delay = table[link.ra][link.rb]
        elif link.a == link.b:
            delay = 0
        else:
            delay = self.trace.one_way_us(link.a, link.b, t)
        faults = self._faults and self._faults.get(frozenset((link.src, link.dst)))
        if faults:
            for t1, t2, extra in faults:
                if t1 <= now < t2:
                    end = min(end, t2)
                    delay = None if extra is None or delay is None else delay + extra
                elif now < t1:
                    end = min(end, t1)
                else:
                    start = max(start, t2)
        link.frame_start, link.frame_end, link.delay = start, end, delay
        return delay

    def _frame_delays(self, frame: int) -> list[list[int | None]]:
        """One-way delays (µs; None = outage, as ``one_way_us``) among our servers in ``frame``.

        A small LRU of frames: a hold-mode outage looks ahead frame by frame (``recovery_us``),
        which must not evict the frame everyone else is reading.
        """
        frames = self._frames
        delays = frames.get(frame)
        if delays is not None:
            frames.move_to_end(frame)
            return delays
        cols = self._frame_cols
        rtt = self.trace.frame(frame)[cols[:, None], cols].astype(np.float64)
        outage = np.isnan(rtt)
        # round(rtt * 500.0) of a Python float, as TraceStore.one_way_us: numpy's rint also rounds
        # half to even, in the same float64 arithmetic.
        us = np.rint(np.where(outage, 0.0, rtt) * 500.0).astype(np.int64).tolist()
        if outage.any():
            for r, c in zip(*np.nonzero(outage)):
                us[r][c] = None
        delays = frames[frame] = us
        if len(frames) > 64:
            frames.popitem(last=False)
        return delays

    def recovery_us(self, src: str, dst: str, now: int) -> int | None:
        """The first time at or after ``now`` when ``src -> dst`` has a delay (None: never again)."""
        link = self.link(src, dst)
        t = now
        while self._lookup(link, t) is None:    # walks the link's windows: needs frame_end
            if link.frame_end >= NEVER:
                return None
            t = link.frame_end
        return t

    # -- sending --------------------------------------------------------------------------------
    def send(self, src: str, dst: str, items: list, now: int, size_bytes: int = 0, connection: bool = True) -> bool:
        """Put ``items`` on the link ``src -> dst`` at ``now``; False if refused (drop-mode outage).

        ``connection=False``: the items do not ride the engines' connection ``src -> dst`` but a
        source's own (its MQTT publication, retried until acknowledged), so :meth:`drop` — a node
        crashing or a peer timing out — does not lose them; outages hold or drop them as any item.
        """
        link = self.links.get((src, dst)) or self.link(src, dst)
        if link.plain and self._table_start <= now < self._table_end:
            delay = self._table[link.ra][link.rb]     # _delay's fast path, inline: one call per hop less
        else:
            delay = self._delay(link, now)
        self.sent_delay = delay
        start: int | None = now
        if delay is None:
            if self.outage == "drop":
                return False
            start, delay = self._held(link, now)
            if start is None:
                return True             # never recovers: held forever (lost)
        if self.bandwidth_bps and size_bytes:
            if start < link.busy:
                start = link.busy
            start = link.busy = start + round(size_bytes * 8e6 / self.bandwidth_bps)
        arrival = start + delay
        if arrival < link.last:
            arrival = link.last
        link.last = arrival
        self.calls.push(arrival, self._arrive, (link, link.epoch if connection else None, items))
        return True

    def _held(self, link: Link, now: int) -> tuple[int | None, int]:
        """Hold mode, ``link`` in an outage at ``now``: when its items leave, and their delay.

        The answer holds for the whole outage, so it is kept on the link: a busy link in a long
        outage must not look ahead frame by frame on every send.
        """
        since, until, delay = link.hold
        if since <= now < until:
            return until if until < NEVER else None, delay
        self._lookup(link, now)
        since = link.frame_start
        recovery = self.recovery_us(link.src, link.dst, now)
        after = self._delay(link, recovery) if recovery is not None else 0    # (the link is up at recovery)
        link.hold = (since, NEVER if recovery is None else recovery, after)
        return recovery, after

    def drop(self, src: str, dst: str) -> None:
        """The connection ``src -> dst`` is gone: what is in flight is lost."""
        self.link(src, dst).epoch += 1      # items sent before are skipped when they come due

    def _arrive(self, link: Link, epoch: int | None, items: list) -> None:
        if epoch is None or epoch == link.epoch:    # not sent on a connection dropped since
            self.hops += 1
            self.messages += len(items)
            self.deliver(link.dst, link.src, items)


class Processing:
    """Per-record CPU cost by replica kind, with scripted load spikes (a single-server queue per node).

    ``cost_us`` maps an operator kind (``union``, ``join`` …, ``entry``, ``application``) to µs
    per record.  A node processes one batch at a time: a batch that arrives while the node is busy
    waits, so load and load spikes show up as delay.
    """

    def __init__(self, cost_us: dict[str, float]):
        self.cost_us = dict(cost_us)
        self.busy: dict[str, int] = {}
        self._spikes: dict[str, list[tuple[int, int, float]]] = {}

    def spike(self, server: str, t1: int, t2: int, factor: float) -> None:
        self._spikes.setdefault(server, []).append((t1, t2, factor))

    def finish(self, server: str, now: int, work_us: float) -> int:
        """When a batch of ``work_us`` µs of work arriving at ``now`` is done."""
        if self._spikes:
            for t1, t2, factor in self._spikes.get(server, ()):
                if t1 <= now < t2:
                    work_us *= factor
        start = self.busy.get(server, 0)
        if start < now:
            start = now
        done = start + round(work_us)
        self.busy[server] = done
        return done

    @property
    def enabled(self) -> bool:
        return any(self.cost_us.values()) or bool(self._spikes)


def pairs(items: Iterable[tuple[str, str]]) -> set[frozenset]:
    """Unordered node pairs of ``(a, b)`` items, without self pairs."""
    return {frozenset(p) for p in items if p[0] != p[1]}
