"""``cluster up`` on real sshd hosts (tests/cluster/sshd_hosts.py) when something is wrong: an
unreachable or unknown host, a wrong key, no Python, a port in use, a source that dies at start.
Each is one line naming the host and what failed, and leaves no process on any host.  Also a small
two-host cluster going up, reporting its state, and down; and ``cluster init``."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from tests.cluster.sshd_hosts import processes_under, replicast, sshd_hosts, wheel  # noqa: F401  (a fixture)
from tests.integration.helpers import CPU_FILTER_QUERY, ROOT


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with sshd_hosts(tmp_path_factory.mktemp("hosts"), 2) as found:
        yield found


def two_node_cluster(directory: Path, hosts, *, ssh: dict[str, dict] | None = None, sources: list | None = None,
                     metrics_base: int = 19100) -> Path:
    """Nodes a and b on hosts 0 and 1 (on loopback hosts: ports free here); the broker on a's host."""
    (hosts_list, key, _, known_hosts) = hosts
    (directory / "query.toml").write_text(CPU_FILTER_QUERY)
    from tests.integration.helpers import free_ports
    ports = [19000, 19001, metrics_base, metrics_base + 1, 18830] if hosts_list[0].namespace else free_ports(5)
    nodes = []
    for i, name in enumerate(("a", "b")):
        table = hosts_list[i].ssh(key=str(key), known_hosts=str(known_hosts))
        table.update((ssh or {}).get(name, {}))
        nodes.append({"name": name, "host": hosts_list[i].address, "port": ports[i], "metrics_port": ports[2 + i],
                      "ssh": table})
    doc = {"query": "query.toml", "secret_env": "SSHCLUSTER_TEST_SECRET", "heartbeat_ms": 200,
           "mqtt": {"broker": "embedded", "host": hosts_list[0].address, "port": ports[4]}, "nodes": nodes,
           "placement": {"cpu": ["a", "b"], "busy": ["a", "b"], "alerts": ["b"]}}
    if sources:
        doc["sources"] = sources
    (directory / "cluster.toml").write_text(tomli_w.dumps(doc))
    return directory / "cluster.toml"


def up(cluster: Path, run_dir: Path, wheel: Path, *extra: str) -> subprocess.CompletedProcess:
    import os
    os.environ["SSHCLUSTER_TEST_SECRET"] = "a-secret-from-the-environment"
    return replicast("cluster", "up", str(cluster), "--run-dir", str(run_dir), "--wheel", str(wheel),
                     "--system-site-packages", "--timeout", "60", *extra)


def assert_nothing_left(hosts) -> None:
    deadline = time.monotonic() + 5
    while processes_under(*(h.dir for h in hosts[0])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_under(*(h.dir for h in hosts[0])) == []


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stdout, result.stderr)
    return lines[0]


