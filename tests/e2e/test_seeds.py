"""Seeding through the dupefilter once, from any Kafka client; bad records are dead-lettered."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pymongo import MongoClient

from crawler.connections import clients as connection
from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, wait_all, worker_command


def _read_topic(bootstrap: str, topic: str, timeout: float = 5.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    parts = consumer.partitions_for_topic(topic) or set()
    consumer.assign([TopicPartition(topic, p) for p in parts])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for records in consumer.poll(300).values():
            values += [r.value for r in records]
    consumer.close()
    return values


def test_seeds_from_any_client_dedup_and_dead_letters(
    stack, demo_site, demo_site_pages, crawl_id, tmp_path
):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    topics = {f"{crawl_id}.{t}": 12 for t in ("requests", "seeds", "dead")}
    connection.ensure_topics(bootstrap, topics, connect_timeout=5)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    seeds = [
        (demo_site + "/").encode(),  # the same URL the workers get as start_urls
        json.dumps({"url": demo_site + "/p/3.html", "priority": 5,
                    "meta": {"depth_limit": 32}}).encode(),  # DEPTH_LIMIT's own bound
        json.dumps({"url": demo_site + "/p/4.html", "meta": {"k": 1}}).encode(),  # SEED_META_KEYS
        b"not a url", b'{"url": 5}', b'{"url": "http://a.test/", "colour": "red"}',
    ]
    for value in seeds:
        producer.send(f"{crawl_id}.seeds", value=value)
    for value in (b"garbage", b'{"v": 1}', b'{"v": 7, "url": "http://a.test/"}'):
        producer.send(f"{crawl_id}.requests", value=value)
    producer.flush()
    producer.close()
    cmd = worker_command(demo_site + "/", {"CRAWL_IDLE_TIMEOUT": 3})
    with running(3, cmd, env, tmp_path) as workers:  # the same start_urls thrice
        assert wait_all(workers, timeout=120) == [0, 0, 0]
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find()]
    assert sorted(urls) == sorted(site.site_urls(demo_site, demo_site_pages))
    requests = [json.loads(v) for v in _read_topic(bootstrap, f"{crawl_id}.requests")
                if v.startswith(b'{"url"')]
    # the requests seeds became (a page's link to "/" has a Referer: it may race the seed
    # across workers, crawled twice and stored once, bloom/race_duplicates in docs/delivery.md)
    index = [r for r in requests if r["url"] == demo_site + "/"
             and b"Referer" not in {base64.b64decode(k) for k in r["headers"]}]
    assert len(index) == 1, "four seeds of the same URL were seeded more than once"
    dead = [json.loads(v) for v in _read_topic(bootstrap, f"{crawl_id}.dead")]
    assert len(dead) == 7
    reasons = " | ".join(d["reason"] for d in dead)
    for expected in ("invalid URL 'not a url'", "missing 'url'", "unknown seed fields: colour",
                     "not JSON", "unsupported record version 7",
                     "seed meta key 'k' not allowed from outside the crawl"):
        assert expected in reasons
    assert all({"topic", "partition", "offset"} <= set(d["source"]) for d in dead)


def test_seed_command_reports_bad_lines_with_their_numbers(stack, crawl_id, tmp_path):
    env = {**os.environ, **stack.env(), "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    seed_file = tmp_path / "seeds.txt"
    seed_file.write_text("http://a.test/1\nnot-a-url\n# a comment\n\n"
                         '{"url": "http://a.test/2", "priority": 3}\nftp://a.test/\n'
                         '{"url": "http://a.test/3", "headers": {"X-Admin": ["1"]}}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "seed", "site", "http://a.test/0", "-f", str(seed_file),
         "--crawl-id", crawl_id], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{seed_file}:2: skipped" in proc.stderr
    assert f"{seed_file}:6: skipped" in proc.stderr
    assert (f"{seed_file}:7: skipped: seed field 'headers' not allowed from outside the crawl "
            "(SEED_REQUEST_FIELDS lists none)") in proc.stderr  # the workers would refuse it
    assert "3 seeds published" in proc.stdout and "3 invalid lines skipped" in proc.stdout
    values = sorted(_read_topic(env["KAFKA_BOOTSTRAP_SERVERS"], f"{crawl_id}.seeds"))
    assert values == sorted([b"http://a.test/0", b"http://a.test/1",
                             b'{"url": "http://a.test/2", "priority": 3}'])


def test_seeds_from_librdkafka_are_crawled_and_a_malformed_one_is_dead_lettered(
    stack, demo_site, demo_site_pages, crawl_id, tmp_path
):
    """A client that is not kafka-python: confluent-kafka's librdkafka producer writes seeds
    in the documented format (a URL, or a seed's JSON) to Apache Kafka. The workers start
    from a page that links nowhere, so every page stored was reached through those seeds."""
    from confluent_kafka import Producer

    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    connection.ensure_topics(bootstrap, {f"{crawl_id}.{t}": 12
                                         for t in ("requests", "seeds", "dead")},
                             connect_timeout=5)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in (json.dumps({"url": demo_site + "/", "priority": 3}).encode(),
                  (demo_site + "/p/1.html").encode(), b"not a url from librdkafka"):
        producer.produce(f"{crawl_id}.seeds", value=value)
    assert producer.flush(30) == 0, "librdkafka did not deliver every seed"
    # a short idle timeout as in the test above: the wait for new seeds is not what is tested
    cmd = worker_command(demo_site + "/nowhere", {"CRAWL_IDLE_TIMEOUT": 3})
    with running(2, cmd, env, tmp_path) as workers:
        assert wait_all(workers, timeout=120) == [0, 0]
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find()]
    assert sorted(urls) == sorted(site.site_urls(demo_site, demo_site_pages))
    dead = [json.loads(v) for v in _read_topic(bootstrap, f"{crawl_id}.dead")]
    assert len(dead) == 1 and "invalid URL 'not a url from librdkafka'" in dead[0]["reason"], dead
