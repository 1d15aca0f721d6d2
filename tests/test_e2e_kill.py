"""End to end: three worker processes crawl a 2,000-page site while one is killed -9 twice."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
from helpers import wait_until
from pymongo import MongoClient

from crawler import demo_site
from crawler.demo import running, start_worker, stored_pages, wait_all, worker_command

PAGES = 2000
pytestmark = pytest.mark.e2e


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_kill_9_twice_loses_nothing_and_stores_nothing_twice(stack, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    site_dir = tmp_path / "site"
    demo_site.generate(site_dir, PAGES)
    server = demo_site.serve(site_dir)
    settings = {"CRAWL_IDLE_TIMEOUT": 5, "KAFKA_PARTITION_BY": "url", "LOG_LEVEL": "INFO",
                "CONCURRENT_REQUESTS": 8}
    cmd = worker_command(server.base_url + "/", settings)
    logs = tmp_path / "logs"
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    rng = random.Random()
    try:
        with running(3, cmd, env, logs) as workers:
            for kill_at in (rng.randint(150, 500), rng.randint(900, 1300)):
                wait_until(lambda k=kill_at: count() >= k, 240, f"{kill_at} pages stored")
                victim = workers[0]
                os.kill(victim.process.pid, signal.SIGKILL)
                victim.process.wait()
                victim.log.close()
                workers[0] = start_worker(0, cmd, env, logs)
            codes = wait_all(workers, timeout=300)
            assert codes == [0, 0, 0], "\n".join(_tail(Path(w.log.name)) for w in workers)
    finally:
        server.close()
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [doc["url"] for doc in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    missing = set(demo_site.site_urls(server.base_url, PAGES)) - set(urls)
    assert not missing, f"{len(missing)} pages lost, e.g. {sorted(missing)[:5]}"
    assert len(urls) == PAGES