def test_up_status_down_on_two_hosts(tmp_path, hosts, wheel):
    """Installed from a wheelhouse with pip --no-index: hosts need no internet."""
    (tmp_path / "source.py").write_text("import sys, time\nopen(sys.argv[1], 'w').write(sys.executable)\ntime.sleep(300)\n")
    source = {"node": "b", "command": ["{python}", "{dir}/source.py", "{dir}/source-ran-with"]}
    cluster = two_node_cluster(tmp_path, hosts, sources=[source])
    (tmp_path / "wheelhouse").mkdir()
    shutil.copy(wheel, tmp_path / "wheelhouse")
    started = up(cluster, tmp_path / "run", wheel, "--wheelhouse", str(tmp_path / "wheelhouse"))
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr
        print(started.stdout)
        assert "[a] " in started.stdout and "[b] " in started.stdout          # the nodes' logs, by name
        for i, node in enumerate(("a", "b")):
            spec = tomllib.loads(cluster.read_text())["nodes"][i]
            assert f"http://{spec['host']}:{spec['metrics_port']}/metrics" in started.stdout
        pushed = hosts[0][0].dir / "cluster" / "cluster.toml"
        assert pushed.stat().st_mode & 0o777 == 0o600 and "ssh" not in tomllib.loads(pushed.read_text())["nodes"][0]
        status = replicast("cluster", "status", "--run-dir", str(tmp_path / "run"))
        assert status.returncode == 0, status.stdout + status.stderr
        assert [line.split()[:2] for line in status.stdout.splitlines()] == [
            ["broker", "running"], ["a", "ready"], ["b", "ready"], ["source-b-0", "running"]]
        # The source ran on b's host, from the pushed file, with the venv's Python.
        ran_with = hosts[0][1].dir / "cluster" / "source-ran-with"
        assert ran_with.read_text() == str(hosts[0][1].dir / "venv" / "bin" / "python")
        # 'cluster logs' follows every process's new lines until Ctrl-C, which leaves the cluster running.
        logs = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "cluster", "logs", "--run-dir",
                                 str(tmp_path / "run")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert "following the logs" in logs.stdout.readline()
        time.sleep(1.0)
        logs.send_signal(signal.SIGINT)
        assert logs.wait(20) == 130
        again = replicast("cluster", "status", "--run-dir", str(tmp_path / "run"))
        assert again.returncode == 0 and again.stdout.count(" ready ") == 2, again.stdout
        # The secret reached the nodes through the environment, never a command line.
        assert not any("a-secret-from-the-environment" in p for p in processes_under(hosts[0][0].dir, hosts[0][1].dir))
    finally:
        down = replicast("cluster", "down", "--run-dir", str(tmp_path / "run"), "--grace", "5")
    assert down.returncode == 0 and "stopped 4 process(es) on 2 host(s)" in down.stdout, down.stdout + down.stderr
    assert_nothing_left(hosts)


def test_an_unreachable_host_is_named_and_nothing_starts(tmp_path, hosts, wheel):
    bad_port = {"b": {"port": 1}}                     # nothing listens there: connection refused
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh=bad_port), tmp_path / "run", wheel))
    assert f"@{hosts[0][1].address}:1 (node b): cannot connect: Connection refused" in line, line
    unknown = {"b": {"host": "no-such-host.invalid"}}
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh=unknown), tmp_path / "run", wheel))
    assert f"no-such-host.invalid:{hosts[0][1].port} (node b): cannot connect" in line, line
    assert_nothing_left(hosts)


def test_a_wrong_key_is_named(tmp_path, hosts, wheel):
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh={"a": {"key": str(hosts[2])}}), tmp_path / "run", wheel))
    assert "(node a): ssh refused the login (permission denied" in line, line
    # A host whose key is not the one known_hosts holds for it: refused before logging in.
    impostor = tmp_path / "known_hosts"
    impostor.write_text(hosts[3].read_text().split()[0] + " " + " ".join(Path(f"{hosts[2]}.pub").read_text().split()[:2]))
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh={"a": {"known_hosts": str(impostor)}}), tmp_path / "run",
                       wheel))
    assert "(node a): the host's ssh key is not the one in known_hosts" in line, line
    assert_nothing_left(hosts)


def test_a_host_without_python_is_named(tmp_path, hosts, wheel):
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh={"b": {"python": "/opt/no-python/bin/python3"}}),
                       tmp_path / "run", wheel))
    assert "(node b): no Python: '/opt/no-python/bin/python3' is not a program there" in line, line
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\necho 3 9\n")            # answers the version question as a Python 3.9 would
    old.chmod(0o755)
    line = one_line(up(two_node_cluster(tmp_path, hosts, ssh={"a": {"python": str(old)}}), tmp_path / "run", wheel))
    assert f"(node a): Python 3.9 ({old}) is too old: replicast needs ≥ 3.11" in line, line
    assert_nothing_left(hosts)


