"""ProxyPoolMiddleware and UserAgentRotationMiddleware in process: settings, bans, the
when-none modes, credentials (no proxy, no origin; real crawls through a real proxy are
tests/integration/test_proxy_middleware.py)."""

from __future__ import annotations

import logging
import time
from asyncio import run
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.exceptions import (
    CloseSpider,
    DownloadConnectionRefusedError,
    IgnoreRequest,
    NotConfigured,
)
from scrapy.http import Response
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from support.proxies import OURS, PROXY_ON, SECRET, SECRETS, USER, assert_no_secret

from crawler.config.readers import SettingError
from crawler.frontier.delay import NOT_BEFORE_KEY
from crawler.localstack.stack import free_port
from crawler.middlewares.proxies import AVOID_KEY, ID_KEY, ProxyPoolMiddleware
from crawler.middlewares.useragent import UserAgentRotationMiddleware
from crawler.politeness.proxypool import State, parse_proxy


class ProxySpider(Spider):
    name = "proxies"


GOOD = f"http://{USER}:{SECRET}@127.0.0.1:3128"
OTHER = "http://127.0.0.2:3128"


def make(proxies: list[str], **settings: Any) -> ProxyPoolMiddleware:
    crawler = get_crawler(ProxySpider, {**PROXY_ON, "ROTATING_PROXY_LIST": proxies, **settings})
    crawler.spider = ProxySpider.from_crawler(crawler)
    middleware: ProxyPoolMiddleware = build_from_crawler(ProxyPoolMiddleware, crawler)
    run(middleware.spider_opened())
    return middleware


def stats(middleware: ProxyPoolMiddleware) -> dict[str, Any]:
    return middleware.stats.get_stats()  # type: ignore[no-any-return]


def kill(middleware: ProxyPoolMiddleware, address: str) -> None:
    """Ban *address* (the only proxy of the pool) through the middleware: a 407 is the
    proxy's own answer."""
    request = Request("http://example.com/banned")
    run(middleware.process_request(request))
    assert request.meta[ID_KEY] == parse_proxy(address).id
    run(middleware.process_response(request, Response(request.url, status=407,
                                                       request=request)))
    assert middleware.pool.get(parse_proxy(address).id).state is State.DEAD


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "MONGO_URI", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


def test_not_configured_unless_enabled() -> None:
    with pytest.raises(NotConfigured):
        build_from_crawler(ProxyPoolMiddleware, get_crawler(ProxySpider, {}))


@pytest.mark.parametrize(("settings", "named"), [
    ({"PROXY_WHEN_NONE": "sometimes"}, "PROXY_WHEN_NONE"),
    ({"PROXY_BAN_POLICY": "no.such.Policy"}, "PROXY_BAN_POLICY"),
    ({"PROXY_BACKOFF_BASE": 0}, "PROXY_BACKOFF_BASE"),
    ({"PROXY_BAN_RETRIES": 3}, "PROXY_BAN_RETRIES"),  # renamed: told, not ignored
    ({"PROXY_PROBE_URL": "ftp://x/"}, "PROXY_PROBE_URL"),
    ({"PROXY_BAN_POLICY": "crawler.politeness.banpolicy.BanPolicy",
      "ROTATING_PROXY_BAN_POLICY": "rotating_proxies.policy.BanDetectionPolicy"},
     "ROTATING_PROXY_BAN_POLICY"),
    ({"ROTATING_PROXY_LIST": [GOOD, f"ftp://{USER}:{SECRET}@h:1"]}, "ROTATING_PROXY_LIST"),
    ({"ROTATING_PROXY_LIST_PATH": "/nonexistent/proxies.txt"}, "ROTATING_PROXY_LIST_PATH"),
    ({"DOWNLOADER_MIDDLEWARES": {OURS: 800}}, "DOWNLOADER_MIDDLEWARES"),
    ({"HTTPPROXY_ENABLED": False}, "HTTPPROXY_ENABLED"),
])
def test_bad_settings_are_named_without_credentials(settings: dict[str, Any], named: str) -> None:
    crawler = get_crawler(ProxySpider, {**PROXY_ON, **settings})
    with pytest.raises(SettingError) as info:
        build_from_crawler(ProxyPoolMiddleware, crawler)
    assert info.value.setting == named
    assert_no_secret(str(info.value))


