"""Supervised driver tasks (engine/aio/supervise.py): a failing task is logged, counted and
restarted, marked down meanwhile; a crash loop stops the node instead of leaving it half alive."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, Counter

from replicast.engine.aio import supervise
from replicast.engine.aio.supervise import Supervisor


def counter() -> Counter:
    return Counter("failures", "test", ["task"], registry=CollectorRegistry())


def test_a_failing_task_is_logged_counted_and_restarted(caplog, monkeypatch):
    monkeypatch.setattr(supervise.Backoff, "next", lambda self: 0.05)
    failures, fatal, runs = counter(), [], []

    async def flaky():
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError(f"boom {len(runs)}")
        await asyncio.sleep(0)

    downs = []

    async def main():
        supervisor = Supervisor(failures, fatal.append, on_down=downs.append)
        task = supervisor.start("flaky", flaky)
        await asyncio.sleep(0.01)
        down_while_waiting = set(supervisor.down)
        await task
        return down_while_waiting, supervisor.down

    with caplog.at_level(logging.INFO, logger="replicast.node"):
        down_while_waiting, down_after = asyncio.run(main())
    assert len(runs) == 3 and fatal == []
    assert downs == ["flaky", "flaky"]            # told at once (the driver drops its readiness gauge)
    assert failures.labels("flaky")._value.get() == 2
    assert down_while_waiting == {"flaky"} and down_after == set()
    assert sum("task flaky failed: RuntimeError: boom" in r.getMessage() for r in caplog.records) == 2
    assert all(r.exc_info for r in caplog.records if "failed" in r.getMessage())    # with the traceback


def test_a_crash_loop_is_fatal(monkeypatch):
    monkeypatch.setattr(supervise.Backoff, "next", lambda self: 0.0)
    fatal = []

    async def broken():
        raise KeyError("always")

    async def main():
        await Supervisor(counter(), fatal.append).start("broken", broken)

    asyncio.run(main())
    assert len(fatal) == 1 and "task broken failed 5 times" in fatal[0] and "KeyError" in fatal[0]
