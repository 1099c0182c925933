"""Bad cluster files, events files and traces give one line naming file, field and value, before
anything starts (STYLE.md rule 5, docs/node.md) — never a traceback, never silently accepted."""

from __future__ import annotations

import pytest

from replicast.engine.cluster_config import ClusterConfigError, check_source_commands, load_cluster
from tests.integration.helpers import CPU_FILTER_QUERY, replicast

GOOD = """query = "query.toml"
secret = "good-secret-123"
{top}
[mqtt]
port = 1883
{mqtt}
[[nodes]]
name = "a"
port = 7001
{node}
[placement]
cpu = ["a"]
busy = ["a"]
alerts = ["a"]
[outputs.alerts]
file = "out.jsonl"
{outputs}
[[sources]]
node = "a"
command = {command}
"""


def cluster(tmp_path, top="", mqtt="", node="", outputs="", command='["{python}", "{dir}/s.py", "{node}"]'):
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    path = tmp_path / "cluster.toml"
    path.write_text(GOOD.format(top=top, mqtt=mqtt, node=node, outputs=outputs, command=command))
    return path


def test_the_good_file_loads(tmp_path):
    config = load_cluster(cluster(tmp_path))
    assert config.heartbeat_ms == 500 and config.sources[0].command[1] == "{dir}/s.py"
    check_source_commands(config)


@pytest.mark.parametrize("change, message", [
    ({"top": "heartbeat_ms = -500"}, "'heartbeat_ms' must be a positive number of milliseconds (below a day), got -500"),
    ({"top": "punctuation_ms = 0"}, "'punctuation_ms' must be a positive number of milliseconds (below a day), got 0"),
    ({"top": "peer_timeout_ms = -1"}, "'peer_timeout_ms' must be a positive number"),
    ({"top": "heartbeat_ms = 4000"}, "'peer_timeout_ms' (3000) must be longer than 'heartbeat_ms' (4000)"),
    ({"outputs": "mqt = false"}, "[outputs.alerts]: unknown key(s) ['mqt'] (allowed: ['brokers', 'file', 'mqtt'])"),
    ({"node": "metrics_prot = 9000"}, "[[nodes]] #1 (a): unknown key(s) ['metrics_prot']"),
    ({"mqtt": "hots = \"x\""}, "[mqtt]: unknown key(s) ['hots']"),
    ({"node": "metrics_port = 70003"}, "[[nodes]] #1 (a): 'metrics_port' must be a port number (1-65535), got 70003"),
    ({"mqtt": "broker = \"mqtt://127.0.0.1:70003\""}, "the port must be in 1-65535"),
    ({"command": '["{python}", "{sorce}"]'}, "command argument '{sorce}': unknown placeholder {sorce} (known: {python}"),
    ({"command": '["{python}", "{"]'}, "command argument '{': Single '{' encountered"),
    ({"command": "[]"}, "[[sources]] #1: 'command' must not be empty"),
])
def test_a_bad_cluster_file_is_one_line_naming_file_field_and_value(tmp_path, change, message):
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(cluster(tmp_path, **change))
    text = str(error.value)
    assert text.startswith(str(tmp_path / "cluster.toml")) and "\n" not in text
    assert message in text, text


def test_a_source_program_that_does_not_exist_is_named(tmp_path):
    config = load_cluster(cluster(tmp_path, command='["no-such-program-xyz", "{node}"]'))
    with pytest.raises(ClusterConfigError, match=r"\[\[sources\]\] #1: command 'no-such-program-xyz' not found"):
        check_source_commands(config)


def test_a_node_name_too_long_for_the_handshake_is_refused(tmp_path):
    path = cluster(tmp_path)
    path.write_text(path.read_text().replace('name = "a"', f'name = "{"a" * 65}"'))
    with pytest.raises(ClusterConfigError, match="'name' must be 1-64 printable characters"):
        load_cluster(path)


def test_a_cluster_file_that_is_not_utf8_is_one_line(tmp_path):
    path = cluster(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"good-secret", b"g\xffod-secret"))
    with pytest.raises(ClusterConfigError, match=r"is not UTF-8 text \(byte \d+: b'\\xffod"):
        load_cluster(path)


