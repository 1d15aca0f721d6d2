"""Recrawl (issue 14): a finished crawl run again with the same CRAWL_ID after RECRAWL_AFTER
fetches every page again and updates its one document; run again within the interval it
fetches nothing. Real worker processes, the local stack, the demo site; default settings
but RECRAWL_AFTER and the short CRAWL_IDLE_TIMEOUT of tests/e2e/test_seeds.py."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from helpers import tracebacks_outside_kafka
from pymongo import MongoClient

from crawler.config.keys import CrawlKeys
from crawler.localstack.demo import running, wait_all, worker_command, worker_logs

AFTER = 45.0  # longer than two short crawls back to back (about 15 s each here)
SETTINGS = {"RECRAWL_AFTER": AFTER, "CRAWL_IDLE_TIMEOUT": 3}


def crawl(start_url: str, env: dict[str, str], log_dir) -> str:
    log_dir.mkdir()
    with running(1, worker_command(start_url, SETTINGS), env, log_dir) as workers:
        codes = wait_all(workers, timeout=300)
        log = worker_logs(workers)
    assert codes == [0], log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
    return log


def documents(mongo_uri: str, crawl_id: str) -> dict[str, dict[str, Any]]:
    with MongoClient(mongo_uri) as client:
        docs = list(client["crawler"][crawl_id].find())
    by_url = {d["url"]: d for d in docs}
    assert len(by_url) == len(docs), "a page is stored twice"
    return by_url


def wait_two_generations(url: str, crawl_id: str) -> float:
    """Sleep until the generation after the next begins: every fingerprint added so far
    is forgotten then (at most 2 * AFTER). Returns the seconds slept."""
    with redis.Redis.from_url(url) as client:
        state = client.hgetall(CrawlKeys(crawl_id).recrawl)
        seconds, micros = client.time()
    assert float(state[b"after"]) == AFTER
    wait = float(state[b"started"]) + 2 * AFTER - (seconds + micros / 1e6) + 0.5
    time.sleep(max(wait, 0))
    return wait


def test_recrawl_after_the_interval_fetches_every_page_again_and_not_within_it(
        stack, demo_site, demo_site_pages, crawl_id, tmp_path):
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    first = crawl(demo_site + "/", env, tmp_path / "first")
    assert "'finish_reason': 'finished'" in first, first[-3000:]
    before = documents(env["MONGO_URI"], crawl_id)
    assert len(before) == demo_site_pages
    assert all(d["changed"] is False and d["previous_hash"] is None for d in before.values())

    assert wait_two_generations(env["REDIS_URL"], crawl_id) > AFTER / 2

    second = crawl(demo_site + "/", env, tmp_path / "second")
    assert "'finish_reason': 'finished'" in second, second[-3000:]
    after = documents(env["MONGO_URI"], crawl_id)
    assert after.keys() == before.keys()  # one document per page, no more
    for url, doc in after.items():
        old = before[url]
        assert doc["fetched_at"] > old["fetched_at"], url
        assert doc["content_hash"] == old["content_hash"] == doc["previous_hash"], url
        assert doc["changed"] is False and doc["changed_at"] == old["fetched_at"], url
    # every page again, and not robots.txt: the first run's verdict is the cluster's for
    # ROBOTSTXT_TTL (24 h; docs/robots.md)
    assert f"'response_received_count': {demo_site_pages}" in second, second[-3000:]

    third = crawl(demo_site + "/", env, tmp_path / "third")
    assert "'finish_reason': 'already_finished'" in third, third[-3000:]
    assert "response_received_count" not in third  # nothing was fetched again
    assert documents(env["MONGO_URI"], crawl_id) == after
