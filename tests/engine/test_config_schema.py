"""Cluster files checked by their msgspec schema (engine/cluster_config.py ClusterFile, engine/mqtt_config.py,
engine/placement_config.py): every kind of mistake is one line naming the file, the table, the key and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicast.engine.cluster_config import ClusterConfigError, parse_cluster
from replicast.engine.placement_config import parse_coordinator

WHERE = Path("/clusters/c.toml")
BASE = {"query": "q.toml", "secret": "12345678", "nodes": [{"name": "a", "port": 7001}], "placement": {}}


def refusal(**change) -> str:
    with pytest.raises(ClusterConfigError) as error:
        parse_cluster({**BASE, **change}, WHERE)
    text = str(error.value)
    assert text.startswith(f"{WHERE}: ") and "\n" not in text, text
    return text.removeprefix(f"{WHERE}: ")


@pytest.mark.parametrize("change, expected", [
    # a value of the wrong type: table, key, value
    ({"nodes": [{"name": "a", "port": "x"}]}, "[[nodes]] #1 (a): 'port' should be an integer, got 'x'"),
    ({"heartbeat_ms": True}, "'heartbeat_ms' should be a number, got True"),
    ({"nodes": 4}, "'nodes' should be an array, got 4"),
    ({"placement": 5}, "'placement' should be a string or a table, got 5"),
    ({"tls": {"cert": 1}}, "[tls]: 'cert' should be a string, got 1"),
    ({"mqtt": {"port": "x"}}, "[mqtt]: 'port' should be an integer, got 'x'"),
    # inside a table of tables, and inside an array: the key msgspec writes as [...] is found again
    ({"outputs": {"alerts": {"mqtt": True}, "log": {"file": 3}}}, "[outputs.log]: 'file' should be a string, got 3"),
    ({"outputs": {"alerts": {"brokers": ["mqtt://x", 4]}}}, "[outputs.alerts]: 'brokers[1]' should be a string, got 4"),
    ({"entry_modes": {"cpu": "source", "ping": 1}}, "[entry_modes]: 'ping' should be a string, got 1"),
    ({"nodes": [{"name": "a", "port": 7001}, {"name": "b", "port": 7002, "ssh": {"user": 3}}]},
     "[[nodes]] #2 (b): ssh: 'user' should be a string, got 3"),
    # a missing key
    ({"nodes": [{"name": "a"}]}, "[[nodes]] #1 (a): missing key 'port'"),
    ({"sources": [{"node": "a"}]}, "[[sources]] #1: missing key 'command'"),
    # unknown keys: all of them, and what is allowed
    ({"nodes": [{"name": "a", "port": 1, "prot": 2, "hots": 3}]},
     "[[nodes]] #1 (a): unknown key(s) ['hots', 'prot'] (allowed: ['host', 'metrics_port', 'name', 'port', 'source_port', "
     "'ssh'])"),
    ({"heartbeat": 5}, "unknown key(s) ['heartbeat'] (allowed: ['coordinator', 'entry_mode',"),
    # out of range: the constraint's description says what to write
    ({"heartbeat_ms": float("nan")}, "'heartbeat_ms' must be a positive number of milliseconds (below a day), got nan"),
    ({"retention_items": 0}, "'retention_items' must be a positive whole number, got 0"),
    ({"nodes": [{"name": "a", "port": 0}]}, "[[nodes]] #1 (a): 'port' must be a port number (1-65535), got 0"),
    ({"mqtt": {"session_expiry_s": 0}}, "[mqtt]: 'session_expiry_s' must be a positive whole number of seconds below "
                                        "2^32, got 0"),
])
def test_a_mistake_names_the_table_key_and_value(change, expected):
    assert expected in refusal(**change)


def test_a_long_value_is_cut_short():
    text = refusal(nodes=[{"name": "a", "port": "9" * 5000}])
    assert len(text) < 200 and "(5002 chars)" in text


@pytest.mark.parametrize("table, expected", [
    ({"report_ms": float("inf")}, "'report_ms' must be a positive number, got inf"),
    ({"report_ms": "5"}, "'report_ms' should be a number, got '5'"),
    ({"theta": -1}, "'theta' must be a number >= 0, got -1"),
    ({"kmin": 1.5}, "'kmin' should be an integer, got 1.5"),
    ({"gc": "yes"}, "'gc' should be true or false, got 'yes'"),
    ({"compare_static": False, "pin": {}}, "unknown key(s) ['pin'] (allowed: ["),
])
def test_a_scenario_coordinator_table_names_key_and_value(table, expected):
    with pytest.raises(ValueError) as error:
        parse_coordinator(table, "s.toml: [coordinator]", ValueError)
    assert str(error.value).startswith("s.toml: [coordinator]: ") and expected in str(error.value), error.value


def test_the_schema_defaults_are_the_settings_defaults():
    from replicast.engine.placement_config import CoordinatorSettings
    assert parse_coordinator({}, "s", ValueError) == CoordinatorSettings()
    assert parse_coordinator({"report_ms": 7, "kmin": 3}, "s", ValueError) == CoordinatorSettings(report_ms=7.0, kmin=3)
