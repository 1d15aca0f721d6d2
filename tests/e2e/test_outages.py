"""Outages mid-crawl: the crawl stalls without acknowledging anything that is not durable,
and once the service is back it resumes and completes, every page stored once.

Two workers crawl a generated site with the default settings. Mid-crawl one service goes:

* **Redis** is killed (SIGKILL) and restarted on the same data (its append-only file).
  Without it no follow-up request can be checked against the Bloom filter, so none can be
  produced, so the page that found it must not be acknowledged. Pages of records already
  consumed are still fetched and stored meanwhile: their records must wait.
* **mongod** is killed (SIGKILL) and restarted on the same data (its journal). What was
  durable at the kill is read from a copy of its data directory, recovered by a second
  mongod: a record acknowledged during the outage must have its page in that copy.
* **The broker** (Apache Kafka, one node, its log on disk) is killed (SIGKILL) and started
  again 15 s later on the same log directory, as production restarts a broker. A dead broker
  commits nothing and answers nothing, so nothing is sampled meanwhile; once it is back, the
  acknowledgements held back commit, none may pass a page whose follow-ups are not in the
  log, and the crawl finishes by itself. (A broker that hangs instead, SIGSTOP, is
  tests/e2e/test_broker_freeze_long.py.)

Throughout, the consumer group's committed offsets are read through kafka-python's admin
client (not while the broker is frozen) and checked against the log: every acknowledged
record's follow-ups are in the log, and for mongod its page is durable.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag

import pytest
from helpers import wait_until
from kafka_log import Entry, Partition, acknowledged, committed, group_of, read_topic
from pymongo import MongoClient
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor

from crawler.localstack import demo_site as site
from crawler.localstack.demo import (
    Worker,
    running,
    stored_pages,
    wait_all,
    worker_command,
    worker_logs,
)
from crawler.localstack.stack import Stack

PAGES = 1000
SETTINGS = {"CRAWL_IDLE_TIMEOUT": 5}  # exit 5 s after the drain instead of 30: a shorter test
NOTICED = {  # what a worker logs when it finds the service gone
    "redis": "Redis dupefilter unavailable",
    "mongo": "MongoDB writes to",  # "... fail (...); retrying until they succeed"
    # kafka-python's consumer, once its coordinator's connection fails
    "kafka": "Marking the coordinator dead",
}
RESUMED = {"redis": "Redis dupefilter reachable again", "mongo": "MongoDB writes succeed again"}
KAFKA_DOWN = 15.0  # seconds from the broker's kill to its restart
SAMPLES = 10  # frontier samples after the outage is noticed: several commit intervals

Check = Callable[["_Crawl", dict[Partition, int], list[Entry]], None]


@dataclass
class _Crawl:
    env: dict[str, str]
    crawl_id: str
    links: dict[str, set[str]]  # page URL -> the site URLs it links to
    workers: list[Worker] = field(default_factory=list)

    def frontier(self) -> tuple[dict[Partition, int], list[Entry]]:
        bootstrap = self.env["KAFKA_BOOTSTRAP_SERVERS"]
        offsets = committed(bootstrap, group_of(self.crawl_id))  # first: the log only grows
        entries = [e for topic in ("requests", "seeds")
                   for e in read_topic(bootstrap, f"{self.crawl_id}.{topic}")]
        return offsets, entries

    def stored(self) -> set[str]:
        with MongoClient(self.env["MONGO_URI"]) as client:
            return {d["url"] for d in client["crawler"][self.crawl_id].find({}, {"url": 1})}

    def noticed(self, service: str) -> bool:
        return NOTICED[service] in worker_logs(self.workers)


def _site_links(directory: Path, base: str) -> dict[str, set[str]]:
    """Each page's URL and the site URLs it links to, extracted as the ``site`` spider does."""
    extractor, links = LinkExtractor(), {}
    for n, url in enumerate(site.site_urls(base, PAGES)):
        body = (directory / site.page_path(n)).read_bytes()
        found = extractor.extract_links(HtmlResponse(url, body=body, encoding="utf-8"))
        links[url] = {urldefrag(link.url).url for link in found
                      if link.url.startswith(base + "/")}
    return links


def _children_in_log(crawl: _Crawl, offsets: dict[Partition, int], entries: list[Entry]) -> None:
    """No record is acknowledged before every request it led to is in the log."""
    in_log = {e.url for e in entries if e.topic.endswith(".requests")}
    for entry in acknowledged(entries, offsets):
        wanted = {entry.url} if entry.topic.endswith(".seeds") else crawl.links[entry.url]
        missing = sorted(wanted - in_log)
        assert not missing, (f"{entry} is acknowledged, but {len(missing)} request(s) it "
                             f"led to are not in the log, e.g. {missing[0]}")


