"""Who stamps an entry-stamped stream: views decided by a majority of voters (Paxos, one decision per change).

Two entry replicas that cannot reach each other must not both stamp (the same event would get two
timestamps: docs/node.md, "Entry-stamped mode").  So the stamper is named by a :class:`~engine.messages.View` that a
majority of the *voters* (the cluster's nodes, ``NodeOptions.voters``) accepted.  Rules:

1. **Voter** (every node, :class:`Voter`): per stream it keeps the largest term it promised and the
   view it last accepted.  Phase 1 (``ViewBallot`` without a view): promise a term above every term
   promised before, answering with the view last accepted.  Phase 2 (with a view): accept it unless
   a larger term was promised.  A :class:`~engine.messages.ViewDecided` from a stamper is accepted
   as if voted, so a voter that missed a view learns it.  What a voter remembers of its earlier
   lives is its :class:`VoteMemory`: ``DURABLE`` (the drivers': every change is a
   :class:`PersistVotes` intent, written and fsync'd by the driver *before* the reply it guards
   leaves, and handed back at the next start) — then a restart changes nothing; ``VOLATILE`` (no
   store: a core built bare, in unit tests) — it promises only terms above its incarnation (its
   start time, µs), which is safe only while no candidate's clock runs ahead of the voter's by
   more than the restart took (docs/modes.md, "Durable votes"); ``LOST`` (the store was
   unreadable) — it answers no ballot at all, rather than forget what it promised, and the node's
   replicas seek no view (rule 2: it does not know which terms it proposed).
2. **Candidate** (:class:`Candidacy`): a replica that wants a new view picks a term above every term
   it has seen, above its clock, and above every term its node proposed for the stream before (kept
   with the votes: two candidacies never share a term, even across a restart whose clock is
   behind), asks every voter to promise it, takes the latest view
   accepted among a majority of promises — every view ever decided is at or below it, since two
   majorities share a voter — and derives its proposal from that view (:mod:`engine.core.stamper`
   says how), then asks the voters to accept it.  A majority of acceptances decides the view.  A
   refusal (a larger promise elsewhere) ends the candidacy; the stamper module retries later.
3. The voters' answers go to the candidate's node, addressed by stream and replica index; a
   candidate counts each voter once per phase and ignores answers for other terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.states import CandidacyEvent, CandidacyPhase, advance
from replicast.engine.messages import View, ViewBallot, ViewDecided, ViewReply


class VoteMemory(Enum):
    """What a voter remembers of its node's earlier lives (rule 1)."""

    DURABLE = "durable"          # its votes as the driver stored them: a restart forgets nothing
    VOLATILE = "volatile"        # nothing: promise only above the incarnation (no store; unit tests)
    LOST = "lost"                # the store could not be read: answer no ballot


@dataclass(frozen=True, slots=True)
class StreamVotes:
    """One stream's votes as they are stored: the largest term promised, the view last accepted,
    and the largest term a candidate of this node proposed (rule 2)."""

    promised: int = 0
    accepted: View | None = None
    proposed: int = 0


@dataclass(frozen=True, slots=True)
class PersistVotes:
    """An intent of the core: store ``streams`` (the whole table; it replaces what is stored) durably
    *before* sending any message the same input call produced — a reply may promise what it records."""

    streams: dict[str, StreamVotes]


@dataclass(frozen=True, slots=True)
class Votes:
    """What a driver hands a new core: how it kept the votes, and what it read back."""

    memory: VoteMemory = VoteMemory.VOLATILE
    streams: dict[str, StreamVotes] = field(default_factory=dict)


@dataclass
class Ballots:
    """One voter's memory for one stream (rule 1), and its node's largest proposed term (rule 2)."""

    promised: int = 0
    accepted: View | None = None
    proposed: int = 0


