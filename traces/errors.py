"""Errors a user can fix in trace files, trace names and trace commands."""

from replicast.operators.errors import ReplicastError


class TraceError(ReplicastError):
    """A trace is missing, malformed or inconsistent; the message names the file, line and reason."""
