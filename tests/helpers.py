"""Small helpers shared by the crawl tests."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll *predicate* until it holds; fail naming *what* after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def tracebacks_outside_kafka(log: str) -> list[str]:
    """Log records with a traceback, except kafka-python's own (it logs a race of its
    network thread while closing a consumer, which changes nothing for the crawl)."""
    found, logger = [], ""
    for line in log.splitlines():
        match = re.match(r"\d{4}-\d\d-\d\d [\d:]+ \[([\w.]+)\]", line)
        if match:
            logger = match.group(1)
        elif line.startswith("Traceback") and not logger.startswith("kafka"):
            found.append(logger)
    return found
