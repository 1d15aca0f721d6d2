"""The crawl user's write ACL is revoked mid-crawl on Apache Kafka, and restored 20 s later.

The broker is configured as production runs one with ACLs: SASL SCRAM-SHA-512 over TLS,
Kafka's ``StandardAuthorizer``, a crawl user allowed every operation on the topics and the
group of its crawl and nothing else. Three workers crawl a 1,000-page site at the default
settings. After 150 pages the user's ``ALL`` on the crawl's topics is deleted and replaced
by read-only ACLs (read, describe): every send of a follow-up request is refused with
``TopicAuthorizationFailedError``. 20 s later the ``ALL`` is given back.

A refusal stalls the sends, as an outage does: nothing is dead-lettered, no parent whose
follow-ups are not in the log is acknowledged, the workers say so in an ERROR line and raise
the alert ``kafka_refused``. Every page is stored exactly once, every worker exits 0 and
``scrapy cluster report`` balances to zero.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import ledger_report, wait_until
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePatternFilter,
    ResourceType,
)
from pymongo import MongoClient

from crawler.config.keys import CrawlKeys
from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.secure_kafka import TlsKafka, allow_crawl, crawl_acls, start_tls_kafka
from crawler.localstack.stack import Stack

PAGES = 1000  # 2,000 until 2026-12-07: the test's CPU is its crawl over TLS (163 CPU-s)
AT = 150  # pages stored when the writes are revoked: most links are still to be discovered
REVOKED_FOR = 20.0  # seconds between the revoke and the restore
USER, PASSWORD = "crawler", "a-crawler-password"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TlsKafka]:
    kafka = start_tls_kafka(tmp_path / "kafka", users={USER: PASSWORD})
    try:
        yield kafka
    finally:
        kafka.stop()


def _revoke_writes(broker: TlsKafka, crawl_id: str) -> None:
    """Delete the user's ALL on the crawl's topics; leave it reading (read, describe)."""
    topics = ResourcePatternFilter(ResourceType.TOPIC, crawl_id, ACLResourcePatternType.PREFIXED)
    everything = ACLFilter(f"User:{USER}", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                           topics)
    with broker.admin() as admin:
        [(_filter, deleted, error)] = admin.delete_acls([everything])
        assert error.errno == 0 and len(deleted) == 1, (error, deleted)
        reads = [acl for acl in crawl_acls(USER, crawl_id, write=False)
                 if acl.resource_pattern.resource_type == ResourceType.TOPIC]
        result = admin.create_acls(reads)
    assert not result["failed"], result


def _restore_writes(broker: TlsKafka, crawl_id: str) -> None:
    allow_crawl(broker, USER, crawl_id, write=True)


def _alerts(client: redis.Redis, crawl_id: str) -> set[str]:
    return {json.loads(v)["alert"] for v in client.hvals(CrawlKeys(crawl_id).alerts)}


def test_a_revoked_write_acl_stalls_the_crawl_and_nothing_is_lost(
        stack: Stack, broker: TlsKafka, crawl_id: str, tmp_path: Path) -> None:
    allow_crawl(broker, USER, crawl_id, write=True)
    env = {**stack.env(), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
           "KAFKA_SSL_CAFILE": str(broker.pki.ca_file), "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": USER,
           "KAFKA_SASL_PASSWORD": PASSWORD, "CRAWL_ID": crawl_id}
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    client = redis.Redis.from_url(env["REDIS_URL"])
    count = lambda: stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0]  # noqa: E731
    try:
        with running(3, worker_command(server.base_url + "/", {}), env,
                     tmp_path / "logs") as workers:
            wait_until(lambda: count() >= AT, 180, f"{AT} pages stored")
            _revoke_writes(broker, crawl_id)
            revoked, at_revoke = time.monotonic(), count()
            assert at_revoke < PAGES // 2, "the crawl was half over before the revoke"
            alerted = False
            while time.monotonic() < revoked + REVOKED_FOR:
                alerted = alerted or "kafka_refused" in _alerts(client, crawl_id)
                time.sleep(0.5)
            during = count()
            _restore_writes(broker, crawl_id)
            codes = wait_all(workers, timeout=600)
            logs = worker_logs(workers)
    finally:
        server.close()
        client.close()
    assert codes == [0, 0, 0], logs[-4000:]
    with MongoClient(env["MONGO_URI"]) as mongo:
        urls = [d["url"] for d in mongo["crawler"][crawl_id].find({}, {"url": 1})]
    missing = set(site.site_urls(server.base_url, PAGES)) - set(urls)
    assert not missing, f"{len(missing)} pages never stored, e.g. {sorted(missing)[:3]}"
    assert sorted(urls) == sorted(site.site_urls(server.base_url, PAGES))  # each once
    report = ledger_report(crawl_id, env)
    assert report["finished"] is True, report
    assert report["unaccounted"] == 0 and report["pending"] == 0, report
    assert report["stored"] == PAGES, report
    assert "Dead-lettered" not in logs and "'frontier/dead_lettered'" not in logs
    assert "The broker refuses this worker's sends to" in logs, logs[-4000:]
    assert "TopicAuthorizationFailedError" in logs
    assert "takes this worker's sends again" in logs
    assert alerted, "no kafka_refused alert in Redis while the writes were refused"
    print(f"write ACL revoked at {at_revoke} pages for {REVOKED_FOR:.0f} s: {during} stored "
          f"when it was restored")
