"""The SSRF guard end to end: two workers crawl a site on ``[::1]`` whose seeds, links and
redirect point at a listener on ``127.0.0.1``; the listener is never reached.

``BLOCKED_NETWORKS`` is the default plus ``127.0.0.0/8``: a blocked network stays closed to
seeds too, where the private ones (closed by default) are open to a seed's host
(docs/security.md). Every address of a test stays on loopback, so loopback's IPv4 half stands
for the internal network and ``[::1]`` for the public web. Everything else is at its default.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from pymongo import MongoClient
from servers.guardsite import PAGES, GuardSite, Listener

from crawler.config import defaults
from crawler.config.keys import CrawlKeys
from crawler.localstack.demo import running, wait_all, worker_logs

BLOCKED = ",".join([*defaults.BLOCKED_NETWORKS, "127.0.0.0/8"])


def _scrapy(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SCRAPY_SETTINGS_MODULE": "crawler.settings", **env}
    return subprocess.run([sys.executable, "-m", "scrapy", *args], env=full,
                          capture_output=True, text=True, timeout=120)


def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _localhost_is_ipv4_only() -> bool:
    """Whether ``localhost`` resolves to 127.x only (a ``::1`` answer is allowed here)."""
    infos = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)
    return all(info[4][0].startswith("127.") for info in infos)


@dataclass
class _Run:
    accepted: list[tuple[str, int]]  # the connections the listener took
    urls: list[str]  # stored
    ledger: dict[str, Any]
    logs: str
    base: str


def _crawl(stack: Any, crawl_id: str, tmp_path: Path, blocked: str) -> _Run:
    """Two workers crawl the guard site with ``BLOCKED_NETWORKS=blocked``; the listener's
    URLs are seeded (``scrapy seed``) once the workers are open, and linked and redirected
    to by the site."""
    listener = Listener().start()
    target = f"http://127.0.0.1:{listener.port}"
    site = GuardSite(target).start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_urls={site.base}/",
           "-s", f"BLOCKED_NETWORKS={blocked}", "-s", "CRAWL_IDLE_TIMEOUT=3"]  # SHORT_IDLE
    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        with running(2, cmd, env, tmp_path / "logs") as workers:
            _wait("the workers to open", lambda: client.exists(CrawlKeys(crawl_id).scope), 90)
            seeded = _scrapy(["seed", "site", f"{target}/seeded",
                              target.replace("127.0.0.1", "localhost") + "/named",
                              target.replace("127.0.0.1", "[::ffff:127.0.0.1]") + "/mapped"],
                             env)  # adds their hosts to the scope: links to them are followed
            assert seeded.returncode == 0, seeded.stderr
            site.gate.set()
            assert wait_all(workers, timeout=240) == [0, 0], worker_logs(workers)[-5000:]
        report = _scrapy(["cluster", "report", crawl_id, "--json"], env)
        assert report.returncode == 0, report.stderr[-3000:]
        items = MongoClient(env["MONGO_URI"])["crawler"][crawl_id]
        urls = sorted(doc["url"] for doc in items.find({}, {"url": 1}))
        return _Run(listener.accepted, urls, json.loads(report.stdout),
                    worker_logs(workers), site.base)
    finally:
        site.stop()
        listener.stop()


def test_seeds_links_and_redirects_to_a_blocked_network_never_connect(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    run = _crawl(stack, crawl_id, tmp_path, BLOCKED)
    ledger, logs = run.ledger, run.logs
    assert run.accepted == [], (run.accepted, logs[-3000:])
    assert run.urls == sorted(f"{run.base}{path}" for path in PAGES), run.urls
    # seeded, mapped, linked, mapped-link and the redirect of /r: IP literals, refused before
    # they are sent; the two localhost ones: refused when their name resolved to 127.0.0.1
    expected = 7 if _localhost_is_ipv4_only() else 5
    assert ledger["dropped"].get("blocked_network", 0) >= expected, ledger
    assert ledger["finished"] is True and ledger["unaccounted"] == 0, ledger
    assert "is in the blocked network 127.0.0.0/8" in logs, logs[-3000:]


def test_the_same_crawl_reaches_the_listener_where_the_guard_allows_it(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    """The control: with the default BLOCKED_NETWORKS (loopback open) the same seeds, links
    and redirect reach the listener, so the test above sees the guard at work, not a
    listener nothing could reach."""
    run = _crawl(stack, crawl_id, tmp_path, ",".join(defaults.BLOCKED_NETWORKS))
    assert len(run.accepted) >= 5, (run.accepted, run.logs[-3000:])
    assert run.ledger["dropped"].get("blocked_network", 0) == 0, run.ledger
    assert run.ledger["finished"] is True and run.ledger["unaccounted"] == 0, run.ledger
