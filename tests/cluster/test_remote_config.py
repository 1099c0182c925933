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
    ({"port": 70000}, "[[nodes]] #2 (b): ssh: 'port' must be a port number (1-65535), got 70000"),
    ({"user": 3}, "user"),
    ("vm", "[[nodes]] #2 (b): 'ssh' should be a table, got 'vm'"),
])
def test_bad_ssh_tables_name_the_node_and_key(tmp_path, ssh, message):
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(write(tmp_path, b=ssh))
    assert "c.toml" in str(error.value) and message in str(error.value), error.value


def test_a_cluster_is_all_on_ssh_hosts_or_all_local(tmp_path):
    assert not is_remote(load_cluster(write(tmp_path)))
    with pytest.raises(ClusterError, match="nodes a have no ssh"):
        is_remote(load_cluster(write(tmp_path, b={})))


def test_pushed_files_and_secrets_from_the_environment(tmp_path, monkeypatch):
    """What 'up' pushes: the cluster file without ssh tables, the query, each node's certificate
    files of [tls] and [mqtt] under tls/ (paths rewritten), and which variables carry the secrets."""
    from replicast.cluster.remote import RemoteCluster, environment_names
    import tomllib
    path = write(tmp_path, a={}, b={})
    (tmp_path / "certs").mkdir()
    for name in ("ca.crt", "a.crt", "a.key", "b.crt", "b.key", "mqtt-ca.crt", "client-a.pem", "client-b.pem",
                 "client-a.key", "client-b.key"):
        (tmp_path / "certs" / name).write_text(name)
    text = path.read_text().replace('secret = "a-long-secret"', 'secret_env = "SSHC_SECRET"')
    text += ('[tls]\nca = "certs/ca.crt"\ncert = "certs/{node}.crt"\nkey = "certs/{node}.key"\n'
             '[mqtt]\nbroker = "mqtts://broker.example:8883"\nusername = "u"\npassword_env = "SSHC_MQTT_PASSWORD"\n'
             'ca = "certs/mqtt-ca.crt"\ncert = "certs/client-{node}.pem"\nkey = "certs/client-{node}.key"\n')
    path.write_text(text)
    monkeypatch.setenv("SSHC_SECRET", "a-long-secret-value")
    monkeypatch.setenv("SSHC_MQTT_PASSWORD", "broker-password")
    config = load_cluster(path)
    files = RemoteCluster(config, tmp_path / "run")._derived_files()
    assert {k: v.name for k, v in files.items() if k.startswith("cluster/tls/")} == {
        "cluster/tls/certs/ca.crt": "ca.crt", "cluster/tls/certs/a.crt": "a.crt", "cluster/tls/certs/b.crt": "b.crt",
        "cluster/tls/certs/a.key": "a.key", "cluster/tls/certs/b.key": "b.key",
        "cluster/tls/certs/mqtt-ca.crt": "mqtt-ca.crt", "cluster/tls/certs/client-a.pem": "client-a.pem",
        "cluster/tls/certs/client-b.pem": "client-b.pem", "cluster/tls/certs/client-a.key": "client-a.key",
        "cluster/tls/certs/client-b.key": "client-b.key"}
    pushed = tomllib.loads(files["cluster/cluster.toml"].read_text())
    assert pushed["query"] == "query.toml" and files["cluster/query.toml"] == config.query_path
    assert pushed["tls"]["cert"] == "tls/certs/{node}.crt" and pushed["mqtt"]["key"] == "tls/certs/client-{node}.key"
    assert all("ssh" not in node for node in pushed["nodes"])
    assert "a-long-secret-value" not in files["cluster/cluster.toml"].read_text()
    assert environment_names(config) == ["SSHC_SECRET", "SSHC_MQTT_PASSWORD"]
