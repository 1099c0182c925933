"""Structured logs: one JSON object per line, with the node name and any ``extra`` fields."""

from __future__ import annotations

import json
import logging

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, node: str):
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "t": round(record.created, 6),
                 "level": record.levelname,
                 "node": self.node, "logger": record.name, "message": record.getMessage()}
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def use_json_logs(node: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(node))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class LogBudget:
    """At most ``burst`` lines a minute for one kind of untrusted event; the rest are counted and
    summed up in one line (``what``) when the next minute's first event comes."""

    def __init__(self, logger: logging.Logger, what: str, event: str, burst: int = 20):
        self.logger, self.what, self.event, self.burst = logger, what, event, burst
        self._minute, self._logged, self._unlogged = -1, 0, 0

    def allow(self, minute: int) -> bool:
        """Whether to log an event happening in ``minute`` (a monotonic minute number)."""
        if minute != self._minute:
            if self._unlogged:
                self.logger.warning("%d more %s were not logged", self._unlogged, self.what,
                                    extra={"event": f"{self.event}_unlogged", "count": self._unlogged})
            self._minute, self._logged, self._unlogged = minute, 0, 0
        if self._logged < self.burst:
            self._logged += 1
            return True
        self._unlogged += 1
        return False