def _pages_in(durable: set[str]) -> Check:
    def check(crawl: _Crawl, offsets: dict[Partition, int], entries: list[Entry]) -> None:
        for entry in acknowledged(entries, offsets):
            assert entry.topic.endswith(".seeds") or entry.url in durable, (
                f"{entry} is acknowledged, but its page was not durable when mongod died")
    return check


def _held_back(crawl: _Crawl, offsets: dict[Partition, int], entries: list[Entry]) -> bool:
    """Whether some page is stored while no record of it is acknowledged yet."""
    requests = {e.url for e in entries if e.topic.endswith(".requests")}
    done = {e.url for e in acknowledged(entries, offsets)}
    return bool((requests - done) & crawl.stored())


def _watch(crawl: _Crawl, service: str, checks: list[Check],
           evidence: Callable[..., bool] | None = None) -> bool:
    """Sample the frontier until the outage was noticed and SAMPLES samples followed; each
    check holds at every sample. Returns whether *evidence* held at some sample."""
    deadline, acked, seen = time.monotonic() + 300, [], False
    while len(acked) < SAMPLES:
        assert time.monotonic() < deadline, f"no worker noticed the {service} outage"
        noticed = crawl.noticed(service)
        offsets, entries = crawl.frontier()
        for check in checks:
            check(crawl, offsets, entries)
        seen = seen or bool(evidence and evidence(crawl, offsets, entries))
        if noticed:
            acked.append(len(acknowledged(entries, offsets)))
        time.sleep(0.5)  # pacing only: every sample is checked
    print(f"{service}: records acknowledged at the {SAMPLES} samples after the outage was "
          f"noticed: {acked}")
    return seen


def _durable_pages(stack: Stack, directory: Path, crawl_id: str) -> set[str]:
    """The pages mongod had made durable when it was killed: a copy of its data directory,
    recovered from the journal by a second mongod."""
    copy = Stack(directory)
    shutil.copytree(stack.data_dir("mongo"), copy.data_dir("mongo"))
    try:
        uri = copy.start(["mongo"])["MONGO_URI"]
        with MongoClient(uri) as client:
            return {d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})}
    finally:
        copy.stop()


def _redis_outage(stack: Stack, crawl: _Crawl, tmp_path: Path) -> None:
    stack.stop_service("redis", kill=True)
    try:
        held = _watch(crawl, "redis", [_children_in_log], evidence=_held_back)
    finally:
        stack.start_service("redis")
    assert held, "no stored page waited for its acknowledgement: the outage stalled nothing"


def _mongo_outage(stack: Stack, crawl: _Crawl, tmp_path: Path) -> None:
    stack.stop_service("mongo", kill=True)
    try:
        durable = _durable_pages(stack, tmp_path / "durable", crawl.crawl_id)
        _watch(crawl, "mongo", [_children_in_log, _pages_in(durable)])
    finally:
        stack.start_service("mongo")


def _kafka_outage(stack: Stack, crawl: _Crawl, tmp_path: Path) -> None:
    killed = time.monotonic()
    stack.stop_service("kafka", kill=True)
    try:
        wait_until(lambda: crawl.noticed("kafka"), 60, "the workers to notice the dead broker")
        time.sleep(max(0.0, killed + KAFKA_DOWN - time.monotonic()))
    finally:
        stack.start_service("kafka")  # the same log directory: what was written is kept
    _watch(crawl, "kafka", [_children_in_log])  # the acks held back while it was dead commit


OUTAGES = {"redis": _redis_outage, "mongo": _mongo_outage, "kafka": _kafka_outage}


@pytest.mark.parametrize("service", ["redis", "mongo", "kafka"])
def test_outage_stalls_acknowledgements_then_the_crawl_resumes(stack, service, crawl_id,
                                                               tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site", log_requests=True)
    crawl = _Crawl(env, crawl_id, _site_links(tmp_path / "site", server.base_url))
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        with running(2, worker_command(server.base_url + "/", SETTINGS), env,
                     tmp_path / "logs") as crawl.workers:
            wait_until(lambda: count() >= 50, 120, "50 pages stored")
            assert count() < PAGES - 200, "the crawl was nearly over before the outage"
            OUTAGES[service](stack, crawl, tmp_path)
            codes = wait_all(crawl.workers, timeout=300)
            logs = worker_logs(crawl.workers)
    finally:
        server.close()
    assert codes == [0, 0], logs[-4000:]
    assert RESUMED.get(service, "") in logs
    _children_in_log(crawl, *crawl.frontier())
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(site.site_urls(server.base_url, PAGES))
    fetches = Counter(f.path for f in server.request_log or [])
    print(f"{service} outage: {sum(fetches.values())} fetches of {PAGES} pages, "
          f"{sum(1 for n in fetches.values() if n > 1)} pages fetched more than once")
