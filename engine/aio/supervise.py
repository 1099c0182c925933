"""Supervised asyncio tasks: no driver task may die silently (docs/node.md, "Nothing a peer, a
source or a sink does stops a node").

Every long-running task of a node (a dial loop per peer, the MQTT client, the metrics refresher)
runs under :class:`Supervisor`.  An unexpected exception is logged with the task's name and the
traceback, counted (``replicast_task_failures_total{task}``), and the task is restarted after a
back-off; while it is down the node is not ready — ``on_down`` is called at once, so the
readiness gauge falls even when the task that refreshes it is the one down.  A task that fails :data:`CRASH_LOOP` times
within :data:`CRASH_WINDOW` seconds is a bug that restarting will not fix: the supervisor calls
``on_fatal`` and the node exits non-zero, so its own supervisor (systemd, ``cluster up``'s
operator) restarts it rather than leaving a node that looks alive and does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Awaitable, Callable

log = logging.getLogger("replicast.node")

CRASH_LOOP = 5
CRASH_WINDOW = 60.0


class Backoff:
    """Exponential back-off delays: ``first`` seconds doubling up to ``cap`` seconds."""

    def __init__(self, first: float = 0.05, cap: float = 2.0):
        self.first, self.cap, self.delay = first, cap, first

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.first


class Supervisor:
    """Starts named tasks and restarts them when they fail (module docstring)."""

    def __init__(self, failures_counter, on_fatal: Callable[[str], None],
                 on_down: Callable[[str], None] = lambda name: None):
        self._counter, self._on_fatal, self._on_down = failures_counter, on_fatal, on_down
        self.tasks: list[asyncio.Task] = []
        #: Names of tasks that failed and wait for their restart.
        self.down: set[str] = set()

    def start(self, name: str, factory: Callable[[], Awaitable[None]]) -> asyncio.Task:
        task = asyncio.create_task(self._run(name, factory), name=name)
        self.tasks.append(task)
        return task

    async def _run(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        backoff, failures = Backoff(0.1, 5.0), deque()
        while True:
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._counter.labels(name).inc()
                now = time.monotonic()
                failures.append(now)
                while failures and failures[0] < now - CRASH_WINDOW:
                    failures.popleft()
                log.exception("task %s failed: %s: %s", name, type(error).__name__, str(error)[:200],
                              extra={"event": "task_failed", "task": name, "failures": len(failures)})
                if len(failures) >= CRASH_LOOP:
                    self._on_fatal(f"task {name} failed {len(failures)} times within {CRASH_WINDOW:.0f} s "
                                   f"(last: {type(error).__name__}: {str(error)[:200]})")
                    return
                self.down.add(name)
                self._on_down(name)
                try:
                    await asyncio.sleep(backoff.next())
                finally:
                    self.down.discard(name)
                log.info("restarting task %s", name, extra={"event": "task_restarted", "task": name})

    async def cancel_all(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
