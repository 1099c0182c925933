"""Entry points in a node core: source payloads in (§II-B).

Rules of this module:

1. A source payload goes to every replica of its stream's entry point hosted here (one decode);
   rejected items become dead letters once per payload.
2. Source-stamped replicas emit what they accept (holding it while they join, lifecycle rule 5);
   entry-stamped ones hand it to :mod:`engine.core.stamper`, which decides who stamps.
3. A joined entry point's stream is its donor's copied log, then its own records (lifecycle rule 5).
   Each entry replica has a subscription of its own, and a source delivers a stream to every
   subscriber in one order (MQTT per topic) but not at one time: the joiner can receive a record
   the donor took before its snapshot — so the copy carries it — only after the join.  The copy's
   records above the donor's punctuation are therefore matched, in order, against what the joiner
   takes (held, then arriving): a match is already in the stream and is dropped; the first record
   the copy does not carry is past it, and the matching ends.  Records the joiner never receives
   (published before it subscribed) are skipped over by the first later match.
4. Seals per key (operators/key_seals.py) follow the segments of their payload.  A joining entry
   point, or one still meeting its donor's copy, drops them: seals are safe to lose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generator

from replicast.engine.core.copy_tail import CopyTail
from replicast.engine.core.events import DeadLetter
from replicast.engine.core.hosted import Hosted, ReplicaKind
from replicast.engine.core.intents import Intent, StepJoin
from replicast.engine.core.states import ReplicaState
from replicast.engine.entry import decode_payload
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.errors import InputError

if TYPE_CHECKING:
    from replicast.engine.core.outbox import Outbox
    from replicast.operators.plan import ReplicaId


class Stamping:
    """Source payloads for one node's entry points.  It reads the query's streams and the hosted
    replicas, counts and reports dead letters through the outbox, and hands what an entry point
    emits to the sender (``emit``), what an entry-stamped one takes to the stamper (``stamp``), and
    seals per key to :mod:`engine.core.key_seals` (``seal``: rule 4).  A joining one's first held
    item moves its join on (lifecycle rule 5 asks once it holds something): an intent for the
    lifecycle, :class:`~engine.core.intents.StepJoin`, yielded by :meth:`on_source`."""

    def __init__(self, streams: dict, hosted: "dict[ReplicaId, Hosted]", outbox: "Outbox", counters: dict[str, int],
                 *, emit: Callable[..., None], stamp: Callable[..., Any], seal: Callable[[Hosted, Any], None]):
        self.streams, self.hosted, self.out, self.counters = streams, hosted, outbox, counters
        self.emit, self.stamp, self.seal = emit, stamp, seal

    def on_source(self, stream: str, payload: bytes, now: int) -> Generator[Intent, None, bool]:
        """A source payload for ``stream`` (rules 1-4).  Yields a joining entry point's
        :class:`~engine.core.intents.StepJoin` when it first holds something (routed before the next
        entry point takes the payload: :mod:`engine.core.intents` rule 2) and returns whether an
        entry point here took the payload."""
        if stream not in self.streams:
            self.counters["unknown_streams"] += 1
            self.dead_letter(stream, f"unknown stream {stream!r} (the query's streams: "
                                     f"{', '.join(self.streams)})", payload)
            return False
        entries = [h for h in self.hosted.values() if h.kind is ReplicaKind.ENTRY and h.replica.name == stream]
        if not entries:
            return False
        try:
            items = decode_payload(payload)
        except InputError as error:
            self.dead_letter(stream, f"malformed: {error}", payload)
            return True
        for i, hosted in enumerate(entries):
            if hosted.stamp is not None:
                rejects = self.stamp(hosted, items, now)
                segments = []
            else:
                segments, rejects = hosted.entry.on_items(items, now=now, stamping=False)
            if i == 0:
                for reason, item in rejects:
                    self.dead_letter(stream, reason, item)
            seals = hosted.entry.take_seals() if hosted.stamp is None else []
            if hosted.state is ReplicaState.JOINING:
                first = not hosted.held
                hosted.held.extend(segments)      # until it knows whether it continues a peer (lifecycle rule 5)
                if first and hosted.held:
                    yield StepJoin(hosted)      # it may ask for a snapshot now
                continue
            if not hosted.copy_tail.done:         # rule 3
                segments = self._past_copy(hosted, segments)
            for records, punctuation in segments:
                self.emit(hosted, records, punctuation, now)
            if hosted.copy_tail.done:             # seals behind the records they cover (rule 4)
                self.seal(hosted, seals)
        return True

    def release_held(self, hosted: Hosted, now: int, covered: int = NO_PUNCTUATION,
                     copied: list | None = None) -> None:
        """Emit what the entry point took while it joined, less what its donor's copied log carries:
        every record at or below the donor's punctuation ``covered``, and the records of ``copied``
        (the copy's records in stream order), matched in order (rule 3)."""
        held, hosted.held = hosted.held, []
        if covered > NO_PUNCTUATION or copied:
            hosted.copy_tail = CopyTail([r for r in copied or () if r[0] > covered])
            held = [([r for r in records if r[0] > covered], None if p is not None and p <= covered else p)
                    for records, p in held]
            held = self._past_copy(hosted, held)
        for records, punctuation in held:
            self.emit(hosted, records, punctuation, now)

    @staticmethod
    def _past_copy(hosted: Hosted, segments: list) -> list:
        tail = hosted.copy_tail
        kept = [([r for r in records if not tail.carries(r)], punctuation) for records, punctuation in segments]
        if any(p is not None and p >= tail.last_ts for _, p in segments):
            tail.clear()                          # a punctuation made the rest late: past the copy
        return kept

    def dead_letter(self, stream: str, reason: str, item) -> None:
        self.counters["dead_letters"] += 1
        self.out.event(DeadLetter(stream, reason, item))
