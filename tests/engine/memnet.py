"""An in-memory network of NodeCores (h11's ConnectionPair, for n nodes): FIFO links, a hand clock.

Messages cross a link as wire frames (engine/wire.py), encoded at the sender and decoded at the
receiver, exactly as on TCP.

Each ``step`` delivers one message chosen by a seeded RNG among the heads of all non-empty links,
so interleavings differ across links while every link stays FIFO (TCP).  Links can be cut
(in-flight messages are lost, both ends are told ``on_peer_down``) and restored (``on_peer_up``);
nodes can be killed (their state is lost) and restarted with a fresh core, as ``replicast node``
after ``kill -9``; links can be congested (messages wait on them, in order); control messages (a
coordinator's) can be applied at any node mid-stream.

Each node reads its own clock (``clocks``: :class:`~simulator.clocks.ClockSpec` per node, an
offset and a drift against the network's ``now``; default exact), so cores see skewed time as on
real servers.  Votes are durable by default: a node's :meth:`~engine.node.NodeCore.votes_to_persist`
is kept before its messages go out and handed back at its restart, as the drivers do
(``durable_votes=False``: restarted voters forget, the bare core's ``VOLATILE`` memory).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict, deque
from dataclasses import replace
from typing import Callable

from replicast.engine.core.configure import add_replica, remove_replica
from replicast.engine.core.views import VoteMemory, Votes
from replicast.engine.node import Delivered, NodeCore, NodeOptions, Start, configure
from replicast.engine.messages import Message
from replicast.engine.wire import decode, encode
from replicast.operators.query import Query
from replicast.simulator.clocks import Clock, ClockSpec


class MemoryNetwork:
    def __init__(self, query: Query, placement: dict[str, list[str]], *, seed: int = 0,
                 options: NodeOptions = NodeOptions(), now: int = 0, spare: tuple[str, ...] = (),
                 clocks: dict[str, ClockSpec] | None = None, durable_votes: bool = True):
        self.now = now
        self.rng = random.Random(seed)
        self.placement = {name: list(nodes) for name, nodes in placement.items()}
        self.names = sorted({n for nodes in placement.values() for n in nodes} | set(spare))   # spare: idle nodes
        if not options.voters:                 # every node votes, as in a cluster file (NodeOptions.voters)
            options = replace(options, voters=tuple(self.names))
        self.query, self.options = query, options
        self.clocks = {n: Clock((clocks or {}).get(n, ClockSpec()), now) for n in self.names}
        self.durable_votes = durable_votes
        self.votes: dict[str, Votes] = {}             # what each node stored (durable votes)
        self.restarts = 0
        #: Called with (src, dst, message) for every message a live node sends to another (tests watch streams).
        self.on_send: Callable[[str, str, Message], None] | None = None
        self.cores = {n: NodeCore(n, query, options, now=self.clock(n), votes=self._votes(n)) for n in self.names}
        self.links: dict[tuple[str, str], deque] = defaultdict(deque)
        self.dead: set[str] = set()
        self.cut: set[frozenset] = set()
        self.slow: set[tuple[str, str]] = set()      # congested links: messages wait on them, in order
        self.delivered: dict[str, list] = defaultdict(list)
        self.events: list = []
        for name, core in self.cores.items():
            core.apply(configure(query, placement, name, options.entry_modes, mode=options.mode), now=self.clock(name))
        for a in self.names:
            for b in self.names:
                if a != b:
                    self.cores[a].on_peer_up(b, now=self.clock(a))
        self.flush()

    def clock(self, node: str) -> int:
        """What ``node``'s clock reads now."""
        return self.clocks[node].local(self.now)

    def _votes(self, node: str) -> Votes:
        if not self.durable_votes:
            return Votes()
        return self.votes.get(node, Votes(VoteMemory.DURABLE))

    def flush(self) -> None:
        for name, core in self.cores.items():
            if name in self.dead:
                core.votes_to_persist(), core.messages_to_send(), core.events()
                continue
            record = core.votes_to_persist()            # stored before anything the votes guard leaves
            if record is not None:
                self.votes[name] = Votes(VoteMemory.DURABLE, record.streams)
            for dst, message in core.messages_to_send():
                if self.on_send is not None:
                    self.on_send(name, dst, message)
                if dst not in self.dead and frozenset((name, dst)) not in self.cut:
                    self.links[(name, dst)].append(encode(message))
            for event in core.events():
                self.events.append((name, event))
                if isinstance(event, Delivered):
                    self.delivered[event.app].extend(event.records)

    def live(self, node: str) -> bool:
        return node not in self.dead

    def restart(self, node: str) -> None:
        """A fresh node process on ``node`` with the same configuration (its replicas rejoin)."""
        self.dead.discard(node)
        old, now = self.cores[node], self.clock(node)
        self.restarts += 1
        core = self.cores[node] = NodeCore(node, self.query, self.options, now=now,
                                           incarnation=max(now, old.max_epoch() + 1), start=Start.RESTARTED,
                                           votes=self._votes(node))
        core.apply(configure(self.query, self.placement, node, self.options.entry_modes, mode=self.options.mode),
                   now=now)
        for other in self.names:
            if other != node and other not in self.dead and frozenset((node, other)) not in self.cut:
                core.on_peer_up(other, now=now)
                self.cores[other].on_peer_up(node, now=self.clock(other))
        self.flush()

    def control(self, messages: dict[str, list]) -> None:
        """Apply a coordinator's control messages at their nodes (dead nodes miss theirs)."""
        for node, batch in messages.items():
            if node not in self.dead:
                self.cores[node].apply(batch, now=self.clock(node))
        self.flush()

    def add_replica(self, name: str, node: str) -> None:
        self.placement, messages = add_replica(self.query, self.placement, name, node, self.options.entry_modes)
        self.control(messages)

    def remove_replica(self, replica) -> None:
        self.placement, messages = remove_replica(self.placement, replica)
        self.control(messages)

    def publish(self, node: str, stream: str, items: list) -> None:
        self.cores[node].on_source(stream, json.dumps(items).encode(), now=self.clock(node))
        self.flush()

    def step(self) -> bool:
        busy = [link for link, queue in self.links.items() if queue and link not in self.slow]
        if not busy:
            return False
        self.deliver_one(*self.rng.choice(busy))
        return True

    def deliver_one(self, src: str, dst: str) -> None:
        """Deliver the next message on the link ``src`` → ``dst`` (for tests that order them by hand)."""
        message = decode(self.links[(src, dst)].popleft()[4:])
        self.cores[dst].receive(src, message, now=self.clock(dst))
        self.flush()

    def run(self, max_steps: int | None = None) -> int:
        steps = 0
        while (max_steps is None or steps < max_steps) and self.step():
            steps += 1
        return steps

    def tick(self, us: int) -> None:
        self.now += us
        for name, core in self.cores.items():
            if name not in self.dead and core.next_timer() <= self.clock(name):
                core.handle_timer(now=self.clock(name))
        self.flush()

    def kill(self, node: str) -> None:
        self.dead.add(node)
        for (src, dst), queue in self.links.items():
            if node in (src, dst):
                queue.clear()
        for name, core in self.cores.items():
            if name not in self.dead:
                core.on_peer_down(node, now=self.clock(name))
        self.flush()

    def cut_link(self, a: str, b: str) -> None:
        self.cut.add(frozenset((a, b)))
        self.links[(a, b)].clear()
        self.links[(b, a)].clear()
        self.cores[a].on_peer_down(b, now=self.clock(a))
        self.cores[b].on_peer_down(a, now=self.clock(b))
        self.flush()

    def congest(self, a: str, b: str) -> None:
        """Messages ``a`` → ``b`` wait (in order, none lost, the link stays up) until :meth:`decongest`."""
        self.slow.add((a, b))

    def decongest(self, a: str, b: str) -> None:
        self.slow.discard((a, b))

    def restore_link(self, a: str, b: str) -> None:
        self.cut.discard(frozenset((a, b)))
        self.cores[a].on_peer_up(b, now=self.clock(a))
        self.cores[b].on_peer_up(a, now=self.clock(b))
        self.flush()
