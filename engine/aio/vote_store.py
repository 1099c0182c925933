"""A node's votes on disk: the entry stamper's promises survive restarts (engine/core/views.py rule 1).

The core asks for its votes to be stored with a :class:`~engine.core.views.PersistVotes` intent,
drained before the messages of the same call (``NodeCore.votes_to_persist``).  Rules:

1. :meth:`VoteStore.save` returns only once the votes are on disk: written to a temporary file in
   the same directory, the file fsync'd, renamed over the old one (``os.replace``: a reader sees
   the old votes or the new, never a mix), the directory fsync'd (the rename itself is durable).
   The driver sends nothing the votes guard before it returns; if it fails the node stops, since a
   reply that promised what is not stored could be forgotten by the next start.
2. :meth:`VoteStore.load` at the start: no file is a first start (nothing was ever promised:
   every promise is stored before its reply leaves); a file of another cluster (a reused state
   directory) is ignored, as ``replicast node`` ignores its start note; a file that cannot be read
   or is not valid is one error line naming the file and what was wrong, and the node votes
   ``LOST``: it answers no ballot rather than forget what it may have promised.  It still runs
   (its replicas stamp and process); the operator restores or removes the file and restarts it.
3. The file is JSON (``<state dir>/<node>.votes.json``), validated field by field by msgspec.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import msgspec

from replicast.engine.messages import View
from replicast.engine.node import PersistVotes, StreamVotes, VoteMemory, Votes
from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.node")

FORMAT = 1


class VoteStoreError(ReplicastError):
    """The votes could not be written (rule 1): the node must stop."""


class _View(msgspec.Struct, forbid_unknown_fields=True):
    term: int
    stamper: int
    members: list[tuple[int, int]]
    base: int


class _Stream(msgspec.Struct, forbid_unknown_fields=True):
    promised: int
    accepted: _View | None
    proposed: int


class _File(msgspec.Struct, forbid_unknown_fields=True):
    format: int
    cluster: str
    node: str
    streams: dict[str, _Stream]


def vote_path(state_dir: Path, node: str) -> Path:
    return state_dir / f"{node}.votes.json"


class VoteStore:
    """The votes of node ``node`` of cluster ``cluster`` (the cluster file's path) in ``path``."""

    def __init__(self, path: Path, cluster: str, node: str):
        self.path, self.cluster, self.node = path, cluster, node

    def load(self) -> Votes:
        """What the core starts with (rule 2)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return Votes(VoteMemory.DURABLE)
        except OSError as error:
            return self._lost(f"cannot read it: {error.strerror or error}")
        try:
            stored = msgspec.json.decode(data, type=_File)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            return self._lost(str(error))
        if stored.format != FORMAT:
            return self._lost(f"format {stored.format}, expected {FORMAT}")
        if stored.cluster != self.cluster or stored.node != self.node:
            log.info("%s: votes of node %r of %s, not this one: starting without votes", self.path, stored.node,
                     stored.cluster, extra={"event": "votes_ignored"})
            return Votes(VoteMemory.DURABLE)
        return Votes(VoteMemory.DURABLE, {name: StreamVotes(s.promised, _view(s.accepted), s.proposed)
                                          for name, s in stored.streams.items()})

    def _lost(self, reason: str) -> Votes:
        log.error("%s: unreadable votes (%s); this node answers no ballot until the file is restored or removed",
                  self.path, reason, extra={"event": "votes_unreadable", "file": str(self.path)})
        return Votes(VoteMemory.LOST)

    def save(self, record: PersistVotes) -> None:
        """Store ``record`` durably (rule 1); :class:`VoteStoreError` if it could not be."""
        streams = {name: _Stream(v.promised, None if v.accepted is None else
                                 _View(v.accepted.term, v.accepted.stamper, [tuple(m) for m in v.accepted.members],
                                       v.accepted.base), v.proposed)
                   for name, v in record.streams.items()}
        data = msgspec.json.encode(_File(FORMAT, self.cluster, self.node, streams))
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temp, self.path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as error:
            raise VoteStoreError(f"{self.path}: cannot store the votes: {error.strerror or error}") from error


def _view(view: _View | None) -> View | None:
    if view is None:
        return None
    return View(view.term, view.stamper, tuple((i, e) for i, e in view.members), view.base)