class Voter:
    """The voter of one node for every entry-stamped stream (rule 1): it reads the query's stream
    names and the node's incarnation, counts refusals and answers through the outbox."""

    def __init__(self, names: set[str], incarnation: int, counters: dict[str, int], outbox: Outbox,
                 votes: Votes = Votes()):
        self.names, self.incarnation, self.counters, self.outbox = names, incarnation, counters, outbox
        self.memory = votes.memory
        self.streams: dict[str, Ballots] = {name: Ballots(v.promised, v.accepted, v.proposed)
                                            for name, v in votes.streams.items()}
        #: Below this no term is promised: the incarnation if the votes of earlier lives are not known.
        self.floor = incarnation if votes.memory is VoteMemory.VOLATILE else 0
        self._changed = False

    def on_ballot(self, src: str, message: ViewBallot, now: int) -> None:
        if message.stream not in self.names:
            self.counters["refused_ballots"] += 1
            return
        if self.memory is VoteMemory.LOST:                # it may have promised anything: no answer
            self.counters["unanswered_ballots"] += 1
            return
        ballots = self.streams.setdefault(message.stream, Ballots())
        floor = max(ballots.promised, self.floor)
        if message.view is None:                         # phase 1: promise
            ok = message.term > floor
            if ok:
                ballots.promised = message.term
        else:                                            # phase 2: accept
            ok = message.view.term == message.term and message.term >= floor and message.term > self.floor
            if ok:
                ballots.promised, ballots.accepted = message.term, message.view
        if ok:
            self._changed = True
        else:
            self.counters["refused_ballots"] += 1
        self.outbox.send(src, ViewReply(message.stream, message.candidate, message.term, 1 if message.view is None else 2,
                                 ok, max(floor, ballots.promised), ballots.accepted))

    def on_decided(self, message: ViewDecided) -> None:
        if message.stream not in self.names or self.memory is VoteMemory.LOST:
            return
        ballots = self.streams.setdefault(message.stream, Ballots())
        if ballots.accepted is None or message.view.term > ballots.accepted.term:
            ballots.accepted = message.view
            ballots.promised = max(ballots.promised, message.view.term)
            self._changed = True

    def proposed(self, stream: str) -> int:
        """The largest term a candidate of this node proposed for ``stream``, in any life (rule 2)."""
        ballots = self.streams.get(stream)
        return ballots.proposed if ballots is not None else 0

    def propose(self, stream: str, term: int) -> None:
        """A candidate here is about to ask for ``term``: stored before its ballots leave (rule 2)."""
        ballots = self.streams.setdefault(stream, Ballots())
        if term > ballots.proposed:
            ballots.proposed = term
            self._changed = True

    def to_persist(self) -> PersistVotes | None:
        """The whole table if it changed since the last call (durable votes only); clears the change."""
        if not self._changed:
            return None
        self._changed = False
        if self.memory is not VoteMemory.DURABLE:
            return None
        return PersistVotes({name: StreamVotes(b.promised, b.accepted, b.proposed) for name, b in self.streams.items()})


class Outcome(Enum):
    """What one voter's answer did to a :class:`Candidacy`."""

    WAITING = "waiting"            # no majority yet (or an answer for another term or phase)
    REFUSED = "refused"            # a voter promised a larger term: the candidacy is over
    PROMISED = "promised"          # a majority promised: propose from Candidacy.latest
    DECIDED = "decided"            # a majority accepted Candidacy.proposal


@dataclass
class Candidacy:
    """One attempt to get a view decided (rule 2)."""

    term: int
    voters: tuple[str, ...]
    deadline: int
    phase: CandidacyPhase = CandidacyPhase.PROMISING
    heard: set = field(default_factory=set)          # voters that answered yes in this phase
    latest: View | None = None                       # the latest view accepted among the promises
    proposal: View | None = None

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def ballot(self, stream: str, candidate: int) -> ViewBallot:
        """What to send every voter now (again, to one that just came up)."""
        return ViewBallot(stream, candidate, self.term,
                          self.proposal if self.phase is CandidacyPhase.ACCEPTING else None)

    def on_reply(self, src: str, reply: ViewReply) -> Outcome:
        """Take one voter's answer (:class:`Outcome` says what it did)."""
        if reply.term != self.term or src not in self.voters:
            return Outcome.WAITING
        phase = 1 if self.phase is CandidacyPhase.PROMISING else 2
        if reply.phase != phase:
            return Outcome.WAITING
        if not reply.ok:
            return Outcome.REFUSED
        if phase == 1 and reply.accepted is not None and (self.latest is None
                                                          or reply.accepted.term > self.latest.term):
            self.latest = reply.accepted
        self.heard.add(src)
        if len(self.heard) < self.majority:
            return Outcome.WAITING
        return Outcome.PROMISED if phase == 1 else Outcome.DECIDED

    def propose(self, view: View) -> None:
        """Phase 2 with ``view`` (its term is this candidacy's)."""
        self.phase = advance(self.phase, CandidacyEvent.PROMISED)
        self.proposal, self.heard = view, set()
