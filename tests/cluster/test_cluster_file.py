"""Derived cluster files (cluster.cluster_file): the user's file with node addresses changed, written
with tomli-w, so any string a TOML file can hold comes back the same (a hand-written writer once
emitted invalid TOML for a character outside the Basic Multilingual Plane)."""

from __future__ import annotations

import tomllib

from replicast.cluster.cluster_file import write_derived

SOURCE = '''query = "q.toml"
secret = "s\\u00e9cr\\u00e8t-\\U0001F600"
[mqtt]
broker = "mqtts://broker:8883"
ca = "certs/ca.pem"
[[nodes]]
name = "a"
port = 7001
[[nodes]]
name = "b\\U0001F600"
port = 7002
[placement]
cpu = ["a"]
[outputs.alerts]
file = "out/alerts-\\U0001F600.jsonl"
'''


def test_a_derived_file_keeps_every_value_and_changes_only_the_addresses(tmp_path):
    source = tmp_path / "cluster.toml"
    source.write_text(SOURCE, encoding="utf-8")
    (tmp_path / "run").mkdir()
    out = write_derived(source, tmp_path / "run" / "derived.toml",
                        addresses={"a": ("10.0.0.1", None), "b\U0001F600": ("127.0.0.1", 9002)}, by="a test")
    derived = tomllib.loads(out.read_text(encoding="utf-8"))
    original = tomllib.loads(SOURCE)
    assert derived["secret"] == original["secret"] == "s\u00e9cr\u00e8t-\U0001F600"
    assert [(n["name"], n.get("host"), n["port"]) for n in derived["nodes"]] == [
        ("a", "10.0.0.1", 7001), ("b\U0001F600", "127.0.0.1", 9002)]
    assert derived["query"] == str(tmp_path / "q.toml")                     # relative paths made absolute
    assert derived["mqtt"]["ca"] == str(tmp_path / "certs" / "ca.pem")
    assert derived["outputs"]["alerts"]["file"] == str(tmp_path / "out" / "alerts-\U0001F600.jsonl")
    assert derived["placement"] == original["placement"]
