"""The keeper of one node process: ``cluster up`` runs each node under one, which restarts it when it
stops itself because of a bug (crash-only: engine/node.py, docs/cluster.md "Restarts").

    python -m replicast.cluster.keeper --name NODE -- replicast node --config … --name NODE --state-dir …

Rules:

1. The node runs as the keeper's child, with the same output (the node's log).  The kernel kills it
   when the keeper dies (``PR_SET_PDEATHSIG``), so a keeper SIGKILLed — a server's death, as tests
   and experiments emulate it — takes its node with it at once, and no node outlives its keeper.
2. A node that exits with :data:`~engine.node_cli.EXIT_BUG` (its core failed, or a driver task was
   in a crash loop) is started again with the same command — the same ``--state-dir``, so it knows
   it rejoins and takes its replicas' snapshots from live peers (docs/lifecycle.md) — after a
   back-off of 0.1 s doubling up to 5 s.  :data:`CRASH_LOOP` such exits within :data:`CRASH_WINDOW`
   seconds are a bug a restart will not fix: the keeper exits with that status.
3. Any other end is passed on, not retried: status 0 (stopped), 2 (what it was given is wrong: a
   restart would fail the same way, and ``cluster up`` names the node with its last log line) or
   death by a signal (SIGKILL is how a server's death is emulated; the keeper exits 128 + signal).
4. SIGTERM or SIGINT to the keeper is passed to the node, which stops cleanly; the keeper then exits
   0 without restarting it.  One that comes while the node is being started (the child forked, the
   keeper not yet holding it) is passed on as soon as the keeper holds it.
5. Each restart is one JSON log line (``event: node_restarting``) in the node's log.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import subprocess
import sys
import time
from collections import deque

from replicast.engine.aio.logs import use_json_logs
from replicast.engine.aio.supervise import Backoff
from replicast.engine.node_cli import EXIT_BUG

log = logging.getLogger("replicast.keeper")

CRASH_LOOP = 5
CRASH_WINDOW = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: rule 1 (Linux's prctl; elsewhere the node may outlive a killed keeper)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Keeper:
    """Runs ``command`` and restarts it by rules 2–4; :meth:`run` returns the keeper's exit status."""

    def __init__(self, name: str, command: list[str]):
        self.name, self.command = name, command
        self.child: subprocess.Popen | None = None
        self.stop_signal: int | None = None     # the SIGTERM or SIGINT received (rule 4), if any
        self.restarts = 0

    @property
    def stopping(self) -> bool:
        return self.stop_signal is not None

    def stop(self, signum: int, frame=None) -> None:
        """Rule 4: pass the signal on; no restart after it."""
        self.stop_signal = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(self.command, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def run(self) -> int:
        backoff, exits = Backoff(0.1, 5.0), deque()
        while not self.stopping:
            self.child = self._start()
            if self.stop_signal is not None:             # rule 4: it came while the child was starting
                self.child.send_signal(self.stop_signal)
            status = self.child.wait()
            if self.stopping:
                return 0
            if status != EXIT_BUG:                               # rule 3
                return status if status >= 0 else 128 - status
            now = time.monotonic()
            exits.append(now)
            while exits[0] < now - CRASH_WINDOW:
                exits.popleft()
            if len(exits) >= CRASH_LOOP:
                log.error("node %s stopped itself %d times within %.0f s: not restarting it", self.name, len(exits),
                          CRASH_WINDOW, extra={"event": "node_crash_loop", "status": status})
                return status
            delay = backoff.next()
            self.restarts += 1
            log.warning("node %s stopped itself (status %d: a bug, see above); restarting it in %.1f s, with "
                        "its state directory: it rejoins by snapshot", self.name, status, delay,
                        extra={"event": "node_restarting", "status": status, "restarts": self.restarts})
            if self._sleep(delay):
                return 0
        return 0                                         # stopped before the node was started


    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; whether a stop came meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, deadline - time.monotonic()))
        return self.stopping


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replicast.cluster.keeper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the node's name (for the log)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the node's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the node's command after --")
    use_json_logs(args.name)
    keeper = Keeper(args.name, command)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, keeper.stop)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main())
