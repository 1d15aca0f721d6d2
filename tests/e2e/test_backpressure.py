"""A slow host's backlog stays in the broker: parked requests count against the buffer.

A rate-limited host (``RATELIMIT_RATE``) sends most of its requests back to the worker's
buffer to wait for their slot. If those parked requests did not count against
``KAFKA_BUFFER_SIZE``, the worker would pull its partitions' whole backlog into memory;
and if the lease timeout counted from a lease's first start, every parked lease would
expire and be produced again.
"""

from __future__ import annotations

import json

from helpers import final_stat, wait_until
from kafka import KafkaProducer
from redis import Redis

from crawler.config import defaults
from crawler.connections import clients as connection
from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, stop_gracefully, worker_command, worker_logs

PAGES = 1200
PAGES_FETCHED = 40
RATE = 2.0
BOUND = defaults.KAFKA_BUFFER_SIZE


def _heartbeats(client: Redis, crawl_id: str) -> list[dict[str, object]]:
    return [json.loads(v)["info"] for v in client.hvals(f"{{{crawl_id}}}:workers")]


def test_a_rate_limited_backlog_stays_in_the_broker(stack, crawl_id, tmp_path):
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    site.generate(tmp_path / "site", PAGES)
    server = site.serve(tmp_path / "site")
    topics = {f"{crawl_id}.{t}": defaults.KAFKA_PARTITIONS for t in ("requests", "seeds", "dead")}
    connection.ensure_topics(bootstrap, topics, connect_timeout=5)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for url in site.site_urls(server.base_url, PAGES):  # the whole backlog at once
        producer.send(f"{crawl_id}.seeds", value=url.encode())
    producer.flush()
    producer.close()
    # RATELIMIT_RATE: the slow host under test. KAFKA_LEASE_TIMEOUT: short, so that a
    # parked lease taken for a stuck one would expire within the test (the default is 600 s)
    cmd = worker_command(server.base_url + "/", {"RATELIMIT_RATE": RATE,
                                                 "KAFKA_LEASE_TIMEOUT": 10, "LOG_LEVEL": "INFO"})
    client = Redis.from_url(env["REDIS_URL"])
    seen: list[dict[str, object]] = []

    def fetched_enough() -> bool:
        beats = _heartbeats(client, crawl_id)
        seen.extend(beats)
        return any(int(b.get("pages", 0)) >= PAGES_FETCHED for b in beats)  # type: ignore[call-overload]

    try:
        with running(1, cmd, env, tmp_path / "logs") as workers:
            wait_until(fetched_enough, 600, f"{PAGES_FETCHED} pages fetched")
            stop_gracefully(workers[0], 120)  # SIGINT, a graceful stop: final stats
            log = worker_logs(workers)
    finally:
        server.close()
        client.close()
    assert max(int(b.get("delayed", 0)) for b in seen) > 0, "nothing waited: proves nothing"  # type: ignore[call-overload]
    peak = max(int(b.get("buffered", 0)) for b in seen)  # type: ignore[call-overload]
    assert peak <= BOUND, f"{peak} requests held in the worker's buffer (bound {BOUND})"
    held = max(int(b.get("held", 0)) for b in seen)  # type: ignore[call-overload]
    assert held <= BOUND, f"{held} records held by the worker (bound {BOUND})"
    assert (final_stat(log, "frontier/lease_expired") or 0) == 0, "parked leases expired"
