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

Declared property: ``order_sensitive`` (needs sorted input, §IV-C; where replicas actually sort
is the coordination analysis's verdict, from each operator's Blazes annotation: docs/explain.md).

Rebuilding without a live peer (``docs/lifecycle.md``): a replica whose every peer is lost starts
empty from what upstream logs still hold.  Each port *adopts* a frontier (:meth:`Operator.adopt`):
the input at or below it is lost.  :meth:`Operator.rebuild` then says above which timestamp the
outputs are complete (the *horizon*) and makes the operator drop any output it cannot prove
complete (``suppress_through``): missing output is possible then, wrong output never.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from replicast.operators.record import Record, short_repr

#: The frontier before any punctuation: nothing is promised yet.
NO_PUNCTUATION = -(2**63)


# Compiled natively (replicast/native_build.py); users' operators subclass it in Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Operator:
    """Base class: punctuation bookkeeping shared by all operators."""

    kind: ClassVar[str] = "operator"
    order_sensitive: ClassVar[bool] = False
    #: The names of the fields whose values :meth:`on_key_seal` receives as ``key``, in that order
    #: (sorted names); set by the replica where the analysis seals this operator per key.
    key_seal_fields: tuple[str, ...] = ()

    def __init__(self, n_inputs: int = 1):
        self.n_inputs = n_inputs
        self.port_punctuations = [NO_PUNCTUATION] * n_inputs
        self.frontier = NO_PUNCTUATION
        #: Records whose expression evaluation failed (e.g. division by zero); dropped, counted.
        self.errors = 0
        self.last_error: str | None = None
        #: Outputs with ``ts`` at or below this are dropped: they may summarise lost input (rebuild).
        self.suppress_through = NO_PUNCTUATION

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

    def on_key_seal(self, port: int, key: tuple, p: int) -> list[Record]:
        """Port ``port`` promised no more records of key ``key`` with ``ts ≤ p`` (a seal per key,
        :mod:`operators.key_seals`): emit what that partition completes.  Default: nothing.

        ``key`` holds the values of :attr:`key_seal_fields`.  The replica calls this once per port
        and seal that raises the key (copies from other stream replicas are merged first, §IV-B), and
        drops a later record of that key at or below ``p``.  Other ports may still send records of
        ``key`` up to their own seal or punctuation: an operator with several inputs completes a
        key's partition once every port has sealed it (:attr:`port_punctuations` for the ports'
        whole-stream punctuations).  A user operator receives seals only if it declares
        ``key_seals = "close"`` (docs/queries.md)."""
        return []

    # -- rebuilding without a live peer ---------------------------------------------------------
    def adopt(self, port: int, frontier: int) -> list[Record]:
        """Port ``port`` starts above ``frontier``: what lies at or below it is lost.  Like a
        punctuation, except that the frontier is only recorded — no window closes on lost input."""
        if frontier <= self.port_punctuations[port]:
            return []
        self.port_punctuations[port] = frontier
        out = self.on_port_punctuation(port, frontier)
        self.frontier = max(self.frontier, min(self.port_punctuations))
        return out

    def rebuild(self, frontiers: list[int]) -> int:
        """Every port has adopted its frontier: returns the horizon above which this operator's
        outputs are complete, and suppresses the outputs at or below it that it cannot vouch for.
        The default fits operators whose output timestamp is an input timestamp (stateless ones)."""
        return max(frontiers)

    def vouch(self, records: list[Record]) -> list[Record]:
        """``records`` without those at or below :attr:`suppress_through` (operators that suppress call it)."""
        through = self.suppress_through
        return [r for r in records if r[0] > through] if through > NO_PUNCTUATION else records

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {"port_punctuations": list(self.port_punctuations), "frontier": self.frontier,
                "errors": self.errors, "suppress_through": self.suppress_through, "state": self.snapshot_state()}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.port_punctuations = list(snapshot["port_punctuations"])
        self.frontier = snapshot["frontier"]
        self.errors = snapshot["errors"]
        self.suppress_through = snapshot.get("suppress_through", NO_PUNCTUATION)
        self.restore_state(snapshot["state"])

    def snapshot_state(self) -> Any:
        return None

    def restore_state(self, state: Any) -> None:
        pass

    # -- errors ---------------------------------------------------------------------------------
    def count_error(self, record: Record, error: Exception) -> None:
        """Expression errors are deterministic, so every replica drops the same records."""
        self.errors += 1
        self.last_error = f"{type(error).__name__}: {str(error)[:200]} on record {short_repr(record, 200)}"