def test_replay_of_an_events_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    (tmp_path / "events.jsonl").write_bytes(b'{"stream": "cpu", "ts": 1, "server": "\xff", "load": 0.9}\n')
    result = replicast("replay", str(tmp_path / "query.toml"), "--input", str(tmp_path / "events.jsonl"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("replicast replay: error: ")
    assert "not UTF-8" in result.stderr and "Traceback" not in result.stderr


def min_cost_cluster(tmp_path, coordinator: str) -> object:
    path = cluster(tmp_path)
    text = path.read_text().replace('[placement]\ncpu = ["a"]\nbusy = ["a"]\nalerts = ["a"]\n', "")
    path.write_text(text.replace('query = "query.toml"', 'query = "query.toml"\nplacement = "min-cost"')
                    + f"[coordinator]\n{coordinator}\n")
    return path


def test_a_min_cost_cluster_file_pins_entry_points_and_applications(tmp_path):
    config = load_cluster(min_cost_cluster(tmp_path, 'kmax = 1\ndmin_ms = 0\npin = { alerts = "a" }'))
    assert config.min_cost and config.placement == {"cpu": ["a"], "alerts": ["a"]}
    setup = config.coordination("a")
    assert setup.servers == ("a",) and setup.config.deploy.kmax == 1 and setup.config.deploy.dmin_ms == 0
    assert set(setup.estimate.pinned) == {"cpu", "alerts"} and setup.estimate.operators == ("busy",)
    assert setup.config.deploy.sink_replicas == 1
    # A list pins replicas 0, 1, … (a single node here, the file has one)
    listed = load_cluster(min_cost_cluster(tmp_path, 'kmax = 1\npin = { cpu = ["a"] }'))
    assert listed.placement == {"cpu": ["a"], "alerts": ["a"]}


@pytest.mark.parametrize("coordinator, message", [
    ("kmax = 2", "[coordinator]: kmax = 2 needs at least 2 nodes, the file has 1"),
    ("gc_every_s = 3", "[coordinator]: unknown key(s) ['gc_every_s']"),
    ("kmin = 0", "[coordinator]: 'kmin' must be an integer >= 1, got 0"),
    ("sink_replicas = 0", "[coordinator]: 'sink_replicas' must be an integer >= 1, got 0"),
    ("sink_replicas = 2", "[coordinator]: sink_replicas = 2 is more than kmax = 1 (Alg. 5 places one replica "
                          "of each per phase)"),
    ("report_ms = -5", "[coordinator]: 'report_ms' must be a positive number, got -5"),
    ("alpha = 1.5", "[coordinator]: 'alpha' must be at most 1, got 1.5"),
    ('pin = { nothing = "a" }', "[coordinator]: pin.nothing: not a stream or application"),
    ('pin = { cpu = "z" }', "[coordinator]: pin.cpu: unknown node 'z' (nodes: a)"),
    ('pin = { cpu = ["a", "z"] }', "[coordinator]: pin.cpu: unknown node 'z' (nodes: a)"),
    ('pin = { cpu = ["a", "a"] }', "[coordinator]: pin.cpu: a node is listed twice in ['a', 'a']"),
    ('pin = { cpu = [] }', "[coordinator]: pin.cpu: expected a node name or a non-empty list of node names, got []"),
])
def test_a_bad_coordinator_table_is_one_line(tmp_path, coordinator, message):
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(min_cost_cluster(tmp_path, "kmax = 1\n" * ("kmax" not in coordinator) + coordinator))
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_placement_is_a_table_or_min_cost(tmp_path):
    path = cluster(tmp_path)
    path.write_text(path.read_text().replace('[placement]\ncpu = ["a"]\nbusy = ["a"]\nalerts = ["a"]\n', "")
                    .replace('query = "query.toml"', 'query = "query.toml"\nplacement = "cheapest"'))
    with pytest.raises(ClusterConfigError, match="'placement' must be a table of node lists or \"min-cost\""):
        load_cluster(path)


def test_the_coordinator_needs_the_replication_mode(tmp_path):
    path = min_cost_cluster(tmp_path, "kmax = 1")
    path.write_text(path.read_text().replace('query = "query.toml"', 'query = "query.toml"\nmode = "failover"'))
    with pytest.raises(ClusterConfigError, match='need mode "replication".*got \'failover\''):
        load_cluster(path)
