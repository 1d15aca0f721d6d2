"""Small helpers shared by the crawl tests."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]  # the repository
#: For a crawl whose subject is not the wait after the drain: each worker exits 3 s after the
#: whole crawl has drained instead of the default 30 (kept for seeds that arrive late). What a
#: worker does at the end is the same at any value; tests/e2e/test_crawl_reuse.py's second
#: run, tests/e2e/test_kafka_failover.py and the kill tests keep the default.
SHORT_IDLE: dict[str, object] = {"CRAWL_IDLE_TIMEOUT": 3}


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


def final_stat(log: str, name: str) -> int | None:
    """The last value of the stat *name* dumped in the worker *log* (None: never dumped)."""
    found = re.findall(rf"'{re.escape(name)}': (\d+)", log)
    return int(found[-1]) if found else None


def in_ci() -> bool:
    """Whether ``CI=true`` is set: there, a missing binary fails a test instead of skipping it."""
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> NoReturn:
    """*what* (a binary or package a test needs) is missing: skip locally, fail when CI=true."""
    if in_ci():
        pytest.fail(f"{what} (CI=true: a missing dependency fails instead of skipping)",
                    pytrace=False)
    pytest.skip(what)


def require(found: object, what: str) -> None:
    """Go on when *found* is truthy (a path, a module); else :func:`missing` (*what*)."""
    if not found:
        missing(what)


def module_or_missing(name: str, what: str) -> Any:
    """The module *name*; if it cannot be imported, :func:`missing` (*what*): a skip
    locally, a failure when CI=true (``pytest.importorskip`` skips there too)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(what)


def worker_with(redis_url: str, crawl_id: str, field: str, timeout: float = 120) -> int:
    """The PID of a worker whose heartbeat's info shows *field* (``leases``, ``delayed``…)
    above 0, waiting up to *timeout* seconds for one."""
    import json

    from redis import Redis

    client = Redis.from_url(redis_url)
    found: list[int] = []

    def showing() -> bool:
        for value in client.hvals(f"{{{crawl_id}}}:workers"):
            info = json.loads(value)["info"]
            if info.get(field, 0) > 0:
                found.append(int(info["pid"]))
                return True
        return False

    try:
        wait_until(showing, timeout, f"a worker with {field}")
    finally:
        client.close()
    return found[0]


def run_bench_module(tmp_path: Path, module: str, args: list[str],
                     timeout: float) -> tuple[Any, str]:
    """Run ``python -m <module> <args>`` into ``tmp_path/report``: its results.json, and
    what it printed."""
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", module, *args, "--workdir", str(tmp_path / "work"),
         "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), result.stdout


def ledger_report(crawl_id: str, env: dict[str, str]) -> dict[str, Any]:
    """``scrapy cluster report CRAWL_ID --json`` with the stack's *env*: the crawl's ledger."""
    full = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **env}
    done = subprocess.run([sys.executable, "-m", "scrapy", "cluster", "report", crawl_id,
                           "--json"], env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def trust_seed_host(redis_url: str, crawl_id: str, host: str) -> None:
    """Record *host* as a seed's host (private networks stay open to it), as a worker does
    when it takes a seed (crawler.security.trusted): for a test that produces requests
    straight into the request topics, standing for the follow-ups of a seed on that host,
    before any worker took that seed."""
    import redis

    from crawler.config.keys import CrawlKeys

    client = redis.Redis.from_url(redis_url)
    try:
        client.sadd(CrawlKeys(crawl_id).seed_hosts, host)
    finally:
        client.close()


@contextmanager
def http_site(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """*handler* served on a free loopback port in a thread: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
