"""A broker dies mid-crawl on a three-broker Apache Kafka cluster, and nothing is lost.

The cluster is configured as production runs one (:mod:`crawler.localstack.kafka_cluster`):
the crawl's topics replicated 3 times with ``min.insync.replicas`` 2, written with
``acks=all``, Kafka's default failure detection. Three workers crawl a 2,000-page site at
the default settings. Mid-crawl one broker is killed with ``kill -9``:

* ``leader``: the broker that leads most of the crawl's partitions;
* ``coordinator``: the broker that leads the group's ``__consumer_offsets`` partition, so
  that the group's coordinator moves.

It is started again 20 s after the kill on its own log directories. Every page is stored
exactly once, every worker exits 0 and ``scrapy cluster report`` balances to zero. The
failover (from the kill to a new leader of every crawl partition, and to the next stored
page) and the pages fetched more than once are printed: they are measured, not bounded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import ledger_report, wait_until
from kafka.errors import KafkaError
from kafka_log import group_of
from pymongo import MongoClient

from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.kafka_cluster import KafkaCluster
from crawler.localstack.stack import Stack

PAGES = 2000
RESTART_AFTER = 20.0  # seconds from the kill to the broker's restart




def _victim(cluster: KafkaCluster, case: str, crawl_id: str) -> int:
    if case == "leader":
        return cluster.leader_of_most([f"{crawl_id}.requests", f"{crawl_id}.seeds"])
    return cluster.coordinator(group_of(crawl_id))


def _led_without(cluster: KafkaCluster, crawl_id: str, victim: int) -> bool:
    """Whether every partition of the crawl has a live leader other than *victim*."""
    try:
        leaders = cluster.leaders([f"{crawl_id}.requests", f"{crawl_id}.seeds"])
    except KafkaError:  # the admin client asked the dead broker: ask again
        return False
    return victim not in leaders and -1 not in leaders


def _failover(cluster: KafkaCluster, crawl_id: str, victim: int, storing: Callable[[], bool],
              killed: float) -> dict[str, float]:
    """Seconds from the kill until every crawl partition has a new leader, and until
    *storing* holds (pages stored again), each measured on its own."""
    took: dict[str, float] = {}
    while len(took) < 2:
        now = time.monotonic() - killed
        assert now < 120, f"no failover within 120 s: {took}"
        if "leaders" not in took and _led_without(cluster, crawl_id, victim):
            took["leaders"] = now
        if "stored" not in took and storing():
            took["stored"] = now
        time.sleep(0.2)
    return took


@pytest.mark.parametrize("case", ["leader", "coordinator"])
def test_a_broker_killed_mid_crawl_loses_nothing(kafka_cluster: KafkaCluster, stack: Stack,
                                                 case: str, crawl_id: str,
                                                 tmp_path: Path) -> None:
    cluster = kafka_cluster
    env = {**stack.env(), "KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap, "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site", log_requests=True)
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        with running(3, worker_command(server.base_url + "/", {}), env,
                     tmp_path / "logs") as workers:
            wait_until(lambda: count() >= 300, 180, "300 pages stored")
            victim = _victim(cluster, case, crawl_id)
            at_kill = count()
            killed = time.monotonic()
            cluster.kill(victim)
            assert at_kill < PAGES - 300, "the crawl was nearly over before the kill"
            took = _failover(cluster, crawl_id, victim, lambda: count() > at_kill + 10, killed)
            time.sleep(max(0.0, killed + RESTART_AFTER - time.monotonic()))
            cluster.start_node(victim)
            codes = wait_all(workers, timeout=600)
            logs = worker_logs(workers)
    finally:
        server.close()
    assert codes == [0, 0, 0], logs[-4000:]
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(site.site_urls(server.base_url, PAGES))  # each once
    report = ledger_report(crawl_id, env)
    assert report["finished"] is True, report
    assert report["unaccounted"] == 0 and report["pending"] == 0, report
    assert report["overcounted"] == 0, report
    assert report["stored"] == PAGES, report
    fetches = Counter(f.path for f in server.request_log or [] if f.path != "/robots.txt")
    print(f"kafka failover ({case}, node {victim} killed at {at_kill} pages): new leaders "
          f"after {took['leaders']:.1f} s, 10 more pages stored after {took['stored']:.1f} s; "
          f"{sum(fetches.values())} fetches of {PAGES} pages, "
          f"{sum(1 for n in fetches.values() if n > 1)} pages fetched more than once")
