"""The ``replicast`` command.

Each package contributes its subcommands through a ``register(subparsers)`` function in its own
``cli`` module; this module only assembles them, sets up logging, and turns
:class:`~operators.errors.ReplicastError` into one clear line on stderr and exit status 2.
Heavy imports (PySpark, SimPy, matplotlib) happen inside the subcommand, so ``--help`` is instant
and works from the base install; a subcommand run without its extra says which one to install
(:mod:`engine.extras`; a subcommand names its extra with ``set_defaults(extra=…)``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from replicast import __version__
from replicast.engine.extras import missing_extra
from replicast.operators.errors import ReplicastError

#: Modules that define subcommands, in the order they appear in ``replicast --help``.
COMMAND_MODULES = (
    "replicast.engine.replay_cli",
    "replicast.traces.cli",
    "replicast.engine.node_cli",
    "replicast.cluster.cli",
    "replicast.experiments.simulate_cli",
    "replicast.experiments.plot_cli",
    "replicast.experiments.cli",
    "replicast.engine.place_cli",
    "replicast.engine.explain_cli",
    "replicast.consume_cli",
    "replicast.engine.trace_cli",
    "replicast.engine.dashboard_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replicast",
        description="Wide-area replicated stream processing (Hwang, Cetintemel, Zdonik, ICDE 2008).",
    )
    parser.add_argument("--version", action="version", version=f"replicast {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    try:
        return int(args.run(args) or 0)
    except ReplicastError as error:
        print(f"replicast {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        # An optional dependency the base install lacks (docs/install.md): say which extra.
        line = missing_extra(error, getattr(args, "extra", None))
        if line is None:
            raise
        print(f"replicast {args.command}: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"replicast {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
