"""Which Redis errors are retried (transient) and which are reported (deterministic): the
rule on errors a real Redis returns (on redis-py's exceptions:
tests/unit/test_redis_errors_rule.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
from redis import exceptions as rex

from crawler.connections.redis_errors import describe, is_transient, kind
from crawler.dedup.dupefilter import RedisBloom
from crawler.localstack.stack import free_port


def test_errors_from_a_real_redis(own_redis: str) -> None:
    client = redis.Redis.from_url(own_redis)
    errors: dict[str, BaseException] = {}
    try:
        client.set("s", "x")
        with pytest.raises(rex.ResponseError) as script:
            client.eval("return redis.call('HGET', KEYS[1], 'f')", 1, "s")  # WRONGTYPE
        errors["script"] = script.value
        client.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["~*"],
                           commands=["+get", "+ping"])
        reader = redis.Redis.from_url(own_redis, username="reader", password="pw")
        with pytest.raises(rex.NoPermissionError) as noperm:
            reader.set("s", "y")
        errors["noperm"] = noperm.value
        with pytest.raises(rex.AuthenticationError) as wrongpass:
            redis.Redis.from_url(own_redis, username="reader", password="no").ping()
        errors["wrongpass"] = wrongpass.value
        client.config_set("maxmemory", "1")
        with pytest.raises(rex.OutOfMemoryError) as oom:
            client.set("t", "x" * 1000)
        errors["oom"] = oom.value
        client.config_set("maxmemory", "0")
        with pytest.raises(rex.ConnectionError) as refused:
            redis.Redis(port=free_port(), socket_connect_timeout=2).ping()
        assert is_transient(refused.value)
        assert is_transient(busy_error(client, own_redis))
    finally:
        client.close()
    assert {name: kind(exc) for name, exc in errors.items()} == dict.fromkeys(
        errors, "deterministic")


def busy_error(client: redis.Redis, url: str) -> BaseException:
    """The error a client gets while another one runs a long script (``BUSY``)."""
    client.config_set("busy-reply-threshold", "50")
    spinner = redis.Redis.from_url(url)
    started = threading.Event()

    def spin() -> None:
        started.set()
        try:
            spinner.eval("while true do end", 0)
        except rex.RedisError:
            pass  # killed by SCRIPT KILL below

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    started.wait()
    probe = redis.Redis.from_url(url)
    try:
        while True:
            try:
                probe.ping()
            except rex.ResponseError as exc:
                if "BUSY" in str(exc):
                    return exc
                raise
    finally:
        probe.script_kill()
        thread.join(30)
        spinner.close()
        probe.close()


def test_a_bloom_call_without_permission_is_deterministic(own_redis: str) -> None:
    """An ACL that forbids the filter's scripts: the error is one to report, not retry."""
    admin = redis.Redis.from_url(own_redis)
    admin.acl_setuser("crawler", enabled=True, passwords=["+pw"], keys=["~*"],
                      commands=["+@all", "-evalsha", "-eval"])
    admin.close()

    async def scenario() -> BaseException:
        from crawler.connections.clients import redis_client
        client = redis_client(own_redis.replace("redis://", "redis://crawler:pw@"))
        try:
            with pytest.raises(rex.RedisError) as info:
                await RedisBloom(client, "{c}:bloom", capacity=100, error_rate=0.01,
                                 growth=2).open()
            return info.value
        finally:
            await client.aclose()

    error = asyncio.run(scenario())
    assert isinstance(error, rex.NoPermissionError), describe(error)
    assert not is_transient(error)
