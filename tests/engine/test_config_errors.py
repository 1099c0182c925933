"""Bad cluster files, events files and traces give one line naming file, field and value, before
anything starts (issue 11, item 9) — never a traceback, never silently accepted."""

from __future__ import annotations

import pytest

from engine.cluster_config import ClusterConfigError, check_source_commands, load_cluster
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
    ({"outputs": "mqt = false"}, "[outputs.alerts]: unknown key(s) ['mqt'] (allowed: ['file', 'mqtt'])"),
    ({"node": "metrics_prot = 9000"}, "[[nodes]] #1: unknown key(s) ['metrics_prot']"),
    ({"mqtt": "hots = \"x\""}, "[mqtt]: unknown key(s) ['hots']"),
    ({"node": "metrics_port = 70003"}, "node a: metrics_port 70003 is out of range (1-65535)"),
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
