"""Errors a user can fix.

Every error raised for bad input — a query file, an events file, a config, a trace — derives from
:class:`ReplicastError` and carries a message that names *where* (file, line or operator), *what*
(field, token or value) and *what was expected*.  The command-line entry point prints the message
on one line and exits with status 2; it never shows a traceback for these.
"""


class ReplicastError(Exception):
    """Base class for errors caused by user input rather than by a bug."""


class QueryError(ReplicastError):
    """A query (TOML file or builder call) is malformed or inconsistent."""


class InputError(ReplicastError):
    """An input record or events file is malformed, mistyped or out of order."""