def test_an_unreachable_shared_store_closes_the_spider(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    crawler = get_crawler(ProxySpider, {**PROXY_ON, "ROTATING_PROXY_LIST": [GOOD],
                                        "REDIS_URL": unreachable, "CONNECT_TIMEOUT": 0.5})
    middleware = build_from_crawler(ProxyPoolMiddleware, crawler)
    assert type(middleware.store).__name__ == "RedisProxyStore"
    with pytest.raises(CloseSpider) as info:
        run(middleware.spider_opened())
    assert info.value.reason == "proxy_pool_unavailable"
    run(middleware.spider_closed())
    assert "Cannot start the proxy pool" in caplog.text
    assert_no_secret(caplog.text)


def test_proxies_come_from_a_file_too(tmp_path: Path) -> None:
    listing = tmp_path / "proxies.txt"
    listing.write_text(f"# the pool\n{GOOD}\n\n127.0.0.3:8080\n")
    middleware = make([OTHER], ROTATING_PROXY_LIST_PATH=str(listing))
    assert set(middleware.pool.proxies) == {parse_proxy(a).id
                                            for a in (GOOD, OTHER, "127.0.0.3:8080")}


def test_credentials_travel_only_in_the_proxy_authorization_header() -> None:
    middleware = make([GOOD])
    httpproxy = HttpProxyMiddleware.from_crawler(get_crawler(ProxySpider))
    request = Request("http://example.com/a")
    assert run(middleware.process_request(request)) is None
    proxy_id = parse_proxy(GOOD).id
    assert request.meta["download_slot"] == f"proxy:{proxy_id}" and request.meta[ID_KEY] == proxy_id
    httpproxy.process_request(request)
    assert request.meta["proxy"] == "http://127.0.0.1:3128"
    assert request.headers["Proxy-Authorization"] == b"Basic " + SECRETS[1].encode()
    response = Response(request.url, body=b"ok", request=request)
    assert run(middleware.process_response(request, response)) is response
    assert b"Proxy-Authorization" not in request.headers  # the request object may live on
    assert stats(middleware)["proxy/requests"] == 1
    assert stats(middleware)[f"proxy/{proxy_id}/requests"] == 1
    assert_no_secret(repr(stats(middleware)), repr(request.meta))


def test_a_banned_request_comes_back_as_a_fresh_copy_for_another_proxy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    middleware = make([GOOD, OTHER], PROXY_RETRIES=2, PROXY_BACKOFF_BASE=200)
    request = Request("http://example.com/a", meta={"crawler_lease": 7}, priority=3)
    run(middleware.process_request(request))
    first = request.meta[ID_KEY]
    request.headers["Proxy-Authorization"] = b"Basic c2VjcmV0"  # as HttpProxyMiddleware would
    banned = Response(request.url, status=407, body=b"who are you", request=request)
    retry = run(middleware.process_response(request, banned))
    assert isinstance(retry, Request) and retry is not request
    assert retry.dont_filter and retry.priority == 3 and retry.meta["crawler_lease"] == 7
    assert retry.meta[AVOID_KEY] == [first] and "proxy" not in retry.meta
    assert "download_slot" not in retry.meta and b"Proxy-Authorization" not in retry.headers
    assert "retry_times" not in retry.meta  # a proxy retry is not one of RETRY_TIMES
    run(middleware.process_request(retry))
    assert retry.meta[ID_KEY] != first  # the other proxy
    assert middleware.pool.get(first).state is State.DEAD
    assert stats(middleware)["proxy/bans"] == 1 and stats(middleware)["proxy/dead"] == 1
    assert stats(middleware)["proxy/blame/proxy"] == 1
    assert stats(middleware)[f"proxy/{first}/blame/proxy"] == 1
    assert stats(middleware)["proxy/host/example.com/blame/proxy"] == 1
    # a probe that gets through brings the first one back on probation: avoided but usable
    monkeypatch.setattr("crawler.politeness.probe.probe", _through)
    middleware.pool.health[first] = replace(middleware.pool.get(first), until=0)
    run(middleware.prober.run())
    assert middleware.pool.get(first).state is State.PROBATION
    assert stats(middleware)["proxy/probes/ok"] == 1 and stats(middleware)["proxy/revived"] == 1
    again = run(middleware.process_response(retry, Response(retry.url, status=407,
                                                             request=retry)))
    assert isinstance(again, Request) and len(again.meta[AVOID_KEY]) == 2
    run(middleware.process_request(again))
    final = Response(again.url, status=407, request=again)
    assert run(middleware.process_response(again, final)) is final  # out of proxy retries
    assert stats(middleware)["proxy/retries"] == 2
    assert stats(middleware)["proxy/retries_exhausted"] == 1


async def _through(proxy: object, **kw: object) -> None:
    return None


def test_the_origins_failures_go_on_to_the_retry_middleware_unscored() -> None:
    middleware = make([GOOD, OTHER])
    for status in (503, 429, 502):
        request = Request("http://example.com/a")
        run(middleware.process_request(request))
        response = Response(request.url, status=status, request=request)
        assert run(middleware.process_response(request, response)) is response
    assert stats(middleware)["proxy/blame/origin"] == 3
    assert "proxy/bans" not in stats(middleware) and "proxy/failures" not in stats(middleware)
    assert {h.success for h in middleware.pool.health.values()} == {1.0}


def test_connection_errors_through_a_proxy_are_bans_other_exceptions_pass() -> None:
    middleware = make([GOOD, OTHER])
    request = Request("http://example.com/a")
    run(middleware.process_request(request))
    assert run(middleware.process_exception(request, IgnoreRequest("robots"))) is None
    retry = run(middleware.process_exception(request, DownloadConnectionRefusedError("no")))
    assert isinstance(retry, Request) and stats(middleware)["proxy/bans"] == 1


def test_a_proxy_chosen_by_the_spider_is_left_alone() -> None:
    middleware = make([GOOD])
    for proxy in ("http://10.9.9.9:1", None):
        request = Request("http://example.com/", meta={"proxy": proxy})
        run(middleware.process_request(request))
        assert request.meta["proxy"] == proxy and ID_KEY not in request.meta
    assert "proxy/requests" not in stats(middleware)


def test_when_none_direct_sends_without_a_proxy() -> None:
    middleware = make([OTHER], PROXY_WHEN_NONE="direct")
    kill(middleware, OTHER)
    request = Request("http://example.com/", meta={"download_slot": "proxy:x"})
    assert run(middleware.process_request(request)) is None
    assert request.meta["proxy"] is None and "download_slot" not in request.meta
    assert stats(middleware)["proxy/none_usable"] == 1 and stats(middleware)["proxy/direct"] == 1


def test_when_none_fail_ignores_the_request_with_a_reason() -> None:
    middleware = make([OTHER], PROXY_WHEN_NONE="fail")
    kill(middleware, OTHER)
    with pytest.raises(IgnoreRequest, match=r"No usable proxy .*PROXY_WHEN_NONE=fail"):
        run(middleware.process_request(Request("http://example.com/")))
    assert stats(middleware)["proxy/none_usable"] == 1


def test_when_none_wait_hands_the_request_to_the_frontier_until_the_first_revival() -> None:
    middleware = make([OTHER], SCHEDULER="crawler.frontier.scheduler.KafkaScheduler",
                      PROXY_BACKOFF_BASE=20)
    killed = time.time()
    kill(middleware, OTHER)
    request = Request("http://example.com/", meta={"crawler_lease": 3})
    started = time.time()
    delayed = run(middleware.process_request(request))
    returned = time.time()
    assert isinstance(delayed, Request) and delayed.dont_filter
    assert delayed.meta["crawler_lease"] == 3
    # due when the proxy revives: PROXY_BACKOFF_BASE after it died (before *started*)
    assert killed + 20 - 0.01 <= delayed.meta[NOT_BEFORE_KEY] <= returned + 20 + 0.01
    # it came back at once instead of sleeping out the 20 s (a generous ceiling)
    assert returned - started < 10 and stats(middleware)["proxy/none_usable"] == 1


def test_when_none_wait_sleeps_on_one_node_until_a_proxy_is_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crawler.politeness.probe.probe", _through)
    middleware = make([OTHER], PROXY_BACKOFF_BASE=0.3)
    kill(middleware, OTHER)
    request = Request("http://example.com/")
    started = time.monotonic()
    assert run(middleware.process_request(request)) is None
    # it slept until the probe was due (a lower bound), not PROXY_WAIT_MAX (30 s) or for ever
    assert 0.25 <= time.monotonic() - started < 20
    assert request.meta[ID_KEY] == parse_proxy(OTHER).id
    run(middleware.spider_closed())
    assert stats(middleware)["proxy/revived"] == 1
    assert stats(middleware)["proxy/pool/probation"] == 1


def test_no_credentials_in_logs_or_stats(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    middleware = make([GOOD, OTHER], PROXY_WHEN_NONE="fail", PROXY_RETRIES=1)
    for n in range(6):
        request = Request(f"http://example.com/{n}")
        try:
            run(middleware.process_request(request))
        except IgnoreRequest as exc:
            assert_no_secret(str(exc))
            continue
        run(middleware.process_response(request, Response(request.url, status=407,
                                                          request=request)))
    run(middleware.spider_closed())
    assert stats(middleware)["proxy/dead"] == 2 and "No usable proxy" in caplog.text
    assert parse_proxy(GOOD).id in caplog.text  # proxies are named, by their id
    assert_no_secret(caplog.text, repr(stats(middleware)))


def test_user_agents_rotate_unless_the_spider_set_one() -> None:
    agents = ["UA one, (KHTML, like Gecko)", "UA two"]
    crawler = get_crawler(ProxySpider, {"USERAGENT_ROTATION_ENABLED": True,
                                        "USERAGENT_LIST": "\n".join(agents),
                                        "USER_AGENT": "Scrapy/2 (+x)"})
    middleware = build_from_crawler(UserAgentRotationMiddleware, crawler)
    seen = set()
    for n in range(50):  # Scrapy's default (its UserAgentMiddleware ran first), or none
        headers = {"User-Agent": "Scrapy/2 (+x)"} if n % 2 else {}
        request = Request("http://example.com/", headers=headers)
        middleware.process_request(request)
        seen.add(request.headers.to_unicode_dict()["User-Agent"])
    assert seen == set(agents)
    mine = Request("http://example.com/", headers={"User-Agent": "mine"})
    middleware.process_request(mine)
    assert mine.headers["User-Agent"] == b"mine"
    with pytest.raises(NotConfigured):
        build_from_crawler(UserAgentRotationMiddleware, get_crawler(ProxySpider))
    with pytest.raises(SettingError, match="USERAGENT_LIST"):
        build_from_crawler(UserAgentRotationMiddleware, get_crawler(
            ProxySpider, {"USERAGENT_ROTATION_ENABLED": True}))


def test_per_host_stats_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crawler.middlewares.proxies.HOST_STATS", 3)
    middleware = make([GOOD])
    for n in range(6):
        request = Request(f"http://host{n}.example/")
        run(middleware.process_request(request))
        response = Response(request.url, status=503, request=request)
        run(middleware.process_response(request, response))
    hosts = {k.split("/")[2] for k in stats(middleware) if k.startswith("proxy/host/")}
    assert hosts == {"host0.example", "host1.example", "host2.example", "other"}
    assert stats(middleware)["proxy/host/other/blame/origin"] == 3
