"""A broker frozen for longer than the producer's delivery timeout, mid-crawl: the sends the
workers began meanwhile expire, and once the broker answers again they are sent again, the
crawl resumes and completes, every page stored once.

test_outages.py freezes the broker only until the workers notice (a few seconds); here the
freeze lasts until a worker's send has expired. Before the producer was made
non-idempotent, such an expiry left kafka-python's producer unable to send anything again,
and the crawl stopped for good (473 of 1,000 pages).
"""

from __future__ import annotations

from pathlib import Path

from helpers import wait_until
from pymongo import MongoClient
from test_outages import PAGES, SETTINGS, _children_in_log, _Crawl, _site_links, _watch

from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.stack import Stack

# The default KAFKA_DELIVERY_TIMEOUT (120 s) would hold the broker frozen for over two
# minutes; what follows an expiry is the same at any value. 15 s: above the least the
# producer accepts (linger plus the 10 s request timeout). The default itself is right: an
# expired send is sent again, so the timeout only sets how often a stall is retried.
FREEZE_SETTINGS = {**SETTINGS, "KAFKA_DELIVERY_TIMEOUT": 15}
EXPIRED = "Expiring"  # kafka-python's error, in the Sender's "Send to ... failed" warning


def test_a_freeze_longer_than_the_delivery_timeout_stalls_then_the_crawl_resumes(
        stack: Stack, crawl_id: str, tmp_path: Path) -> None:
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    crawl = _Crawl(env, crawl_id, _site_links(tmp_path / "site", server.base_url))
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        with running(2, worker_command(server.base_url + "/", FREEZE_SETTINGS), env,
                     tmp_path / "logs") as crawl.workers:
            wait_until(lambda: count() >= 50, 120, "50 pages stored")
            assert count() < PAGES - 200, "the crawl was nearly over before the outage"
            stack.freeze_service("kafka")
            try:
                wait_until(lambda: EXPIRED in worker_logs(crawl.workers), 300,
                           "a worker's send to expire in the frozen broker")
            finally:
                stack.thaw_service("kafka")
            stalled_at = count()
            _watch(crawl, "kafka", [_children_in_log])
            codes = wait_all(crawl.workers, timeout=600)
            logs = worker_logs(crawl.workers)
    finally:
        server.close()
    assert codes == [0, 0], logs[-4000:]
    print(f"{stalled_at} of {PAGES} pages stored when the broker was thawed")
    _children_in_log(crawl, *crawl.frontier())
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(site.site_urls(server.base_url, PAGES))
