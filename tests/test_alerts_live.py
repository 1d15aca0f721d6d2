"""Every alert provoked against a real Redis: in Redis, logged, in the stats, sent to a webhook."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from scrapy import Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler import clusterview
from crawler.alerts import RULES
from crawler.demo import running, wait_all, worker_command, worker_logs
from crawler.dupefilter import RedisBloom
from crawler.extensions.alerts import AlertsExtension
from tests.helpers import wait_until


class AlertSpider(Spider):
    name = "alerting"


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server that records the JSON bodies POSTed to it."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def build(redis_url: str, crawl_id: str, **settings: Any) -> AlertsExtension:
    crawler = get_crawler(AlertSpider, {
        "ALERTS_ENABLED": True, "EXTENSIONS_BASE": {}, "REDIS_URL": redis_url,
        "CRAWL_ID": crawl_id, "BLOOM_CAPACITY": 20, "BLOOM_ERROR_RATE": 0.001,
        "ALERT_LAG_GROWING_MINUTES": 0.05, **settings})
    return build_from_crawler(AlertsExtension, crawler)


async def _fill_bloom(url: str, crawl_id: str, items: int) -> float:
    """A tiny filter (capacity 20) given *items* fingerprints; its fill."""
    client = aioredis.Redis.from_url(url)
    try:
        bloom = RedisBloom(client, f"{{{crawl_id}}}:bloom", capacity=20, error_rate=0.001,
                           growth=2)
        await bloom.open()
        await bloom.add([f"fp-{i}".encode() for i in range(items)])
        return (await bloom.info()).fill
    finally:
        await client.aclose()


def _beat(client: redis.Redis, crawl_id: str, worker: str, *, ts: float, lag: int) -> None:
    doc = {"idle": False, "assigned": ["x.requests:0"], "lag": lag, "ts": ts,
           "info": {"pid": 1, "host": "h"}}
    client.hset(f"{{{crawl_id}}}:workers", worker, json.dumps(doc))


async def _provoke(client: redis.Redis, ext: AlertsExtension, crawl_id: str) -> list[str]:
    """Bad stats, a stale heartbeat and a lag that grows for 3.2 s (> 0.05 min); the alerts."""
    stats = ext.crawler.stats
    assert stats is not None
    stats.set_value("response_received_count", 10)
    stats.set_value("retry/failed", 5)  # 5 / 15 > 5 %
    stats.set_value("proxy/pool/alive", 0)
    _beat(client, crawl_id, "ghost:1:aa", ts=time.time() - 120, lag=7)  # still in the hash
    alerts: list[str] = []
    for lag in (10, 20):  # growing for 1.6 s only: not yet an alert
        await asyncio.sleep(1.6 if alerts else 0)
        _beat(client, crawl_id, "live:2:bb", ts=time.time(), lag=lag)
        alerts = [a.name for a in await ext.check()]
    await asyncio.sleep(1.6)
    _beat(client, crawl_id, "live:2:bb", ts=time.time(), lag=30)
    assert alerts == ["failure_rate", "proxies_low", "bloom_fill", "node_silent"]
    return [a.name for a in await ext.check()]


def test_every_alert_provoked_and_cleared(redis_url, crawl_id, webhook, caplog):
    url, received = webhook
    assert asyncio.run(_fill_bloom(redis_url, crawl_id, 19)) == 0.95
    ext = build(redis_url, crawl_id, ALERT_WEBHOOK_URL=url)
    client = redis.Redis.from_url(redis_url)
    key = f"{{{crawl_id}}}:alerts"
    stats = ext.crawler.stats
    assert stats is not None

    async def scenario() -> None:
        ext.open("alerting")
        assert await _provoke(client, ext, crawl_id) == list(RULES)
        _check_raised(client, ext, key)
        wait_until(lambda: len(received) == len(RULES), 10, "one webhook POST per alert")
        await _clear(client, ext, crawl_id)
        await ext.close()

    with caplog.at_level(logging.INFO, logger="crawler.extensions.alerts"):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sorted(m.split()[1] for m in warnings) == sorted(RULES)  # each logged once
    assert {p["alert"] for p in received} == set(RULES)
    assert all(p["crawl_id"] == crawl_id and p["worker"] == ext.worker for p in received)
    assert client.hgetall(key) == {}
    assert all(stats.get_value(f"alerts/active/{n}") == 0 for n in RULES)
    cleared = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert sorted(m.split()[1] for m in cleared) == sorted(RULES)
    assert len(received) == len(RULES)  # nothing sent on clearing
    client.close()


def _check_raised(client: redis.Redis, ext: AlertsExtension, key: str) -> None:
    """Every alert in the Redis hash (with a TTL), in the stats, and in the cluster status."""
    stored = {k.decode(): json.loads(v) for k, v in client.hgetall(key).items()}
    assert set(stored) == set(RULES)
    assert 0 < client.ttl(key) <= 60
    assert stored["node_silent"]["worker"] == ext.worker
    assert "ghost:1:aa" in stored["node_silent"]["message"]
    assert (stored["bloom_fill"]["value"], stored["bloom_fill"]["threshold"]) == (0.95, 0.9)
    assert stored["failure_rate"]["value"] == round(5 / 15, 4)
    assert stored["proxies_low"]["severity"] == "critical"
    assert "from 10 to 30" in stored["lag_growing"]["message"]
    assert ext.crawler.stats is not None
    assert all(ext.crawler.stats.get_value(f"alerts/active/{n}") == 1 for n in RULES)
    now = time.time()
    snapshot = clusterview.Snapshot("c", now, {},
                                    alerts=clusterview.parse_alerts(client.hgetall(key), now))
    status = clusterview.build_status(snapshot, {}, stale_after=3.0)
    assert status["alerts"]["status"] == "active"
    assert [a["alert"] for a in status["alerts"]["active"]] == sorted(RULES)


async def _clear(client: redis.Redis, ext: AlertsExtension, crawl_id: str) -> None:
    stats = ext.crawler.stats
    assert stats is not None
    stats.set_value("response_received_count", 1000)
    stats.set_value("proxy/pool/alive", 3)
    client.hdel(f"{{{crawl_id}}}:workers", "ghost:1:aa")
    client.delete(f"{{{crawl_id}}}:bloom:meta")
    _beat(client, crawl_id, "live:2:bb", ts=time.time(), lag=0)  # the lag falls
    assert await ext.check() == []


def test_the_loop_runs_and_survives_a_bad_webhook(redis_url, crawl_id, caplog):
    ext = build(redis_url, crawl_id, ALERT_INTERVAL=0.1,
                ALERT_WEBHOOK_URL="http://127.0.0.1:1/nothing", ALERT_WEBHOOK_TIMEOUT=1)
    spider = AlertSpider()
    client = redis.Redis.from_url(redis_url)
    _beat(client, crawl_id, "ghost:3:cc", ts=time.time() - 100, lag=0)

    async def run() -> None:
        await ext.spider_opened(spider)
        deadline = time.monotonic() + 10
        while not client.hexists(f"{{{crawl_id}}}:alerts", "node_silent"):
            assert time.monotonic() < deadline, "no node_silent alert from the loop"
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)  # more rounds: still active, not raised again
        await ext.spider_closed(spider)

    with caplog.at_level(logging.INFO):
        asyncio.run(run())
        wait_until(lambda: "Alert webhook" in caplog.text, 10, "the webhook failure logged")
    assert caplog.text.count("Alert node_silent active") == 1
    assert ext._task is None and ext.redis is None
    client.close()


def test_a_real_worker_raises_an_alert(stack, demo_site, crawl_id, tmp_path):
    """A ``scrapy crawl`` worker in distributed mode: the add-on enables the extension."""
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id}
    cmd = worker_command(demo_site + "/", {"CRAWL_IDLE_TIMEOUT": 5, "ALERT_INTERVAL": 0.5,
                                           "ALERT_BLOOM_FILL": 0.0})  # any fingerprint: alert
    with running(1, cmd, env, tmp_path) as workers:
        assert wait_all(workers, timeout=90) == [0]
        logs = worker_logs(workers)
    assert "crawler.extensions.alerts.AlertsExtension" in logs  # in "Enabled extensions"
    assert logs.count("Alert bloom_fill active: Bloom filter") == 1
    assert "'alerts/active/bloom_fill': 1" in logs  # the final stats dump
    assert "Alert check failed" not in logs
