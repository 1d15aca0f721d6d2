"""Outages mid-crawl stall the crawl; when the service is back it resumes and loses nothing."""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import wait_until
from pymongo import MongoClient

from crawler import demo_site as site
from crawler.demo import running, stored_pages, wait_all, worker_command, worker_logs

PAGES = 600


SEEN_OUTAGE = {"redis": "Redis dupefilter unavailable", "mongo": "MongoDB writes succeed again"}


def _freeze(stack, name: str):
    """Stop a service without losing its state (SIGSTOP), as a hung or partitioned broker."""
    pid = stack.status()[name]["pid"]
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


def _outage(stack, service: str, workers, count) -> None:
    wait_until(lambda: count() >= 100, 120, "100 pages stored")
    assert count() < PAGES - 100, "the crawl was nearly over before the outage"
    # The broker keeps its log in memory here, so it is frozen rather than restarted.
    thaw = _freeze(stack, service) if service == "kafka" else None
    if thaw is None:
        stack.stop_service(service)
    try:
        time.sleep(8)
        assert all(w.process.poll() is None for w in workers), "a worker gave up in the outage"
    finally:
        if thaw is not None:
            thaw()
        else:
            stack.start_service(service)


@pytest.mark.parametrize("service", ["redis", "mongo", "kafka"])
def test_outage_mid_crawl_stalls_then_resumes(stack, service, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    settings = {"CRAWL_IDLE_TIMEOUT": 5, "KAFKA_PARTITION_BY": "url", "CONCURRENT_REQUESTS": 4,
                "MONGO_RETRY_BACKOFF_MAX": 2, "CONNECT_TIMEOUT": 2}
    cmd = worker_command(server.base_url + "/", settings)
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        with running(2, cmd, env, tmp_path / "logs") as workers:
            _outage(stack, service, workers, count)
            codes = wait_all(workers, timeout=240)
            logs = worker_logs(workers)
    finally:
        server.close()
    assert codes == [0, 0], logs[-4000:]
    if service in SEEN_OUTAGE:
        assert SEEN_OUTAGE[service] in logs, "the outage was not noticed: the test proves nothing"
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert len(urls) == len(set(urls))
    assert set(urls) == set(site.site_urls(server.base_url, PAGES))
    assert count() == PAGES
