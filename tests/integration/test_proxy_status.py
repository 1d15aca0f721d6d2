"""Proxy failures by the party at fault, read from a real Redis by ``scrapy cluster status``
(its reader, and the command as a subprocess) and by the dashboard's ``/api/status``: the
health hash and the hosts hash are written here as the proxy pool writes them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

import redis
from scrapy.settings import Settings

from crawler.commands.cluster import HOSTS_BATCH, Reader, _bloom
from crawler.config.keys import CrawlKeys
from crawler.connections.clients import redis_client
from crawler.frontier.crawlstate import CrawlState
from crawler.operations import clusterview, dashboard
from crawler.politeness.proxypool import Health, State

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-pw"  # in the proxy's URL, never in its id: it must not show anywhere
HEALTH = {
    "127.0.0.1:3128": Health(proxy_faults=3, origin_faults=12),
    "10.0.0.1:3128~81a60f20": Health(state=State.DEAD, deaths=2, proxy_faults=41,
                                     origin_faults=1),
    "10.0.0.2:3128": Health(state=State.PROBATION),
}
HOSTS = {"proxy:127.0.0.2:8123": 30, "origin:127.0.0.2:8123": 2, "origin:shop.example": 11,
         "proxy:shop.example": 1, "proxy:[::1]:8080": 13}
EXPECTED = {
    "totals": {"proxy_faults": 44, "origin_faults": 13},
    "by_proxy": [
        {"id": "10.0.0.1:3128~81a60f20", "state": "dead", "proxy_faults": 41,
         "origin_faults": 1},
        {"id": "127.0.0.1:3128", "state": "alive", "proxy_faults": 3, "origin_faults": 12},
        {"id": "10.0.0.2:3128", "state": "probation", "proxy_faults": 0, "origin_faults": 0}],
    "by_host": [
        {"host": "127.0.0.2:8123", "proxy_faults": 30, "origin_faults": 2},
        {"host": "[::1]:8080", "proxy_faults": 13, "origin_faults": 0},
        {"host": "shop.example", "proxy_faults": 1, "origin_faults": 11}],
    "hosts": 3,
}


def write_pool(url: str, crawl_id: str, hosts: dict[str, int] = HOSTS) -> None:
    keys = CrawlKeys(crawl_id)
    with redis.Redis.from_url(url) as client:
        client.sadd(keys.proxies, f"http://alice:{SECRET}@10.0.0.1:3128", "http://127.0.0.1:3128",
                    "http://10.0.0.2:3128")
        client.hset(keys.proxy_health, mapping={k: v.to_json() for k, v in HEALTH.items()})
        for field, count in hosts.items():
            client.hincrby(keys.proxy_hosts, field, count)


async def read_status(url: str, crawl_id: str) -> dict[str, Any]:
    client = redis_client(url)
    try:
        snapshot = await Reader(client, url, crawl_id, _bloom(client, crawl_id, Settings())).read()
    finally:
        await client.aclose()
    return json.loads(clusterview.to_json(clusterview.build_status(snapshot, {}, 7.0)))


def test_the_reader_splits_failures_per_proxy_and_per_host(own_redis, crawl_id):
    write_pool(own_redis, crawl_id)
    status = asyncio.run(read_status(own_redis, crawl_id))
    assert status["proxy_failures"] == EXPECTED
    assert status["proxies"] == {"members": 3, "alive": 1, "probation": 1, "dead": 1,
                                 "unreadable": 0}
    assert SECRET not in json.dumps(status)


def test_a_hosts_hash_bigger_than_one_scan_batch_is_read_whole(own_redis, crawl_id):
    many = {f"{cause}:site{n}.example": n + 1 for n in range(HOSTS_BATCH + 500)
            for cause in ("proxy", "origin")}
    write_pool(own_redis, crawl_id, many)
    failures = asyncio.run(read_status(own_redis, crawl_id))["proxy_failures"]
    assert failures["hosts"] == HOSTS_BATCH + 500
    top = HOSTS_BATCH + 499
    assert failures["by_host"][0] == {"host": f"site{top}.example", "proxy_faults": top + 1,
                                      "origin_faults": top + 1}
    assert len(failures["by_host"]) == 10


def test_a_crawl_without_proxies_has_no_failure_section(own_redis, crawl_id):
    status = asyncio.run(read_status(own_redis, crawl_id))
    assert status["proxy_failures"] is None and status["proxies"] is None


def _cluster(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": url, "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    return subprocess.run([sys.executable, "-m", "scrapy", "cluster", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _beat(url: str, crawl_id: str) -> None:
    async def beat() -> None:
        client = redis_client(url)
        try:
            await CrawlState(client, crawl_id, stale_after=7.0).beat(
                "h:1:abcdef", idle=False, assigned=[], lag=0, info={"pid": 1, "acked": 5})
        finally:
            await client.aclose()

    asyncio.run(beat())


def test_the_command_shows_the_split_in_json_and_text(own_redis, crawl_id):
    write_pool(own_redis, crawl_id)
    _beat(own_redis, crawl_id)
    proc = _cluster(own_redis, "status", crawl_id, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["proxy_failures"] == EXPECTED
    _beat(own_redis, crawl_id)
    text = _cluster(own_redis, "status", crawl_id)
    assert text.returncode == 0, text.stderr[-2000:]
    lines = [line.split() for line in text.stdout.splitlines()]
    assert "blame     44 failures blamed on proxies, 13 on origin sites" in text.stdout
    assert ["10.0.0.1:3128~81a60f20", "dead", "41", "1"] in lines
    assert ["HOST", "(top", "3", "of", "3)", "PROXY", "FAULTS", "ORIGIN", "FAULTS"] in lines
    assert ["shop.example", "1", "11"] in lines
    assert SECRET not in text.stdout + text.stderr + proc.stdout + proc.stderr


def test_the_dashboard_api_carries_the_split(own_redis, crawl_id):
    write_pool(own_redis, crawl_id)

    async def body() -> dict[str, Any]:
        client = redis_client(own_redis)
        reader = Reader(client, own_redis, crawl_id, _bloom(client, crawl_id, Settings()))
        lines: list[str] = []
        task = asyncio.create_task(
            dashboard.serve(reader.read, 7.0, 0, "redis://x", ready=lines.append))
        try:
            while not lines:
                await asyncio.sleep(0.05)
            url = lines[0].removeprefix("Dashboard: ") + "api/status"
            return await asyncio.to_thread(_get_json, url)
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            await client.aclose()

    status = asyncio.run(asyncio.wait_for(body(), 30))
    assert status["proxy_failures"] == EXPECTED


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)
