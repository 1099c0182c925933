"""Errors a user can fix in placement inputs (a query's rates, a trace, a strategy's constraints)."""

from replicast.operators.errors import ReplicastError


class PlacementError(ReplicastError):
    """No deployment satisfies the constraints, or a placement input is malformed; the message says
    which operator, server or option and what was expected."""
