"""Cluster-wide priority: two workers with the default settings work through a backlog of
10,000 low-priority requests; 50 seeds of priority 10 injected by another Kafka client are
all fetched within 10 s, long before the backlog drains, whichever worker owns them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import SHORT_IDLE, trust_seed_host, wait_until
from kafka import KafkaProducer
from scrapy import Request

from crawler.connections import clients as connection
from crawler.frontier import codec
from crawler.frontier.partitioning import SpreadPartitioner, partitioner
from crawler.localstack.demo import running, worker_command

pytestmark = pytest.mark.serial  # the urgent seeds are bounded in time (10 s)

BACKLOG = 10_000
URGENT = 50
PARTITIONS = 12  # KAFKA_PARTITIONS' default: the topics as a worker would create them


class _Origin(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fetched: dict[str, float]
    latency = 0.0  # seconds before each answer

    def do_GET(self) -> None:
        self.fetched.setdefault(self.path, time.monotonic())
        time.sleep(self.latency)
        body = b"<html><head><title>leaf</title></head><body>no links</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _origin(latency: float = 0.0) -> Iterator[tuple[str, dict[str, float]]]:
    fetched: dict[str, float] = {}
    handler = type("Origin", (_Origin,), {"fetched": fetched, "latency": latency})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", fetched
    finally:
        server.shutdown()
        server.server_close()


def _backlog(bootstrap: str, crawl_id: str, base: str, redis_url: str) -> None:
    """The low-priority backlog, produced the way a worker produces follow-up requests (of
    a seed on the origin's host: that host recorded first, or the backlog is private)."""
    trust_seed_host(redis_url, crawl_id, "127.0.0.1")
    topics = {f"{crawl_id}.{t}": PARTITIONS for t in ("requests", "requests.1", "seeds", "dead")}
    connection.ensure_topics(bootstrap, topics, connect_timeout=5)
    producer = connection.kafka_producer(bootstrap, connect_timeout=5.0, linger_ms=20,
                                         client_id="backlog", partitioner=SpreadPartitioner())
    key_for = partitioner("host")
    for n in range(BACKLOG):
        request = Request(f"{base}/low/{n}")
        producer.send(f"{crawl_id}.requests", key=key_for(request),
                      value=codec.encode_request(request))
    producer.flush()
    producer.close()


def test_high_priority_seeds_overtake_the_backlog_of_every_worker(stack, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    with _origin() as (base, fetched):
        _backlog(bootstrap, crawl_id, base, env["REDIS_URL"])
        low = lambda: sum(p.startswith("/low/") for p in list(fetched))  # noqa: E731
        with running(2, worker_command(base + "/start", SHORT_IDLE), env, tmp_path) as workers:
            wait_until(lambda: low() >= 300, 120, "the workers to be into the backlog")
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
            injected = time.monotonic()
            for n in range(URGENT):
                seed = {"url": f"{base}/urgent/{n}", "priority": 10}
                producer.send(f"{crawl_id}.seeds", value=json.dumps(seed).encode())
            producer.flush()
            producer.close()
            urgent = lambda: [p for p in list(fetched) if p.startswith("/urgent/")]  # noqa: E731
            wait_until(lambda: len(urgent()) == URGENT, 60, "the urgent seeds to be fetched")
            took = max(fetched[p] for p in urgent()) - injected
            backlog_done = low()
            assert all(w.process.poll() is None for w in workers)
    print(f"50 urgent seeds fetched {took:.1f} s after injection; "
          f"backlog fetched by then: {backlog_done}/{BACKLOG}")
    assert took <= 10, f"the last urgent seed was fetched {took:.1f} s after injection"
    assert backlog_done < BACKLOG / 2, "the backlog was half done: priority proves nothing"


def test_a_band_the_settings_no_longer_name_is_still_consumed(stack, crawl_id, tmp_path):
    """A crawl that ran with two thresholds left work in ``<crawl>.requests.2``; run again
    with the default (one threshold), its records are fetched all the same, with a warning."""
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    with _origin() as (base, fetched):
        old_band = f"{crawl_id}.requests.2"
        connection.ensure_topics(bootstrap, {old_band: PARTITIONS}, connect_timeout=5)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        request = Request(f"{base}/left-in-an-old-band", priority=50)
        trust_seed_host(env["REDIS_URL"], crawl_id, "127.0.0.1")  # a follow-up, as above
        producer.send(old_band, value=codec.encode_request(request)).get(timeout=30)
        producer.close()
        cmd = worker_command(base + "/start", {"CRAWL_IDLE_TIMEOUT": 3})  # exit soon when done
        with running(1, cmd, env, tmp_path) as workers:
            assert [w.process.wait(timeout=120) for w in workers] == [0]
        log = (tmp_path / "worker-0.log").read_text()
    assert "/left-in-an-old-band" in fetched
    assert f"Consuming {old_band} too" in log
