"""Blazes' vocabulary (Alvaro et al., ICDE 2014, ``papers/000_…``): component annotations, stream
labels, and the compatibility of seals with partitions (docs/explain.md).

* A component path is annotated **C**onfluent or **O**rder-sensitive, and **R**ead-only or
  **W**rite (stateful): ``CR``, ``CW``, ``OR_gate``, ``OW_gate`` (Fig. 7).  ``gate`` is the set of
  attributes whose partitions the path never mixes; ``OR_*``/``OW_*`` (``gate = None``) means every
  record is its own partition, so no seal is compatible.
* A stream is labelled, by rising severity (Fig. 8), ``Seal_key`` (punctuated on ``key``),
  ``Async`` (deterministic contents, any order), ``Run`` (contents differ between runs), ``Inst``
  (between replicas of one run), ``Diverge`` (replica state differs for good).  ``NDRead_gate`` and
  ``Taint`` are internal labels the inference rules derive (Fig. 9) and reconciliation turns into
  ``Inst``/``Run``/``Diverge`` (Fig. 10).
* ``compatible(gate, key)`` (§V-A1): some attribute set of ``gate`` is injectively determined by
  ``key``.  replicast knows the identity (a key attribute carried unchanged) and one more
  dependency: ``ts → window`` for time windows.  It is monotone, not injective, but a time
  punctuation ``p`` seals the whole prefix ``ts ≤ p``, hence every window ending at or before
  ``p + 1`` — the paper's windows "with slack" (§III-C, query WINDOW).

This module is pure: values and small functions, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable

from replicast.operators.errors import QueryError

#: The pseudo-attribute naming the time window a record falls in (time-window Aggregate, Join).
WINDOW = "window"
#: The attribute every replicast stream is sealed on: sources punctuate on event time (§IV-A).
TS = "ts"


class Path(enum.Enum):
    """A component path's annotation class (Fig. 7), with its severity."""

    CR = 1
    CW = 2
    OR = 3
    OW = 4

    @property
    def order_sensitive(self) -> bool:
        return self in (Path.OR, Path.OW)

    @property
    def writes(self) -> bool:
        return self in (Path.CW, Path.OW)


@dataclass(frozen=True)
class Annotation:
    """One operator's annotation: its path class and, for order-sensitive paths, its gate."""

    path: Path
    gate: frozenset[str] | None = None       # None: OR_* / OW_* (each record its own partition)
    declared: bool = True                    # False: a user operator that declared nothing (default)

    def __str__(self) -> str:
        if not self.path.order_sensitive:
            return self.path.name
        return f"{self.path.name}_{{{','.join(sorted(self.gate))}}}" if self.gate else f"{self.path.name}_*"


#: What a user-defined operator that declares nothing is assumed to be: the most severe annotation.
MOST_SEVERE = Annotation(Path.OW, None, declared=False)


class Label(enum.IntEnum):
    """A stream's label (Fig. 8), by severity."""

    SEAL = 1
    ASYNC = 2
    RUN = 3
    INST = 4
    DIVERGE = 5

    @property
    def title(self) -> str:
        return {Label.SEAL: "Seal", Label.ASYNC: "Async", Label.RUN: "Run", Label.INST: "Inst",
                Label.DIVERGE: "Diverge"}[self]

    @property
    def agrees(self) -> bool:
        """Whether every replica, and every run, delivers the same contents."""
        return self <= Label.ASYNC


@dataclass(frozen=True)
class StreamLabel:
    """A derived stream label: the most severe label plus the seal keys the stream still carries.

    ``seals`` are keys (sets of attributes) the stream is punctuated on; a stream whose contents
    are deterministic and which carries a seal is ``Seal_key``.  Streams are delivered in any order
    (Async) whatever their label: the duplicate filter passes whichever copy comes first (§IV-B).
    """

    label: Label
    seals: frozenset[frozenset[str]] = frozenset()

    def __str__(self) -> str:
        if self.label is Label.SEAL:
            return "Seal_" + ", Seal_".join(_key(k) for k in sorted(self.seals, key=_key))
        return self.label.title


def _key(key: Iterable[str]) -> str:
    names = sorted(key)
    return names[0] if len(names) == 1 else "{" + ",".join(names) + "}"


def key_text(key: Iterable[str]) -> str:
    return _key(key)


def sealed(seals: Iterable[frozenset[str]]) -> StreamLabel:
    seals = frozenset(seals)
    return StreamLabel(Label.SEAL if seals else Label.ASYNC, seals)


def determines(key: frozenset[str], attribute: str) -> bool:
    """``injectivefd(key, attribute)`` as replicast knows it: identity, and ``ts → window``."""
    return key == frozenset({attribute}) or (attribute == WINDOW and key == frozenset({TS}))


def compatible(gate: frozenset[str] | None, key: frozenset[str]) -> bool:
    """§V-A1: ``∃ attr ⊆ gate | injectivefd(key, attr)``; never for ``gate = *``."""
    if gate is None:
        return False
    return key <= gate or any(determines(key, attribute) for attribute in gate)


def parse_annotation(label: Any, gate: Any, fields: Iterable[str], where: str) -> Annotation:
    """A user operator's declared annotation (``label``, ``gate`` keys of its query table)."""
    if label is None and gate is None:
        return MOST_SEVERE
    if label is None:
        label = "OW"
    names = ", ".join(p.name for p in Path)
    if not isinstance(label, str) or label not in Path.__members__:
        raise QueryError(f"{where} (label): expected one of {names} (Blazes' C.O.W.R. annotations), got {label!r}")
    path = Path[label]
    if gate is None:
        return Annotation(path, None)
    if not path.order_sensitive:
        raise QueryError(f"{where} (gate): only an order-sensitive path (OR, OW) has a gate; {label} has none")
    allowed = set(fields) | {TS, WINDOW}
    if not isinstance(gate, list) or not gate or any(not isinstance(g, str) or g not in allowed for g in gate):
        raise QueryError(f"{where} (gate): expected a non-empty list of input fields, 'ts' or 'window' "
                         f"(of {sorted(allowed)}), got {gate!r}")
    return Annotation(path, frozenset(gate))
