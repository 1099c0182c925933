"""Example queries, simulation scenarios and cluster files, installed as package data.

Find them with ``importlib.resources.files("replicast.examples")``: the same call works from a
checkout (editable install) and from a wheel.
"""

from importlib.resources import files
from pathlib import Path


def example_path(name: str) -> Path:
    """The installed example file ``name`` (e.g. ``"sim-fig1.toml"``), as a file-system path:
    scenarios name their query and trace relative to themselves, so they are read in place."""
    return Path(str(files(__name__) / name))
