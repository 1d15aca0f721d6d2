"""The crawler's Redis clients against a real redis-server that demands an ACL user and TLS
(``--port 0``: no plaintext port; ``--tls-auth-clients yes``: a client certificate signed by
the test CA; ``--user default off``: no unauthenticated client).

Every component gets its client the way a worker does (``shared.redis_for`` of a crawler
whose settings come from ``REDIS_URL`` and ``REDIS_PARAMS`` in the environment), and a
refusal is one :class:`ServiceUnavailable` line with the masked address, in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.config.keys import CrawlKeys
from crawler.connections import shared
from crawler.connections.clients import ServiceUnavailable, check_redis, redis_client
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier.crawlstate import CrawlState
from crawler.localstack.certs import make_tls_files
from crawler.localstack.secured_redis import SecuredRedis
from crawler.localstack.services import HOST
from crawler.politeness.proxypool import parse_proxy
from crawler.politeness.proxystore import RedisProxyStore
from crawler.politeness.ratelimiter import RateLimitConfig, RedisLimiter
from crawler.robots import RULES, RedisRobotsStore, Verdict
from crawler.security.trusted import TrustedHosts

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0  # CONNECT_TIMEOUT of the refusal tests


class Named(Spider):
    name = "secured"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRedis]:
    with SecuredRedis(tmp_path_factory.mktemp("secured-redis"), client_certs="yes") as server:
        yield server


@pytest.fixture
def environment(secured: SecuredRedis, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """``REDIS_URL`` and ``REDIS_PARAMS`` (JSON) in the environment, as a deployment sets them."""
    for name, value in secured.env().items():
        monkeypatch.setenv(name, value)
    return secured.env()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _robots_seeds_and_budget(client: Any, crawl_id: str) -> None:
    """The robots.txt verdicts, the seeds' hosts and the page budget through the ACL user."""
    robots = RedisRobotsStore(client, crawl_id)
    assert await robots.claim("http://a.test:80", "w1", 30)
    assert not await robots.claim("http://a.test:80", "w2", 30)
    verdict = Verdict(RULES, 200, "HTTP 200", "Disallow: /x", expires=time.time() + 60)
    await robots.put("http://a.test:80", verdict, "w1")
    assert await robots.get("http://a.test:80") == verdict
    hosts = TrustedHosts()
    hosts.bind(client, crawl_id)
    await hosts.add("intranet.test")
    other = TrustedHosts()
    other.bind(client, crawl_id)
    assert await other.check("intranet.test") and not await other.check("else.test")
    assert await client.incr(CrawlKeys(crawl_id).host_pages("a.test")) == 1


def test_every_component_works_through_the_acl_user_and_tls(
        secured: SecuredRedis, environment: dict[str, str], crawl_id: str) -> None:
    crawler = get_crawler(Named, {"CRAWL_ID": crawl_id, "RATELIMIT_ENABLED": True,
                                  "RATELIMIT_RATE": 1.0})

    async def scenario() -> None:
        client = shared.redis_for(crawler)  # the scheduler's, dedup's, heartbeats' pool
        try:
            assert await client.acl_whoami() == secured.user
            connection = await client.connection_pool.get_connection()
            assert isinstance(connection, aioredis.SSLConnection)
            await client.connection_pool.release(connection)
            bloom = RedisBloom.from_crawler(crawler, client, key=f"{{{crawl_id}}}:bloom")
            await bloom.open()
            assert await bloom.add([b"a" * 20, b"b" * 20]) == [True, True]
            assert await bloom.check([b"a" * 20, b"c" * 20]) == [True, False]
            cfg = RateLimitConfig.from_settings(crawler.settings, Named.name)
            assert cfg.default is not None
            grant = await RedisLimiter(client, crawl_id, cfg).reserve("example.com",
                                                                      cfg.default)
            assert grant.reserved
            await _robots_seeds_and_budget(client, crawl_id)
            state = CrawlState(client, crawl_id, stale_after=60)
            await state.beat("w1", idle=False, assigned=["0"], lag=0, info={"pid": 4242})
            assert [w.worker for w in await state.workers()] == ["w1"]
            store = RedisProxyStore.from_crawler(crawler)  # its own shared user
            await store.open([parse_proxy("http://127.0.0.1:3128")])
            assert await client.scard(store.members_key) == 1
            await store.close()
        finally:
            await shared.release_redis(crawler, client)
        assert not shared.shared(crawler).open

    run(scenario())
    status = subprocess.run(  # scrapy cluster status: REDIS_URL and REDIS_PARAMS from the env
        [sys.executable, "-m", "scrapy", "cluster", "status", crawl_id, "--json"], cwd=ROOT,
        env={**os.environ, **environment}, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr[-2000:]
    assert [n["pid"] for n in json.loads(status.stdout)["nodes"]] == [4242]
    assert secured.password not in status.stdout + status.stderr


def test_unauthenticated_plaintext_and_certificateless_clients_are_refused(
        secured: SecuredRedis) -> None:
    """The server really demands the user, TLS and a client certificate."""
    ca = {"ssl_ca_certs": str(secured.pki.ca_file), "ssl_cert_reqs": "required"}
    anonymous = f"rediss://{HOST}:{secured.port}/0"
    with redis.Redis.from_url(anonymous, **secured.params) as client, \
            pytest.raises(redis.AuthenticationError):
        client.ping()
    with redis.Redis(host=HOST, port=secured.port, username=secured.user,
                     password=secured.password, socket_timeout=TIMEOUT) as client, \
            pytest.raises(redis.ConnectionError):
        client.ping()  # plaintext on the TLS port
    with redis.Redis.from_url(secured.url, **ca, socket_timeout=TIMEOUT) as client, \
            pytest.raises(redis.ConnectionError):
        client.ping()  # no client certificate
    with redis.Redis.from_url(secured.url, **secured.params) as client:
        assert client.ping()  # and the right client gets in


def refusal(url: str, params: dict[str, Any]) -> tuple[str, float]:
    """The message of the start-up check against *url*, and how long it took."""
    async def check() -> str:
        client = redis_client(url, params, connect_timeout=TIMEOUT)
        try:
            with pytest.raises(ServiceUnavailable) as caught:
                await check_redis(client, url)
            return str(caught.value)
        finally:
            await client.aclose()

    started = time.monotonic()
    message = run(check())
    return message, time.monotonic() - started


def assert_one_masked_line(message: str, secured: SecuredRedis, password: str) -> None:
    masked = f"rediss://{secured.user}:***@{HOST}:{secured.port}/0"
    assert message.startswith(f"Cannot reach the service of REDIS_URL at {masked}: "), message
    assert "\n" not in message and "Traceback" not in message
    assert password not in message and secured.password not in message


def test_a_wrong_password_is_one_masked_line_in_time(secured: SecuredRedis) -> None:
    wrong = "not-the-password"
    url = f"rediss://{secured.user}:{wrong}@{HOST}:{secured.port}/0"
    message, took = refusal(url, secured.params)
    assert_one_masked_line(message, secured, wrong)
    assert "invalid username-password pair" in message
    assert took < TIMEOUT


def test_a_wrong_ca_is_one_masked_line_in_time(secured: SecuredRedis, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other-ca")
    message, took = refusal(secured.url, {**secured.params, "ssl_ca_certs": str(other.ca_file)})
    assert_one_masked_line(message, secured, secured.password)
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert took < TIMEOUT

