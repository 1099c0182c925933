"""The operator contract and punctuation propagation (DESIGN.md §5, paper §IV-A).

An operator is a pure object with ``n_inputs`` ports.  A driver calls

* ``on_batch(port, records) -> list[Record]`` — records that arrived on ``port`` (already
  de-duplicated, and sorted if the operator is order-sensitive); returns the records it emits;
* ``on_punctuation(port, p) -> (records, punctuation | None)`` — a punctuation on ``port``;
  returns the records it emits *before* the punctuation it forwards (or None);
* ``snapshot()`` / ``restore(state)`` — plain-data state (lists, dicts, ints) for checkpoints.

§IV-A: an operator forwards punctuation ``p`` as soon as it has received ``≥ p`` on all inputs —
the *frontier* is the minimum over ports of the largest punctuation seen there.  Subclasses react
to the frontier advancing in :meth:`Operator.on_frontier` (windows close there) and to a single
port's punctuation in :meth:`Operator.on_port_punctuation` (join buffers are pruned there).

Declared properties (used by the planner, the node and coordination analysis):
``order_sensitive`` (needs sorted input, §IV-C), ``stateful``, ``partition_key``, and
``complete_input_required``: each output summarises *every* input record of a window, so a replica
that missed part of its input (a restarted or newly started replica joining mid-stream) would emit
wrong records and must stay silent instead.  A Join is stateful but not such an operator: each of
its outputs is one correct pair, whatever it missed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from operators.record import Record

#: The frontier before any punctuation: nothing is promised yet.
NO_PUNCTUATION = -(2**63)


class Operator:
    """Base class: punctuation bookkeeping shared by all operators."""

    kind: ClassVar[str] = "operator"
    order_sensitive: ClassVar[bool] = False
    stateful: ClassVar[bool] = False
    complete_input_required: ClassVar[bool] = False
    partition_key: tuple[str, ...] | None = None

    def __init__(self, n_inputs: int = 1):
        self.n_inputs = n_inputs
        self.port_punctuations = [NO_PUNCTUATION] * n_inputs
        self.frontier = NO_PUNCTUATION
        #: Records whose expression evaluation failed (e.g. division by zero); dropped, counted.
        self.errors = 0
        self.last_error: str | None = None

    # -- inputs ---------------------------------------------------------------------------------
    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        raise NotImplementedError

    def on_record(self, port: int, record: Record) -> list[Record]:
        """Convenience for stepping an operator by hand: one record."""
        return self.on_batch(port, [record])

    def on_punctuation(self, port: int, p: int) -> tuple[list[Record], int | None]:
        if p <= self.port_punctuations[port]:
            return [], None
        self.port_punctuations[port] = p
        out = self.on_port_punctuation(port, p)
        frontier = min(self.port_punctuations)
        if frontier <= self.frontier:
            return out, None
        self.frontier = frontier
        return out + self.on_frontier(frontier), frontier

    # -- hooks ----------------------------------------------------------------------------------
    def on_port_punctuation(self, port: int, p: int) -> list[Record]:
        """Port ``port`` promised ``ts > p`` from now on."""
        return []

    def on_frontier(self, p: int) -> list[Record]:
        """All ports promised ``ts > p``: emit what can no longer change."""
        return []

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {"port_punctuations": list(self.port_punctuations), "frontier": self.frontier,
                "errors": self.errors, "state": self.snapshot_state()}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.port_punctuations = list(snapshot["port_punctuations"])
        self.frontier = snapshot["frontier"]
        self.errors = snapshot["errors"]
        self.restore_state(snapshot["state"])

    def snapshot_state(self) -> Any:
        return None

    def restore_state(self, state: Any) -> None:
        pass

    # -- errors ---------------------------------------------------------------------------------
    def count_error(self, record: Record, error: Exception) -> None:
        """Expression errors are deterministic, so every replica drops the same records."""
        self.errors += 1
        self.last_error = f"{type(error).__name__}: {error} on record {record!r}"
