"""A request the broker can never take ends in the dead-letter topic; the crawl goes on.

The spider yields, among the demo site's links, one request with 2 MB of meta: larger
than the producer allows. Retrying it could never succeed, and the page that yielded it
could never be acknowledged, so the crawl would never end. It is refused as the spider
yields it, with a line that names the spider, the callback and the meta key. So is a
request whose meta holds a value no record can hold (a ``threading.Event``): its line
names the meta key and the type, with no traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import final_stat
from kafka import KafkaConsumer
from pymongo import MongoClient

from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, wait_all

HERE = Path(__file__).resolve().parents[1]  # tests/


def _dead_letters(bootstrap: str, topic: str) -> list[dict[str, object]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        return [json.loads(record.value) for record in consumer]
    finally:
        consumer.close()


def test_a_request_too_large_for_the_broker_or_unencodable_is_dead_lettered(
        stack, crawl_id, tmp_path, demo_site, demo_site_pages):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    # CRAWL_IDLE_TIMEOUT: a short wait for the end of the crawl, to keep the test short
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "spiders" / "poison.py"),
           "-a", f"base={demo_site}", "-s", "CRAWL_IDLE_TIMEOUT=4", "-s", "LOG_LEVEL=INFO"]
    with running(1, cmd, env, tmp_path) as workers:
        codes = wait_all(workers, timeout=300)
        log = Path(workers[0].log.name).read_text(errors="replace")
    assert codes == [0], log[-4000:]
    assert final_stat(log, "frontier/refused") == 1, log[-4000:]
    # the error line leads to the code that yielded it
    assert (f"Request {demo_site}/too-big yielded by spider 'poison' in callback parse can "
            "never be sent (") in log, log[-4000:]
    assert ("bytes encoded, a record holds at most 1,048,064); largest meta keys: "
            "blob (2,097,154 bytes)") in log, log[-4000:]
    assert final_stat(log, "frontier/unencodable") == 1, log[-4000:]
    line = (f"Request {demo_site}/unencodable yielded by spider 'poison' in callback parse "
            "can never be sent: meta key 'done' holds a threading.Event, which cannot travel "
            "through the frontier (supported: ")
    assert line in log and "Traceback" not in log, log[-4000:]
    dead = _dead_letters(env["KAFKA_BOOTSTRAP_SERVERS"], f"{crawl_id}.dead")
    assert sorted(d["source"]["url"] for d in dead) == [f"{demo_site}/too-big",
                                                        f"{demo_site}/unencodable"]
    reasons = {d["source"]["url"]: str(d["reason"]) for d in dead}
    big = reasons[f"{demo_site}/too-big"]
    assert "MessageSizeTooLargeError" in big or "too large" in big.lower(), big
    assert reasons[f"{demo_site}/unencodable"].startswith(
        "cannot encode request: meta key 'done' holds a threading.Event"), reasons
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) == set(site.site_urls(demo_site, demo_site_pages))
