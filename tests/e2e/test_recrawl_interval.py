"""The per-request interval end to end: with ``RECRAWL_AFTER`` at its default (0, never),
a page whose requests carry ``recrawl_after=1`` is fetched again every second while the crawl
runs, every other page once, and the page keeps one document. The front page links to
itself, so the crawl never drains (a continuous crawl, as such an interval is for): the test
stops the worker with SIGTERM, Scrapy's graceful shutdown."""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from pathlib import Path

from helpers import wait_until
from pymongo import MongoClient
from servers import counting

from crawler.localstack import demo_site
from crawler.localstack.demo import running, stop_gracefully, worker_logs

HERE = Path(__file__).resolve().parents[1]  # tests/
PAGES = 600  # 0.2 s a page, 16 at once: the crawl lasts about 8 s


def test_a_page_with_its_own_interval_is_fetched_again(stack, crawl_id, tmp_path):
    demo_site.generate(tmp_path / "site", PAGES)
    server = counting.serve(tmp_path / "site", latency=0.2)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "spiders" / "hubs.py"),
           "-a", f"base={server.base_url}", "-a", "interval=1",
           "-s", "CRAWL_IDLE_TIMEOUT=3"]  # exit 3 s after the drain instead of 30
    pages = lambda: len(set(server.page_paths()))  # noqa: E731
    try:
        with running(1, cmd, env, tmp_path / "logs") as workers:
            wait_until(lambda: pages() == PAGES, 120, "every page fetched")
            time.sleep(3)  # the front page comes due thrice more
            stop_gracefully(workers[0], 60, signal.SIGTERM)
            logs = worker_logs(workers)
    finally:
        server.close()
    fetches = Counter(server.page_paths())
    front = fetches.pop("/")
    assert front >= 3, f"the front page was fetched {front} times in a crawl of ~8 s"
    assert set(fetches.values()) == {1}, [p for p, n in fetches.items() if n > 1][:5]
    assert len(fetches) == PAGES - 1
    assert "recrawl/not_due" in logs  # links to it within the interval were filtered
    with MongoClient(env["MONGO_URI"]) as client:
        assert client["crawler"][crawl_id].count_documents({"url": server.base_url + "/"}) == 1
