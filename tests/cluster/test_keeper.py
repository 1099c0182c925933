"""cluster/keeper.py on real child processes: which ends it restarts, which it passes on, and that a
keeper killed takes its node with it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from replicast.cluster import keeper
from replicast.engine.node_cli import EXIT_BUG


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def keep(code: str) -> tuple[int, list[str]]:
    """Run a keeper of ``python -c code``: its exit status and the events it logged."""
    result = subprocess.run([sys.executable, "-m", "replicast.cluster.keeper", "--name", "n1", "--", *python(code)],
                            capture_output=True, text=True, timeout=60)
    return result.returncode, [json.loads(line)["event"] for line in result.stderr.splitlines() if line.startswith("{")]


def test_a_node_that_stops_itself_on_a_bug_is_restarted_until_it_stops_cleanly(tmp_path):
    # Exits EXIT_BUG on its first two runs, then 0: the keeper restarts it twice and ends with 0.
    runs = tmp_path / "runs"
    code = (f"import pathlib, sys; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0; "
            f"p.write_text('x' * (n + 1)); sys.exit({EXIT_BUG} if n < 2 else 0)")
    assert keep(code) == (0, ["node_restarting", "node_restarting"])
    assert runs.read_text() == "xxx"


def test_a_crash_loop_ends_the_keeper_with_the_nodes_status():
    assert keep(f"raise SystemExit({EXIT_BUG})") == (
        EXIT_BUG, ["node_restarting"] * (keeper.CRASH_LOOP - 1) + ["node_crash_loop"])


@pytest.mark.parametrize("code, status", [("raise SystemExit(2)", 2), ("raise SystemExit(0)", 0),
                                          ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)])
def test_other_ends_are_passed_on_not_retried(code, status):
    assert keep(code) == (status, [])


def test_sigterm_stops_the_node_cleanly_and_a_killed_keeper_takes_its_node_along():
    sleeper = python("import time; time.sleep(60)")
    command = [sys.executable, "-m", "replicast.cluster.keeper", "--name", "n1", "--", *sleeper]
    for signum, status in ((signal.SIGTERM, 0), (signal.SIGKILL, -9)):
        process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not psutil.Process(process.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        (node,) = psutil.Process(process.pid).children()
        process.send_signal(signum)
        assert process.wait(20) == status
        node.wait(20)                        # gone: stopped by the forwarded SIGTERM, or by PR_SET_PDEATHSIG
        assert not node.is_running()


def test_a_sigterm_while_the_node_is_being_started_is_passed_on_once_the_keeper_holds_it():
    """The race the test above can hit: the signal comes after the node's fork (the test sees the child)
    but before ``Popen`` returns, when the keeper does not hold the child yet; it must still reach it."""
    kept = keeper.Keeper("n1", python("import time; time.sleep(60)"))
    start = kept._start

    def start_then_signal():
        child = start()
        kept.stop(signal.SIGTERM)                   # the handler runs before the keeper holds the child
        return child

    kept._start = start_then_signal
    began = time.monotonic()
    assert kept.run() == 0
    assert kept.child.returncode == -signal.SIGTERM
    assert time.monotonic() - began < 30            # not the sleeper's 60 s


def test_a_sigterm_before_the_first_start_starts_nothing():
    kept = keeper.Keeper("n1", python("import time; time.sleep(60)"))
    kept.stop(signal.SIGTERM)
    assert kept.run() == 0
    assert kept.child is None
