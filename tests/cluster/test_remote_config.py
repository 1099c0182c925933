"""The ``ssh = {…}`` table of ``[[nodes]]`` (engine/cluster_config.py, docs/cluster.md) and which
clusters ``cluster up`` starts on ssh hosts."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from replicast.cluster.processes import ClusterError
from replicast.cluster.remote import hosts_of, is_remote, unique
from replicast.engine.cluster_config import ClusterConfigError, SshSpec, load_cluster
from tests.integration.helpers import CPU_FILTER_QUERY


def write(tmp_path: Path, **ssh) -> Path:
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    nodes = [{"name": n, "host": f"10.0.0.{i}", "port": 17000 + i, **({"ssh": ssh[n]} if n in ssh else {})}
             for i, n in enumerate(("a", "b"))]
    doc = {"query": "query.toml", "secret": "a-long-secret", "nodes": nodes,
           "placement": {"cpu": ["a", "b"], "busy": ["a", "b"], "alerts": ["b"]}}
    (tmp_path / "c.toml").write_text(tomli_w.dumps(doc))
    return tmp_path / "c.toml"


def test_defaults_and_every_key(tmp_path):
    config = load_cluster(write(tmp_path, a={}, b={"host": "vm-b", "user": "u", "port": 2222, "key": "k/id",
                                               "known_hosts": "kh", "python": "python3.12", "dir": "/srv/r"}))
    assert config.nodes["a"].ssh == SshSpec(host="10.0.0.0")
    assert config.nodes["a"].ssh.destination == "10.0.0.0:22"
    b = config.nodes["b"].ssh
    assert (b.destination, b.key, b.known_hosts, b.python, b.dir) == (
        "u@vm-b:2222", tmp_path / "k/id", tmp_path / "kh", "python3.12", "/srv/r")
    assert is_remote(config) and len(unique(hosts_of(config))) == 2


def test_nodes_on_one_destination_and_dir_share_a_host(tmp_path):
    config = load_cluster(write(tmp_path, a={"host": "vm"}, b={"host": "vm"}))
    hosts = unique(hosts_of(config))
    assert len(hosts) == 1 and hosts[0].nodes == ["a", "b"]


@pytest.mark.parametrize("ssh, message", [
    ({"hots": "x"}, "unknown key(s) ['hots']"),
    ({"port": 70000}, "port 70000 is out of range"),
    ({"user": 3}, "user"),
    ("vm", "expected a table"),
])
def test_bad_ssh_tables_name_the_node_and_key(tmp_path, ssh, message):
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(write(tmp_path, b=ssh))
    assert "c.toml" in str(error.value) and message in str(error.value), error.value


def test_a_cluster_is_all_on_ssh_hosts_or_all_local(tmp_path):
    assert not is_remote(load_cluster(write(tmp_path)))
    with pytest.raises(ClusterError, match="nodes a have no ssh"):
        is_remote(load_cluster(write(tmp_path, b={})))
