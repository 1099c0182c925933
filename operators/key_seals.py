"""Seals per key: "no more records with key ``K`` and ``ts ≤ p``" (Blazes ``000_…`` §V-B1; docs/explain.md).

A source that declares ``seal = ["server"]`` sends, besides its time punctuations (§IV-A), a *key
seal* ``(K, p)`` per value ``K`` of that key.  The declaration is Blazes' *independent seal*: each
value of the key comes from one source stream, so once that stream sealed ``K`` at ``p``, the
partition ``K`` is complete up to ``p`` wherever it flows — a keyed window closes once its own
producer sealed it, instead of waiting for every producer's punctuation (§VIII-B3, Fig. 14).

Rules of this module (pure: no clock, no I/O):

1. A key seal is ``(key, p)`` with ``key`` the tuple of the sealed attributes' values, in the order
   of the attribute names sorted (:func:`key_names`), so every stream and operator spells one key alike.
2. A whole-stream punctuation ``q`` seals every key up to ``q``, but only for the stream it is on:
   behind a Union the output's punctuation is the *slowest* input's, so a seal equal to its own
   stream's punctuation still says something there.  A seal is dropped only below the frontier of
   the replica that holds it (its operator's, an entry point's punctuation); the table forgets keys
   that frontier passed (memory bounded by the keys sealed within one punctuation interval).
3. Seals from the ``k`` replicas of an upstream are merged like punctuations (§IV-B): the first one
   that raises a key's seal wins, later equal or lower ones are dropped — idempotent, any order.
4. Seals are hints that are safe to lose: a replica that misses one closes the same windows at the
   next whole-stream punctuation, with the same contents, only later.  So they are not items of a
   stream replica (not logged, acknowledged or replayed); a seal is valid only *after* the records
   it covers, which the node guarantees by sending it behind them (engine/core/key_seals.py).
5. Which operators act on seals is the coordination analysis' verdict (:func:`key_sealing`): a
   keyed window whose gate the key is compatible with (Decision.key_seal) closes per key, and so
   does a user operator that declares ``key_seals = "close"`` (its ``on_key_seal``);
   Filter, Union and Map pass them on where the analysis says their output keeps the seal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.blazes import TS

if TYPE_CHECKING:
    from replicast.operators.query import Query

#: One key seal: (values of the sealed attributes in sorted-name order, p).
KeySeal = tuple[tuple, int]


def key_names(attributes: Iterable[str]) -> tuple[str, ...]:
    """The order a key's values travel in (rule 1)."""
    return tuple(sorted(attributes))


class SealTable:
    """The highest seal per key above a whole-stream punctuation (rules 2 and 3)."""

    __slots__ = ("seals",)

    def __init__(self) -> None:
        self.seals: dict[tuple, int] = {}

    def raise_seal(self, key: tuple, p: int, frontier: int) -> bool:
        """Record seal ``(key, p)``; returns whether it is new: above the key's seal, not below ``frontier``."""
        if p < frontier or p <= self.seals.get(key, NO_PUNCTUATION):
            return False
        self.seals[key] = p
        return True

    def sealed(self, key: tuple) -> int:
        """The key's seal (``NO_PUNCTUATION`` if none above the last pruning)."""
        return self.seals.get(key, NO_PUNCTUATION)

    def prune(self, punctuation: int) -> None:
        """Forget the seals a whole-stream punctuation now covers."""
        if self.seals:
            self.seals = {k: p for k, p in self.seals.items() if p > punctuation}

    def __len__(self) -> int:
        return len(self.seals)

    def snapshot(self) -> list[Any]:
        return [[list(k), p] for k, p in self.seals.items()]

    def restore(self, state: Sequence[Any]) -> None:      # (a list, or a tuple off the wire)
        self.seals = {tuple(k): p for k, p in state}


@dataclass(frozen=True)
class KeySealing:
    """What the replicas of one operator do with key seals (rule 5).

    ``key``: the sealed attributes at its input (sorted); ``closes``: a keyed window acting per key;
    ``forwards``: its output keeps the seal, so it passes seals on (after what they made it emit),
    with the values reordered by ``order`` where a Map renames the key's attributes (rule 1).
    ``record_positions``: where the key's values sit in an input record (``ts`` is 0);
    ``group_positions``: where they sit in an aggregate's group tuple.
    """

    key: tuple[str, ...]
    forwards: bool = False
    closes: bool = False
    record_positions: tuple[int, ...] = ()
    group_positions: tuple[int, ...] = ()
    order: tuple[int, ...] | None = None
    #: A keyed join: per port, where a seal's values go in its join key (None: that port has no seal
    #: on its join fields), and where the key's values sit in that port's records.
    port_orders: tuple[tuple[int, ...] | None, ...] = ()
    port_positions: tuple[tuple[int, ...], ...] = ()

    def positions(self, port: int) -> tuple[int, ...]:
        """Where the sealed key's values sit in a record arriving on ``port``."""
        return self.port_positions[port] if self.port_positions else self.record_positions


