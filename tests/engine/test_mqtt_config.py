"""The ``[mqtt]`` table (engine/mqtt_config.py): per-node brokers, credentials from the environment,
TLS files, sessions; every mistake one line naming file, table, key and value."""

from __future__ import annotations

import pytest

from replicast.engine.cluster_config import ClusterConfigError, load_cluster
from tests.engine.test_config_errors import cluster


def test_brokers_credentials_and_tls_are_read(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_MQTT_PASSWORD", "s3cret-pw")
    config = load_cluster(cluster(tmp_path, mqtt='broker = "mqtts://site-a.example:8884"\nusername = "replicast"\n'
                                  'password_env = "TEST_MQTT_PASSWORD"\nca = "tls/ca.crt"\ncert = "tls/{node}.crt"\n'
                                  'key = "tls/{node}.key"\nsession_expiry_s = 600\n'
                                  'brokers = { a = "mqtt://site-b.example" }',
                                  outputs='brokers = ["mqtts://site-a.example", "mqtt://10.0.0.9:1999"]'))
    mqtt = config.mqtt
    assert (mqtt.default.host, mqtt.default.port, mqtt.default.tls) == ("site-a.example", 8884, True)
    assert mqtt.broker_for("a").url == "mqtt://site-b.example" and mqtt.broker_for("a").port == 1883
    assert mqtt.username == "replicast" and mqtt.password == "s3cret-pw" and "s3cret" not in repr(mqtt)
    assert mqtt.tls_files("a") == {"ca": tmp_path / "tls/ca.crt", "cert": tmp_path / "tls/a.crt",
                                   "key": tmp_path / "tls/a.key"}
    assert mqtt.identifier("a") == "replicast-a" and mqtt.session_expiry_s == 600
    assert [(b.host, b.port, b.tls) for b in config.outputs["alerts"].brokers] == [
        ("site-a.example", 8883, True), ("10.0.0.9", 1999, False)]
    assert config.mqtt_address() == ("site-a.example", 8884)


def test_the_embedded_broker_is_the_default(tmp_path):
    config = load_cluster(cluster(tmp_path))
    assert config.broker == "embedded" and config.mqtt.broker_for("a").url == "embedded"
    assert config.mqtt_address() == ("127.0.0.1", 1883) and config.mqtt.password is None


@pytest.mark.parametrize("change, message", [
    ({"mqtt": 'password_env = "NO_SUCH_VARIABLE_XYZ"\nusername = "u"'}, "[mqtt]: password_env names $NO_SUCH_VARIABLE_XYZ, which is not set"),
    ({"mqtt": 'broker = "mqtt://u:pw@host:1883"'}, "put the user in 'username' and the password in the environment"),
    ({"mqtt": 'broker = "http://host"'}, "broker must be \"embedded\", mqtt://host:port or mqtts://host:port, got 'http://host'"),
    ({"mqtt": 'broker = "mqtt://host"\nca = "ca.crt"'}, "[mqtt]: ca given but no broker is mqtts:// (TLS)"),
    ({"mqtt": 'broker = "mqtts://host"\ncert = "c.crt"'}, "a client certificate needs both 'cert' and 'key', got only 'cert'"),
    ({"mqtt": 'brokers = { z = "mqtt://h" }'}, "[mqtt].brokers: unknown node 'z' (nodes: a)"),
    ({"mqtt": 'brokers = { a = "ftp://h" }'}, "[mqtt].brokers.a: broker must be"),
    ({"mqtt": 'session_expiry_s = 0'}, "'session_expiry_s' must be a positive whole number"),
    ({"mqtt": 'password = "in-the-file"'}, "[mqtt]: unknown key(s) ['password']"),
    ({"outputs": 'brokers = ["mqtt://h"]\nmqtt = false'}, "[outputs.alerts]: 'brokers' with mqtt = false"),
    ({"outputs": 'brokers = ["mqtt://h:0x"]'}, "[outputs.alerts] brokers: broker 'mqtt://h:0x': the port must be in 1-65535"),
])
def test_a_bad_mqtt_table_is_one_line(tmp_path, change, message):
    with pytest.raises(ClusterConfigError) as error:
        load_cluster(cluster(tmp_path, **change))
    text = str(error.value)
    assert text.startswith(str(tmp_path / "cluster.toml")) and "\n" not in text
    assert message in text, text


def test_a_missing_tls_file_stops_the_node_with_one_line(tmp_path, monkeypatch):
    from tests.integration.helpers import replicast
    path = cluster(tmp_path, mqtt='broker = "mqtts://127.0.0.1:1"\nca = "no-such-ca.crt"')
    done = replicast("node", "--config", str(path), "--name", "a", "--state-dir", str(tmp_path / "state"), timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"replicast node: error: [mqtt] ca {tmp_path / 'no-such-ca.crt'}: No such file or directory"), done.stderr
