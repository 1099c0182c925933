"""Entry points in a node core: source payloads in, and the entry-stamped mode's stamper (§II-B).

Rules of this module:

1. A source payload goes to every replica of its stream's entry point hosted here (one decode);
   rejected items become dead letters once per payload.
2. Entry-stamped mode: the stamper is the lowest-indexed replica of the entry point whose node is
   alive; it stamps with its clock and punctuates every ``punctuation_us``; its output also feeds
   the peer replicas (routes entry → entry), which emit it as their own (:meth:`Stamping.on_stamped`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from engine.core.events import DeadLetter
from engine.core.hosted import Hosted
from engine.core.states import ReplicaState
from engine.entry import decode_payload
from operators.base import NO_PUNCTUATION
from operators.errors import InputError
from operators.plan import StreamReplica

if TYPE_CHECKING:
    from engine.core.node import NodeCore


class Stamping:
    """Source payloads and entry-stamped election for ``core``."""

    def __init__(self, core: "NodeCore"):
        self.core = core
        self.any = False                  # some hosted entry replica stamps (then punctuate on the timer)

    def on_source(self, stream: str, payload: bytes, now: int) -> bool:
        core = self.core
        if stream not in core.query.streams:
            core.counters["unknown_streams"] += 1
            self.dead_letter(stream, f"unknown stream {stream!r} (the query's streams: "
                                     f"{', '.join(core.query.streams)})", payload)
            return False
        entries = [h for h in core.hosted.values() if h.kind == "entry" and h.replica.name == stream]
        if not entries:
            return False
        try:
            items = decode_payload(payload)
        except InputError as error:
            self.dead_letter(stream, f"malformed: {error}", payload)
            return True
        for i, hosted in enumerate(entries):
            segments, rejects = hosted.entry.on_items(items, now=now, stamping=hosted.stamping)
            if i == 0:
                for reason, item in rejects:
                    self.dead_letter(stream, reason, item)
            if hosted.state is ReplicaState.JOINING:
                hosted.held.extend(segments)      # until it knows whether it continues a peer (lifecycle rule 5)
                continue
            for records, punctuation in segments:
                core.sender.emit(hosted, records, punctuation, now)
        return True

    def release_held(self, hosted: Hosted, now: int, covered: int = NO_PUNCTUATION,
                     copied: Counter | None = None) -> None:
        """Emit what the entry point took while it joined, less what its donor's copied log carries:
        every record at or below the donor's punctuation ``covered``, and ``copied`` (a multiset)."""
        held, hosted.held = hosted.held, []
        for records, punctuation in held:
            if covered > NO_PUNCTUATION or copied:
                kept = []
                for record in records:
                    if record[0] <= covered:
                        continue
                    if copied and copied[record] > 0:
                        copied[record] -= 1
                        continue
                    kept.append(record)
                records = kept
                if punctuation is not None and punctuation <= covered:
                    punctuation = None
            self.core.sender.emit(hosted, records, punctuation, now)

    def dead_letter(self, stream: str, reason: str, item) -> None:
        self.core.counters["dead_letters"] += 1
        self.core.event(DeadLetter(stream, reason, item))

    # -- entry-stamped mode (rule 2) --------------------------------------------------------------
    def punctuate(self, now: int) -> None:
        for hosted in list(self.core.hosted.values()):
            if hosted.stamping:
                for records, p in hosted.entry.punctuate(now):
                    self.core.sender.emit(hosted, records, p, now)

    def on_stamped(self, hosted: Hosted, stream: StreamReplica, records, punctuation: int | None, now: int,
                   path: tuple[str, ...]) -> None:
        """A batch from the stamper: a follower emits it as its own."""
        if hosted.stamping or stream.source.index != self._stamper(hosted):
            return
        for segment in hosted.entry.on_stamped(list(records), punctuation):
            self.core.sender.emit(hosted, *segment, now, path)

    def _stamper(self, hosted: Hosted) -> int:
        """The lowest-indexed replica of this entry point whose node is alive."""
        core = self.core
        for index, node in enumerate(hosted.peers):
            if node and (node == core.name or node in core.connected):
                return index
        return hosted.replica.index

    def elect(self, now: int) -> None:
        for hosted in list(self.core.hosted.values()):
            if hosted.entry is None or hosted.entry.mode != "entry":
                continue
            stamping = self._stamper(hosted) == hosted.replica.index
            if stamping and not hosted.stamping:
                hosted.stamping = True
                for segment in hosted.entry.take_over(now):
                    self.core.sender.emit(hosted, *segment, now)
            hosted.stamping = stamping
        self.any = any(h.stamping for h in self.core.hosted.values())
