"""Entry points in a node core: source payloads in (§II-B).

Rules of this module:

1. A source payload goes to every replica of its stream's entry point hosted here (one decode);
   rejected items become dead letters once per payload.
2. Source-stamped replicas emit what they accept (holding it while they join, lifecycle rule 5);
   entry-stamped ones hand it to :mod:`engine.core.stamper`, which decides who stamps.
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

if TYPE_CHECKING:
    from engine.core.node import NodeCore


class Stamping:
    """Source payloads for ``core``."""

    def __init__(self, core: "NodeCore"):
        self.core = core

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
            if hosted.stamp is not None:
                rejects = core.stamper.on_items(hosted, items, now)
                segments = []
            else:
                segments, rejects = hosted.entry.on_items(items, now=now, stamping=False)
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
