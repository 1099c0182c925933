"""Engine modes: this paper's replication and the baselines it is compared with (§VI-B, Fig. 2; §VII).

One option selects a mode for a whole run — ``NodeOptions.mode``, ``mode = "…"`` in a cluster file
or a scenario — and both runtimes apply it the same way: :func:`shape` when the placement is read
(:func:`engine.core.configure.configure`, the simulator), the node core for the rest.  What each
mode changes is data, in :data:`TRAITS`:

* ``replication`` (the paper, §III): every upstream replica feeds every downstream replica; duplicate
  filters keep the first copy (§IV-B).  Nothing waits for a failure detector.
* ``none``: one replica per entry point and operator, whatever the placement lists (the first it
  lists); a crash stops everything downstream of it (Fig. 2, "no replication").
* ``failover`` (§VII, "the failover model"): every stream replica is connected, but each port of a
  downstream replica *follows* one upstream replica — replica ``j`` prefers upstream replica
  ``j mod k``, then the next indexes — and keeps the others on *standby*: they send nothing, and
  keep only what a switch would need (:class:`~engine.messages.Standby`, told the port's
  punctuation).  The port switches to the next standby when the failure detector suspects the
  followed one's node: nothing heard from it for ``peer_timeout``, checked at heartbeats
  (:mod:`engine.core.failover`) — or, at the next heartbeat, when the followed stream is
  complete only above where the port is (a new incarnation: failover rule 4).  So a crash costs a
  gap of about the detector's time.
* ``deterministic`` ([12] in the paper): the failover model, and every operator replica processes
  its input in one merge order — by timestamp across all its ports, released only once the
  punctuations of all inputs pass it (:class:`operators.merge.MergeSorter`) — so peer replicas
  run identically.  Records wait for the slowest input's punctuation (§VI-B: "the pace … is
  eventually determined by the slowest input flow"), and a crash costs a failover as well: the
  paper's previous approaches "switch to another upstream server" (§VI-B, §VII).
* ``synchronization`` (process pairs, [9]): the failover model with at most two replicas of each
  entry point and operator.  Operator replicas form a pair, a primary and a backup: the primary
  sends its backup the determinants of its input interleaving (each step its operator took, in
  order) and holds its outputs until the backup acknowledged them; the backup's operator takes
  the primary's steps instead of its own input, and takes over with its own input when the
  detector suspects the primary (:mod:`engine.core.pairs`).

Rules of this module:

1. Pure: no clock, no I/O; a mode is a value, its traits a table.
2. A placement is shaped by keeping replica indexes: replicas a mode does not run become ``None``
   (removed), so ``name#i`` names the same replica in every mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Mode(Enum):
    """How replicas of one operator are fed and kept in step (see the module docstring)."""

    REPLICATION = "replication"
    NONE = "none"
    FAILOVER = "failover"
    DETERMINISTIC = "deterministic"
    SYNCHRONIZATION = "synchronization"


@dataclass(frozen=True)
class Traits:
    """What a mode changes."""

    #: Replicas per entry point and operator at most (None: as placed).
    max_replicas: int | None
    #: Each port follows one upstream replica and fails over to standbys (else: all feed it).
    follows_one: bool
    #: Operator replicas process input in the deterministic merge order (timestamps across ports).
    merged_order: bool = False
    #: Process pairs: primaries send determinants to a backup and hold outputs until acknowledged.
    determinants: bool = False


TRAITS = {
    Mode.REPLICATION: Traits(max_replicas=None, follows_one=False),
    Mode.NONE: Traits(max_replicas=1, follows_one=False),
    Mode.FAILOVER: Traits(max_replicas=None, follows_one=True),
    Mode.DETERMINISTIC: Traits(max_replicas=None, follows_one=True, merged_order=True),
    Mode.SYNCHRONIZATION: Traits(max_replicas=2, follows_one=True, determinants=True),
}

#: The modes' names, as a cluster file or scenario writes them.
MODES = tuple(mode.value for mode in Mode)


def parse_mode(value: object) -> Mode | None:
    """The mode named ``value``, or None if it names none (callers raise their own one-line error)."""
    return next((mode for mode in Mode if mode.value == value), None)


def shape(mode: Mode, placement: dict[str, list[str | None]], applications=()) -> dict[str, list[str | None]]:
    """``placement`` as ``mode`` runs it: at most ``max_replicas`` replicas of every entry point and
    operator — the first ones listed — the others removed (rule 2).  Applications are not replicated."""
    limit = TRAITS[mode].max_replicas
    if limit is None:
        return placement
    shaped: dict[str, list[str | None]] = {}
    for name, nodes in placement.items():
        if name in applications:
            shaped[name] = list(nodes)
            continue
        kept, out = 0, []
        for node in nodes:
            out.append(node if node and kept < limit else None)
            kept += bool(node)
        shaped[name] = out
    return shaped


def preference(target_index: int, upstream: list[int]) -> list[int]:
    """The upstream replica indexes a downstream replica ``target_index`` follows, best first: the one
    at ``target_index mod k`` (so replicas form independent chains, as in Flux and Borealis), then the
    next indexes in turn."""
    if not upstream:
        return []
    ordered = sorted(upstream)
    first = target_index % len(ordered)
    return ordered[first:] + ordered[:first]
