"""``python -m replicast`` is the ``replicast`` command."""

from replicast.engine.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
