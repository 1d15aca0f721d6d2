"""``scrapy crawl`` against a Redis that demands an ACL user, TLS and a client certificate
(:class:`~crawler.localstack.secured_redis.SecuredRedis`), Kafka and MongoDB of the session's stack.

A whole distributed crawl runs through it with ``REDIS_URL`` (``rediss://crawler:…@``) and
``REDIS_PARAMS`` (the CA, the client certificate) in the environment: the scheduler, the
Bloom filter, the seed claims, the rate limiter and the finished mark keep their state
there. A wrong password or a wrong CA ends the start-up in one line (the preflight).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import tracebacks_outside_kafka
from test_startup_errors import START, crawl, the_one_error

from crawler.connections.clients import redis_sync_client
from crawler.localstack.certs import make_tls_files
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.secured_redis import SecuredRedis
from crawler.localstack.services import HOST


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRedis]:
    with SecuredRedis(tmp_path_factory.mktemp("secured-redis"), client_certs="yes") as server:
        yield server


def crawl_keys(url: str, params: dict[str, str], crawl_id: str) -> set[str]:
    with redis_sync_client(url, params) as client:
        return {k.decode() for k in client.scan_iter(match=f"{{{crawl_id}}}:*")}


def test_a_distributed_crawl_keeps_its_state_in_the_secured_redis(
        stack, secured: SecuredRedis, demo_site: str, demo_site_pages: int, crawl_id: str,
        tmp_path: Path) -> None:
    env = {**os.environ, **stack.env(), **secured.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    # a rate, so that the rate limiter keeps buckets (with none, only Crawl-delay hosts have one)
    cmd = worker_command(demo_site + "/", {"CRAWL_IDLE_TIMEOUT": 5, "RATELIMIT_RATE": 1000})
    with running(1, cmd, env, tmp_path) as workers:
        codes = wait_all(workers, timeout=300)
        log = worker_logs(workers)
    assert codes == [0], log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
    assert secured.password not in log
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id)[0] == demo_site_pages
    keys = crawl_keys(secured.url, secured.params, crawl_id)
    families = {key.split(":", 2)[1] for key in keys}  # the heartbeats left with the worker
    assert {"bloom", "seed", "finished", "ratelimit", "robots", "seed-hosts"} <= families, keys
    assert not crawl_keys(stack.env()["REDIS_URL"], {}, crawl_id)  # nothing went elsewhere


@pytest.mark.parametrize("fault", ["password", "ca"])
def test_a_refused_redis_is_one_start_up_line(stack, secured: SecuredRedis, fault: str,
                                              tmp_path: Path) -> None:
    wrong_password = "not-the-password"
    url, params = secured.url, dict(secured.params)
    if fault == "password":
        url = f"rediss://{secured.user}:{wrong_password}@{HOST}:{secured.port}/0"
    else:
        params["ssl_ca_certs"] = str(make_tls_files(tmp_path / "other-ca").ca_file)
    env = {**stack.env(), "REDIS_URL": url, "REDIS_PARAMS": json.dumps(params)}
    code, out, elapsed = crawl(env, *START, "-s", "CONNECT_TIMEOUT=2")
    line = the_one_error(code, out)
    masked = f"rediss://{secured.user}:***@{HOST}:{secured.port}/0"
    assert f"Cannot reach the service of REDIS_URL at {masked}: " in line, line
    assert "point REDIS_URL at a running one" in line
    assert ("invalid username-password pair" if fault == "password"
            else "CERTIFICATE_VERIFY_FAILED") in line, line
    assert wrong_password not in out and secured.password not in out
    assert elapsed < 30
