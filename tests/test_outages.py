"""Outages mid-crawl stall the crawl; when the service is back it resumes and loses nothing."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from crawler import demo_site as site
from crawler.demo import start_worker, stored_pages, worker_command

PAGES = 600
SEEN_OUTAGE = {"redis": "Redis dupefilter unavailable", "mongo": "MongoDB writes succeed again"}


def _freeze(stack, name: str):
    """Stop a service without losing its state (SIGSTOP), as a hung or partitioned broker."""
    pid = stack.status()[name]["pid"]
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("service", ["redis", "mongo", "kafka"])
def test_outage_mid_crawl_stalls_then_resumes(stack, service, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    settings = {"CRAWL_IDLE_TIMEOUT": 5, "KAFKA_PARTITION_BY": "url", "CONCURRENT_REQUESTS": 4,
                "MONGO_RETRY_BACKOFF_MAX": 2, "CONNECT_TIMEOUT": 2}
    cmd = worker_command(server.base_url + "/", settings)
    workers = [start_worker(i, cmd, env, tmp_path / "logs") for i in range(2)]
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        _wait_for(lambda: count() >= 100, 120, "100 pages stored")
        assert count() < PAGES - 100, "the crawl was nearly over before the outage"
        # The broker keeps its log in memory here, so it is frozen rather than restarted.
        thaw = _freeze(stack, service) if service == "kafka" else None
        if thaw is None:
            stack.stop_service(service)
        time.sleep(8)
        assert all(w.process.poll() is None for w in workers), "a worker gave up during the outage"
        if thaw is not None:
            thaw()
        else:
            stack.start_service(service)
        for worker in workers:
            worker.process.wait(timeout=240)
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.log.close()
        server.close()
        if service not in {n for n, s in stack.status().items() if s.get("answering")}:
            stack.start_service(service)
    logs = "\n".join(Path(w.log.name).read_text(errors="replace") for w in workers)
    assert [w.process.returncode for w in workers] == [0, 0], logs[-4000:]
    if service in SEEN_OUTAGE:
        assert SEEN_OUTAGE[service] in logs, "the outage was not noticed: the test proves nothing"
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert len(urls) == len(set(urls))
    assert set(urls) == set(site.site_urls(server.base_url, PAGES))
    assert count() == PAGES
