"""Pages rendered in Chromium through the Kafka frontier, with a worker killed mid-crawl.

Two workers crawl ``tests/servers/jssite.py`` (40 pages whose links exist only once their
script has run, 150 ms after load) with ``tests/spiders/jsrender.py``: every request,
the start request and each follow-up, is ``playwright: True`` with a page method that waits
for the script's links, so every request travels through Kafka with its page method (one
that lost it on the way would find no link and the crawl would stop short). Every page is
answered after 1 s, so that the crawl lasts long enough to kill a worker in the middle.

The workers run at the default distributed settings plus the one setting that turns the
browser on (``BROWSER_ENABLED``): what a user runs, browser concurrency and the idle
timeout included. One worker is killed with ``kill -9`` while it holds a leased request
and its browser runs; every process it had started (Playwright's driver, Chromium and its
helpers, recorded from ``/proc`` before the kill) must be gone within ``CLEANUP`` seconds.
The survivor and a restarted worker finish the crawl; every page is stored exactly once.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import require, tracebacks_outside_kafka, wait_until, worker_with
from pymongo import MongoClient
from servers.jssite import JsSite
from support.proctree import chromium, descendants, still_running

from crawler.localstack.demo import Worker, running, start_worker, wait_all, worker_logs

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parents[1]  # tests/
PAGES, DELAY = 40, 1.0
CLEANUP = 5.0  # seconds every process of a killed worker has to be gone


def _kill_a_worker_holding_a_lease(env: dict[str, str], crawl_id: str,
                                   workers: list[Worker]) -> Worker:
    """kill -9 of a worker with a leased request and a browser; every process it started
    must be gone within CLEANUP seconds."""
    pid = worker_with(env["REDIS_URL"], crawl_id, "leases", timeout=90)
    victim = next(w for w in workers if w.process.pid == pid)
    wait_until(lambda: bool(chromium(descendants(pid))), 30, "the victim's Chromium")
    processes = descendants(pid)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    victim.process.wait()
    while (alive := still_running(processes)) and time.monotonic() - killed < CLEANUP:
        time.sleep(0.1)
    assert not alive, f"still running {CLEANUP:.0f}s after their worker's kill -9: {alive}"
    print(f"killed worker {pid}: {len(processes)} processes "
          f"({len(chromium(processes))} Chromium) gone in {time.monotonic() - killed:.1f}s")
    return victim


def test_a_browser_crawl_loses_nothing_and_leaves_no_chromium_behind(
        stack: object, crawl_id: str, tmp_path: Path) -> None:
    require(shutil.which("chromium"), "chromium (Debian's package)")
    started = time.monotonic()
    site = JsSite(PAGES, DELAY).start()
    env = {**stack.env(), "CRAWL_ID": crawl_id}  # type: ignore[attr-defined]
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "spiders" / "jsrender.py"),
           "-a", f"base={site.base}", "-s", "BROWSER_ENABLED=True"]
    try:
        with running(2, cmd, env, tmp_path / "logs") as workers:
            victim = _kill_a_worker_holding_a_lease(env, crawl_id, workers)
            survivor = next(w for w in workers if w is not victim)
            browsers = descendants(survivor.process.pid)
            workers.append(start_worker(2, cmd, env, tmp_path / "logs"))
            codes = wait_all([survivor, workers[2]], timeout=240)
            logs = worker_logs(workers)
        with MongoClient(env["MONGO_URI"]) as client:
            items = list(client["crawler"][crawl_id].find({}, {"_id": 0}))
    finally:
        site.stop()
    assert codes == [0, 0], logs[-5000:]
    assert not tracebacks_outside_kafka(logs), logs[-5000:]
    assert not still_running(browsers), still_running(browsers)  # its worker closed them
    urls = [item["url"] for item in items]
    assert len(urls) == len(set(urls)), Counter(urls).most_common(3)
    assert sorted(urls) == sorted(site.urls()), sorted(set(site.urls()) - set(urls))
    assert all(item["ready"] and item["flags"] == ["playwright"] for item in items), items
    assert sum(item["links"] for item in items) == PAGES - 1  # every link the scripts added
    fetched = Counter(path for path in site.paths() if path.startswith("/p/"))
    assert site.paths().count("/app.js") >= PAGES, "a page was not rendered in a browser"
    print(f"{PAGES} pages, {sum(fetched.values())} page fetches, browser crawl with a kill "
          f"in {time.monotonic() - started:.1f}s")
