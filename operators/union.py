"""Union: merges n streams with identical fields into one (§IV-D).

Stateless and non-blocking; its output order depends on arrival order (Fig. 1: ∪2,1 and ∪2,2
emit different orders), which is fine because downstream operators are replica-consistent.
The base class forwards a punctuation once every input has sent one at least as large (§IV-A).
"""

from __future__ import annotations

from replicast.operators.base import Operator
from replicast.operators.record import Record


class Union(Operator):
    kind = "union"

    def __init__(self, n_inputs: int):
        super().__init__(n_inputs)

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        return records