def test_a_port_in_use_on_a_host_is_named(tmp_path, hosts, wheel):
    cluster = two_node_cluster(tmp_path, hosts)
    spec = tomllib.loads(cluster.read_text())["nodes"][1]
    holder = hosts[0][1].run(["python3", "-c", "import socket, time; s = socket.socket(); "
                              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                              f"s.bind(({spec['host']!r}, {spec['metrics_port']})); s.listen(); print('bound', flush=True); "
                              "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "bound"
        line = one_line(up(cluster, tmp_path / "run", wheel))
    finally:
        holder.kill()
        holder.wait()
    assert (f"(node b): node b: metrics_port {spec['metrics_port']} on {spec['host']} cannot be used: "
            "Address already in use") in line, line
    assert_nothing_left(hosts)


def test_a_failure_after_nodes_started_stops_them_on_every_host(tmp_path, hosts, wheel):
    """A source that dies at start fails 'up' once both nodes run: both are stopped again."""
    sources = [{"node": "b", "command": ["{python}", "-c", "import sys; sys.exit('no such sensor')"]}]
    line = one_line(up(two_node_cluster(tmp_path, hosts, sources=sources), tmp_path / "run", wheel))
    assert "(node b): source-b-0 exited at start: no such sensor" in line, line
    assert not (tmp_path / "run" / "state.json").exists()
    assert_nothing_left(hosts)


def test_init_writes_a_cluster_file_up_accepts(tmp_path):
    out = tmp_path / "c.toml"
    made = replicast("cluster", "init", "--hosts", "10.0.0.5,deploy@vm2.example:2222,vm3", "--query",
                     str(ROOT / "examples/cluster-fig1-query.toml"), "--kmax", "2", "--out", str(out))
    assert made.returncode == 0, made.stderr
    doc = tomllib.loads(out.read_text())
    assert doc["placement"] == "min-cost" and doc["coordinator"]["kmax"] == 2
    assert [n["ssh"] for n in doc["nodes"]] == [{"host": "10.0.0.5"}, {"host": "vm2.example", "user": "deploy", "port": 2222},
                                                {"host": "vm3"}]
    manual = replicast("cluster", "init", "--hosts", "a,b,c", "--query", str(ROOT / "examples/cluster-fig1-query.toml"),
                       "--kmax", "3", "--placement", "manual", "--out", str(out))
    assert manual.returncode == 0, manual.stderr
    assert tomllib.loads(out.read_text())["placement"]["correlate"] == ["n1", "n2", "n3"]
    too_many = replicast("cluster", "init", "--hosts", "a,b", "--query", str(ROOT / "examples/cluster-fig1-query.toml"),
                         "--kmax", "3", "--out", str(out))
    assert too_many.returncode == 2 and "--kmax 3" in too_many.stderr


def test_down_stops_what_it_reaches_and_keeps_what_it_cannot(tmp_path, hosts):
    """A host that cannot be reached at 'down' is named; its processes stay in state.json, the
    others are stopped."""
    (hosts_list, key, _, known_hosts) = hosts
    argv = [sys.executable, "-c", "import time; time.sleep(300)", str(hosts_list[0].dir / "marker")]
    sleeper = hosts_list[0].run(argv)
    reachable = hosts_list[0].ssh(key=str(key), known_hosts=str(known_hosts), python="python3", dir=str(hosts_list[0].dir))
    lost = {**reachable, "port": 1}
    (hosts_list[0].dir / "host_agent.py").write_text((ROOT / "cluster/host_agent.py").read_text())
    records = [{"name": name, "kind": "node", "node": name, "pid": pid, "argv": argv, "log": "/dev/null",
                "address": hosts_list[0].address, "metrics_port": None, "ssh": ssh}
               for name, pid, ssh in (("a", sleeper.pid, reachable), ("b", 1, lost))]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "state.json").write_text(json.dumps({"processes": [], "remote": records}))
    try:
        down = replicast("cluster", "down", "--run-dir", str(tmp_path / "run"), "--grace", "2")
        assert sleeper.wait(10) is not None                     # stopped through its host's agent
    finally:
        sleeper.kill()
    line = one_line(down)
    assert line.startswith("replicast cluster: error: stopped 1 process(es);") and \
        f"@{hosts_list[0].address}:1 (node b): cannot connect" in line, line
    assert [p["name"] for p in json.loads((tmp_path / "run" / "state.json").read_text())["remote"]] == ["b"]