#: Operator kinds whose output keeps a key seal where the analysis says so (Blazes' injectivefd:
#: the key's attributes copied unchanged); joins and user operators keep Seal_ts only.
_CARRYING = ("filter", "union", "map", "aggregate")


def key_sealing(query: "Query", name: str) -> KeySealing | None:
    """The analysis' verdict for operator ``name``: None where key seals stop (rule 5)."""
    from replicast.operators.coordination import Coordination   # it imports the query model

    if name not in query.operators:
        return None
    spec = query.operators[name]
    decisions = query.coordination
    shared = frozenset.intersection(*[frozenset(k for k in decisions.seals[i] if k != frozenset({TS}))
                                      for i in spec.inputs])
    if spec.kind == "join":
        return _join_sealing(query, name)
    if spec.kind == "python":
        return _user_sealing(query, name)
    if not shared or spec.kind not in _CARRYING:
        return None
    key = key_names(min(shared, key=key_names))      # one per stream: a source declares one key
    schema = query.schemas[spec.inputs[0]]
    decision = decisions.by_name[name]
    closes = decision.coordination is Coordination.SEAL_KEY
    if closes:
        key = key_names(decision.key_seal)
    back: dict[str, str] = {}
    for out, source in query.compiled[name].carries.items():
        back.setdefault(source, out)
    out_key = frozenset(back.get(a, "") for a in key)
    forwards = out_key in decisions.seals[name]
    if not (closes or forwards):
        return None
    renamed = [back.get(a, "") for a in key]                    # output names, in the input key's order
    order = tuple(renamed.index(n) for n in sorted(renamed)) if forwards else None
    group_by = list(spec.params.get("group_by", []))
    return KeySealing(key, forwards=forwards, closes=closes,
                      record_positions=tuple(schema.index(a) for a in key),
                      group_positions=tuple(group_by.index(a) for a in key) if closes else (),
                      order=None if order == tuple(range(len(key))) else order)


def _user_sealing(query: "Query", name: str) -> KeySealing | None:
    """A user operator that declares ``key_seals = "close"`` and whose gate the seal is compatible with
    (the analysis chose SEAL_KEY): its replicas hand it every port's seals (``on_key_seal``).  It passes
    none on: the analysis cannot see which fields it copies (docs/explain.md, "Limits")."""
    from replicast.operators.coordination import Coordination   # it imports the query model

    decision = query.coordination.by_name[name]
    if decision.coordination is not Coordination.SEAL_KEY:
        return None
    key = key_names(decision.key_seal)
    return KeySealing(key, closes=True, port_positions=tuple(tuple(query.schemas[upstream].index(a) for a in key)
                                                             for upstream in query.operators[name].inputs))


def _join_sealing(query: "Query", name: str) -> KeySealing | None:
    """A keyed join whose inputs are sealed on their own join fields: seals prune its buffers per key
    (Alg. 2 lines 5–6 on one partition).  Its outputs wait for nothing, so only memory gains."""
    join_keys = query.compiled[name].join_keys
    if join_keys is None:
        return None
    orders, positions = [], []
    for port, (upstream, fields) in enumerate(zip(query.operators[name].inputs, join_keys)):
        schema = query.schemas[upstream]
        key = key_names(fields)
        sealed = frozenset(fields) in query.coordination.seals[upstream] and len(set(fields)) == len(fields)
        orders.append(tuple(key.index(f) for f in fields) if sealed else None)
        positions.append(tuple(schema.index(a) for a in key))
    if not any(o is not None for o in orders):
        return None
    return KeySealing(key_names(join_keys[0]), closes=True, port_orders=tuple(orders),
                      port_positions=tuple(positions))


def record_key(record: tuple, positions: tuple[int, ...]) -> tuple:
    """The key of ``record`` (its values at ``positions``)."""
    return tuple(record[i] for i in positions)
