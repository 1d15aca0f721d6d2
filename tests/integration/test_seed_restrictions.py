"""Seeds restricted by default, on a real broker and a real Redis.

A plain kafka-python producer writes JSON seeds with headers, a body, a meta key outside
``SEED_META_KEYS``, and a full request record naming a callback (``"v": 1``, as a worker
writes it, but unsigned): each goes to ``<CRAWL_ID>.dead`` with its reason and is never
fetched. The worker's own start request, published to the seeds topic and signed, keeps its
callback, cb_kwargs and meta. With ``SEED_REQUEST_FIELDS`` listing them, the header and body
seeds are fetched with their header and body."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis
import redis.asyncio as aioredis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from scrapy import Request
from seed_rule_crawl import START_META, SeedRuleSpider
from support.connections import Pages, run_crawl, serve

from crawler.config.keys import CrawlKeys
from crawler.connections import clients as connection
from crawler.frontier import codec
from crawler.frontier.seedtrust import SIGNATURE_HEADER, crawl_seed_key

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).with_name("seed_rule_crawl.py")


class RecordingPages(Pages):
    """Every request it gets: method, path, the X-Admin header, the body."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def page(self, path: str) -> tuple[int, bytes]:
        return (404, b"") if path == "/robots.txt" else (200, b"<html><body>ok</body></html>")

    def _note(self, body: bytes) -> None:
        self.seen.append({"method": self.command, "path": self.path,
                          "x_admin": self.headers.get("X-Admin"), "body": body.decode()})

    def do_GET(self) -> None:
        self._note(b"")
        super().do_GET()

    def do_POST(self) -> None:
        self._note(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        super().do_GET()


def _external_seeds(base: str) -> dict[str, bytes]:
    spider = SeedRuleSpider(base=base)
    forged = Request(f"{base}/forged", callback=spider.parse_secret, meta={"is_start_request": 1})
    return {
        "/headers": json.dumps({"url": f"{base}/headers", "headers": {"X-Admin": ["1"]}}).encode(),
        "/body": json.dumps({"url": f"{base}/body", "method": "POST", "body": "a=1"}).encode(),
        "/meta": json.dumps({"url": f"{base}/meta",
                             "meta": {"proxy": "http://127.0.0.1:9/"}}).encode(),
        "/forged": codec.encode_request(forged, spider),
        "/plain": json.dumps({"url": f"{base}/plain", "priority": 2,
                              "meta": {"depth_limit": 0}}).encode(),
    }


def _produce(bootstrap: str, crawl_id: str, values: list[bytes]) -> None:
    topics = {f"{crawl_id}.{t}": 2 for t in ("requests", "seeds", "dead")}
    connection.ensure_topics(bootstrap, topics, connect_timeout=5)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(f"{crawl_id}.seeds", value=value)
    producer.flush()
    producer.close()


def _read(bootstrap: str, topic: str) -> list[Any]:
    """Every record of *topic* (value and headers), read from the start."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)
                     or ()])
    consumer.seek_to_beginning()
    records: list[Any] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for batch in consumer.poll(300).values():
            records += batch
    consumer.close()
    return records


def _crawl(kafka_bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str,
           fields: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str], str]:
    """Seed the crawl from outside, run one worker; its result, the requests the site got,
    the dead letters by path, and the worker's log."""
    RecordingPages.seen = []
    server = serve(RecordingPages)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        _produce(kafka_bootstrap, crawl_id, list(_external_seeds(base).values()))
        result, log = run_crawl(SCRIPT, [kafka_bootstrap, redis_url, mongo_uri, crawl_id,
                                         base, fields], timeout=180)
    finally:
        server.shutdown()
    dead = {}
    for record in _read(kafka_bootstrap, f"{crawl_id}.dead"):
        letter = json.loads(record.value)
        dead[codec.seed_url(json.loads(letter["value"])["url"]).removeprefix(base)] = (
            letter["reason"])
    return result, [s for s in RecordingPages.seen if s["path"] != "/robots.txt"], dead, log


def _start_request_kept_everything(result: dict[str, Any], seen: list[dict[str, Any]]) -> None:
    assert result["started"] == [{"url": result["started"][0]["url"], "n": 7,
                                  "meta": START_META}], result
    assert sum(s["path"] == "/start" for s in seen) == 1


def test_external_seeds_with_headers_a_body_or_other_meta_are_dead_lettered(
        kafka_bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str) -> None:
    result, seen, dead, log = _crawl(kafka_bootstrap, redis_url, mongo_uri, crawl_id, "")
    assert result["reason"] == "finished", log[-3000:]
    assert dead == {
        "/headers": "seed field 'headers' not allowed from outside the crawl "
                    "(SEED_REQUEST_FIELDS lists none)",
        "/body": "seed fields 'method', 'body' not allowed from outside the crawl "
                 "(SEED_REQUEST_FIELDS lists none)",
        "/meta": "seed meta key 'proxy' not allowed from outside the crawl "
                 "(SEED_META_KEYS lists depth_limit, recrawl_after)",
        "/forged": "seed field 'callback' not allowed from outside the crawl "
                   "(SEED_REQUEST_FIELDS lists none)",
    }, log[-3000:]
    assert sorted(s["path"] for s in seen) == ["/plain", "/start"], seen  # nothing refused
    _start_request_kept_everything(result, seen)
    assert [url.rsplit("/", 1)[1] for url in result["parsed"]] == ["plain"], result
    assert (result["seeds_restricted"], result["seeds_bad_signature"]) == (4, 0), result
    [start] = [r for r in _read(kafka_bootstrap, f"{crawl_id}.seeds")
               if b"/start" in r.value]
    assert [name for name, _ in start.headers] == [SIGNATURE_HEADER]  # the worker signed it


def test_with_the_allowing_setting_the_header_and_body_seeds_are_fetched(
        kafka_bootstrap: str, redis_url: str, mongo_uri: str, crawl_id: str) -> None:
    result, seen, dead, log = _crawl(kafka_bootstrap, redis_url, mongo_uri, crawl_id,
                                     "method,headers,body")
    assert result["reason"] == "finished", log[-3000:]
    assert sorted(dead) == ["/forged", "/meta"], dead  # a callback and a meta key: still not
    fetched = {s["path"]: s for s in seen}
    assert fetched["/headers"]["x_admin"] == "1"
    assert (fetched["/body"]["method"], fetched["/body"]["body"]) == ("POST", "a=1")
    assert sorted(fetched) == ["/body", "/headers", "/plain", "/start"], seen
    assert [url.rsplit("/", 1)[1] for url in result["parsed"]] == ["body", "headers", "plain"]
    _start_request_kept_everything(result, seen)


def test_the_seed_key_is_made_once_and_outlives_a_finished_crawl(
        redis_url: str, crawl_id: str) -> None:
    async def keys() -> list[bytes]:
        client = aioredis.Redis.from_url(redis_url)
        try:
            first = await crawl_seed_key(client, crawl_id)
            second = await crawl_seed_key(client, crawl_id)
            await client.pexpire(CrawlKeys(crawl_id).seed_key, 60_000)  # a finished crawl
            third = await crawl_seed_key(client, crawl_id)  # a new run reads it
            return [first, second, third]
        finally:
            await client.aclose()

    first, second, third = asyncio.run(keys())
    assert first == second == third and len(first) == 64
    plain = redis.Redis.from_url(redis_url)
    assert plain.ttl(CrawlKeys(crawl_id).seed_key) == -1  # persistent again
    plain.close()
