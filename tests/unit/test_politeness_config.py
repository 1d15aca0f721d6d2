"""The politeness settings, each read once into a frozen config: proxies (ProxyConfig and the
pool policy), the rate limit (RateLimitConfig), retries (RetryConfig), User-Agents
(UserAgentConfig). Their defaults, that they are frozen, and that a bad value names its
setting. No service: nothing here connects."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.middlewares.useragent import UserAgentConfig
from crawler.politeness.backoff import RetryConfig
from crawler.politeness.banpolicy import BanPolicy
from crawler.politeness.proxyconfig import ProxyConfig, pool_policy, seed_proxies
from crawler.politeness.proxypool import PoolPolicy
from crawler.politeness.proxystore import ProxyStore, RedisProxyStore
from crawler.politeness.ratelimiter import RateLimitConfig
from crawler.politeness.tokenbucket import Adaptive


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


def _frozen(cfg: Any, field: str) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, field, None)
    assert not hasattr(cfg, "__dict__")  # slots: no attribute can be added either


# -- proxies -------------------------------------------------------------------------------
def test_proxy_defaults() -> None:
    cfg = ProxyConfig.from_settings(Settings())
    assert (cfg.store, cfg.ban_policy, cfg.seeds) == (ProxyStore, BanPolicy, ())
    assert (cfg.when_none, cfg.retries, cfg.refresh_interval, cfg.wait_max) == (
        "wait", 5, 1.0, 30.0)
    assert (cfg.probe_url, cfg.probe_timeout) == ("", 5.0)
    assert pool_policy(Settings()) == PoolPolicy()
    _frozen(cfg, "when_none")


def test_a_redis_url_makes_the_store_shared_unless_one_is_named() -> None:
    redis = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    assert ProxyConfig.from_settings(Settings(redis)).store is RedisProxyStore
    named = {**redis, "PROXY_STORE": "crawler.politeness.ProxyStore"}
    assert ProxyConfig.from_settings(Settings(named)).store is ProxyStore


def test_seeds_come_from_the_list_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "proxies.txt"
    path.write_text("# a comment\n\nhttp://10.0.0.2:8080\n", encoding="utf-8")
    settings = Settings({"ROTATING_PROXY_LIST": "http://10.0.0.1:8080",
                         "ROTATING_PROXY_LIST_PATH": str(path)})
    cfg = ProxyConfig.from_settings(settings)
    assert [p.url for p in cfg.seeds] == ["http://10.0.0.1:8080", "http://10.0.0.2:8080"]
    assert list(cfg.seeds) == seed_proxies(settings)


@pytest.mark.parametrize(("name", "value"), [
    ("PROXY_STORE", "no.such.Store"), ("PROXY_BAN_POLICY", "crawler.NoSuchPolicy"),
    ("PROXY_WHEN_NONE", "sometimes"), ("PROXY_BAN_RETRIES", -1), ("PROXY_BAN_RETRIES", 1.5),
    ("PROXY_REFRESH_INTERVAL", 0), ("PROXY_WAIT_MAX", "long"),
    ("ROTATING_PROXY_LIST", ["ftp://h:1"]), ("ROTATING_PROXY_LIST_PATH", "/nonexistent"),
])
def test_a_bad_proxy_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name) as error:
        ProxyConfig.from_settings(Settings({name: value}))
    assert error.value.setting == name


@pytest.mark.parametrize(("name", "value"), [
    ("PROXY_EWMA_ALPHA", 0), ("PROXY_EWMA_ALPHA", 1.5), ("PROXY_LATENCY_REF", 0),
    ("PROXY_MIN_SUCCESS", -0.1), ("PROXY_MIN_SUCCESS", 2), ("PROXY_BACKOFF_BASE", 0),
    ("PROXY_BACKOFF_MAX", 1.0), ("PROXY_PROBATION_SUCCESSES", 0), ("PROXY_BACKOFF_RESET", 0),
])
def test_a_bad_pool_policy_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name) as error:
        pool_policy(Settings({name: value}))
    assert error.value.setting == name


# -- rate limit ----------------------------------------------------------------------------
def test_rate_limit_defaults() -> None:
    """No rate for a host by default: only its robots.txt Crawl-delay or an entry limits it."""
    cfg = RateLimitConfig.from_settings(Settings(), "spider")
    assert (cfg.default, cfg.domains, cfg.max_wait, cfg.adaptive) == (
        None, {}, 60.0, Adaptive(factor=0.5, min_rate=0.05, recover_after=20,
                                            step=0.1))
    assert (cfg.state_ttl, cfg.backoff, cfg.backoff_max) == (3600.0, 0.5, 30.0)
    assert cfg.decrease_on == frozenset({429, 503})
    assert (cfg.redis_url, cfg.redis_params, cfg.connect_timeout, cfg.crawl_id) == (
        "", {}, 5.0, "spider")
    _frozen(cfg, "max_wait")


def test_rate_limit_backoff_max_is_at_least_the_backoff() -> None:
    cfg = RateLimitConfig.from_settings(Settings({"RATELIMIT_RETRY_BACKOFF": 5,
                                                  "RATELIMIT_RETRY_BACKOFF_MAX": 1}), "s")
    assert (cfg.backoff, cfg.backoff_max) == (5.0, 5.0)


@pytest.mark.parametrize(("name", "value"), [
    ("RATELIMIT_RATE", -1), ("RATELIMIT_RATE", float("inf")), ("RATELIMIT_BURST", 0.5),
    ("RATELIMIT_MAX_WAIT", 0), ("RATELIMIT_DECREASE_FACTOR", 1.5),
    ("RATELIMIT_RECOVER_STEP", 0), ("RATELIMIT_RECOVER_AFTER", 0), ("RATELIMIT_MIN_RATE", 0),
    ("RATELIMIT_STATE_TTL", float("inf")), ("RATELIMIT_RETRY_BACKOFF", 0),
    ("RATELIMIT_RETRY_BACKOFF_MAX", -1), ("RATELIMIT_DECREASE_ON", "99"),
    ("RATELIMIT_DOMAINS", {"a.example": {"rate": "2"}}),
    ("RATELIMIT_DOMAINS", {"a.example": {"burst": float("inf")}}),
    ("RATELIMIT_ADAPTIVE", "maybe"), ("CONNECT_TIMEOUT", 0), ("REDIS_PARAMS", "[1]"),
    ("CRAWL_ID", "no spaces"),
])
def test_a_bad_rate_limit_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=re.escape(name)) as error:
        RateLimitConfig.from_settings(Settings({name: value}), "spider")
    assert error.value.setting.startswith(name)


# -- retries -------------------------------------------------------------------------------
def test_retry_defaults() -> None:
    cfg = RetryConfig.from_settings(Settings())
    assert (cfg.base, cfg.cap, cfg.retry_after_max, dict(cfg.overrides)) == (
        1.0, 60.0, 120.0, {})
    assert (cfg.max_retry_times, cfg.priority_adjust) == (2, -1)  # Scrapy's own defaults
    _frozen(cfg, "base")


def test_retry_overrides_are_parsed() -> None:
    cfg = RetryConfig.from_settings(Settings({"RETRY_STATUS_OVERRIDES": '{"404": "backoff"}'}))
    assert cfg.overrides == {404: "backoff"}


@pytest.mark.parametrize(("name", "value"), [
    ("RETRY_BACKOFF_BASE", 0), ("RETRY_BACKOFF_MAX", 0.5), ("RETRY_AFTER_MAX", -1),
    ("RETRY_STATUS_OVERRIDES", {"dns": "retry_after"}), ("RETRY_STATUS_OVERRIDES", "{"),
    ("RETRY_TIMES", -1), ("RETRY_PRIORITY_ADJUST", "up"),
])
def test_a_bad_retry_setting_is_named(name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name) as error:
        RetryConfig.from_settings(Settings({name: value}))
    assert error.value.setting == name


# -- User-Agents ---------------------------------------------------------------------------
def test_user_agents_are_read_from_a_list_or_lines() -> None:
    cfg = UserAgentConfig.from_settings(Settings({"USERAGENT_LIST": "A/1, x\n B/2 \n",
                                                  "USER_AGENT": "Scrapy"}))
    assert (cfg.user_agents, cfg.default) == (("A/1, x", "B/2"), "Scrapy")
    _frozen(cfg, "default")


@pytest.mark.parametrize("value", [[], "", "[1, 2]", "[not json", ["ok", 3]])
def test_a_bad_user_agent_list_is_named(value: Any) -> None:
    with pytest.raises(SettingError, match="USERAGENT_LIST") as error:
        UserAgentConfig.from_settings(Settings({"USERAGENT_LIST": value}))
    assert error.value.setting == "USERAGENT_LIST"
