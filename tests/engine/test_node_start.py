"""How ``replicast node`` tells the core how its process began (``Start``, engine/core/hosted.py):
``note_start`` reads and writes the node's start note in its state directory (docs/lifecycle.md:
a restarted node's entry points, with no live peer, do not claim their whole stream)."""

from __future__ import annotations

import shutil
from pathlib import Path

from replicast.engine.cluster_config import load_cluster
from replicast.engine.node import Start
from replicast.engine.node_cli import note_start

ROOT = Path(__file__).resolve().parents[2]


def test_a_node_starts_fresh_once_per_cluster_and_state_directory(tmp_path):
    for name in ("cluster-fig1.toml", "cluster-fig1-query.toml", "fig1.toml"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    config = load_cluster(tmp_path / "cluster-fig1.toml")
    node, state = next(iter(config.nodes)), tmp_path / "state"
    assert note_start(state, config, node) is Start.FRESH
    assert note_start(state, config, node) is Start.RESTARTED           # the same cluster, noted before
    assert note_start(tmp_path / "elsewhere", config, node) is Start.FRESH
    shutil.copy(tmp_path / "cluster-fig1.toml", tmp_path / "other.toml")
    assert note_start(state, load_cluster(tmp_path / "other.toml"), node) is Start.FRESH   # another cluster file
