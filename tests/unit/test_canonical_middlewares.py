"""The middlewares that put links, start requests, seeds and redirects in canonical form
and drop URL traps (crawler.middlewares.canonical); the end-to-end crawl is
tests/e2e/test_canonical_traps.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.core.spidermw import SpiderMiddlewareManager
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.addon import DistributedAddon
from crawler.config.readers import SettingError
from crawler.frontier.accounting import STAT_COUNTERS, Accounting
from crawler.frontier.canonical import CanonicalRules
from crawler.frontier.consumer import Record
from crawler.frontier.leases import Lease, LeaseRegistry
from crawler.frontier.seeding import SeedClaims
from crawler.frontier.seedtrust import SeedSigner
from crawler.frontier.traps import TrapRules
from crawler.ledger import outcomes
from crawler.middlewares.canonical import (
    CanonicalLinksMiddleware,
    CanonicalRedirectMiddleware,
    UrlPolicy,
    UrlTrap,
)

LINKS = "crawler.middlewares.canonical.CanonicalLinksMiddleware"
REDIRECTS = "crawler.middlewares.canonical.CanonicalRedirectMiddleware"
SERVICES = {"KAFKA_BOOTSTRAP_SERVERS": "k:9092", "REDIS_URL": "redis://r",
            "MONGO_URI": "mongodb://m"}


class _Spider(Spider):
    name = "canonical"


def _crawler(**settings: Any) -> Any:
    crawler = get_crawler(_Spider, settings)
    crawler.stats.open_spider()
    return crawler


def _links(**settings: Any) -> tuple[CanonicalLinksMiddleware, Any]:
    crawler = _crawler(**settings)
    return build_from_crawler(CanonicalLinksMiddleware, crawler), crawler


def _redirects(**settings: Any) -> tuple[CanonicalRedirectMiddleware, Any]:
    crawler = _crawler(**settings)
    return build_from_crawler(CanonicalRedirectMiddleware, crawler), crawler


def _page(url: str = "http://h.test/") -> HtmlResponse:
    return HtmlResponse(url, body=b"<html></html>", request=Request(url))


def test_every_link_a_callback_yields_is_canonical_and_a_path_trap_is_dropped() -> None:
    middleware, crawler = _links()
    output = [Request("HTTP://H.test/page?utm_source=a&id=1#x", meta={"k": 1}),
              {"url": "an item"},
              Request("http://h.test/page;jsessionid=Q"),
              Request("http://h.test/x/x/x/x/"),
              Request("http://h.test/a/b/a/b/a/b/")]
    kept = list(middleware.process_spider_output(_page(), output))
    assert [getattr(o, "url", o) for o in kept] == [
        "http://h.test/page?id=1", {"url": "an item"}, "http://h.test/page",
        "http://h.test/a/b/a/b/a/b/"]
    assert kept[0].meta == {"k": 1}
    assert crawler.stats.get_value("canonical/links_rewritten") == 2
    assert crawler.stats.get_value("urltrap/path_repeats") == 1


def test_start_requests_are_canonical_too() -> None:
    middleware, _ = _links()

    async def start() -> AsyncIterator[Any]:
        yield Request("https://H.test:443/?gclid=9")
        yield Request("https://h.test/s/s/s/s")

    async def collect() -> list[str]:
        return [r.url async for r in middleware.process_start(start())]

    assert asyncio.run(collect()) == ["https://h.test/"]


def test_the_settings_reach_the_link_middleware() -> None:
    middleware, _ = _links(CANONICAL_DROP_PARAMS=["ref"], CANONICAL_SORT_QUERY=True,
                                   URLTRAP_MAX_SEGMENT_REPEATS=0)
    output = [Request("http://h.test/x/x/x/x/x?utm_source=a&ref=b&c=1")]
    assert [r.url for r in middleware.process_spider_output(_page(), output)] == [
        "http://h.test/x/x/x/x/x?c=1&utm_source=a"]


@pytest.mark.parametrize(("name", "value"), [("URLTRAP_MAX_SEGMENT_REPEATS", -1),
                                             ("URLTRAP_MAX_SEGMENT_REPEATS", "three"),
                                             ("URLLENGTH_LIMIT", "long"),
                                             ("CANONICAL_DROP_PARAMS", ["a=b"])])
def test_a_bad_setting_stops_start_up_naming_it(name: str, value: Any) -> None:
    for build in (_links, _redirects):
        with pytest.raises(SettingError, match=f"^Setting {name}: "):
            build(**{name: value})


def _redirect(url: str, **meta: Any) -> Request:
    return Request(url, meta={"redirect_urls": ["http://h.test/moved"], "_lease": 7, **meta})


def test_a_redirect_target_is_made_canonical_and_comes_back_with_its_meta() -> None:
    middleware, crawler = _redirects()
    assert middleware.process_request(Request("http://h.test/p?utm_source=a")) is None  # a link
    canonical = middleware.process_request(_redirect("http://H.test/landing?utm_source=go"))
    assert isinstance(canonical, Request) and canonical.url == "http://h.test/landing"
    assert canonical.meta["_lease"] == 7 and canonical.meta["redirect_urls"]
    assert middleware.process_request(canonical) is None  # the second turn passes
    assert crawler.stats.get_value("canonical/redirects_rewritten") == 1


def test_a_redirect_gets_one_turn_even_from_a_rule_that_is_not_idempotent() -> None:
    class Growing:  # a URL that changes every time it is made canonical: no endless loop
        def url(self, url: str) -> str:
            return url + "x"

    crawler = _crawler()
    policy = UrlPolicy(Growing(), TrapRules())  # type: ignore[arg-type]
    middleware = CanonicalRedirectMiddleware(crawler, policy)
    once = middleware.process_request(_redirect("http://h.test/p"))
    assert isinstance(once, Request) and once.url == "http://h.test/px"
    assert middleware.process_request(once) is None


@pytest.mark.parametrize(("url", "reason"), [
    ("http://h.test/a/b/a/b/a/b/a/", "path_repeats"),
    ("http://h.test/" + "y" * 2100, "url_length"),  # URLLENGTH_LIMIT, 2083
])
def test_a_redirect_into_a_trap_is_dropped_with_its_ledger_reason(url: str, reason: str) -> None:
    middleware, crawler = _redirects()
    with pytest.raises(UrlTrap) as dropped:
        middleware.process_request(_redirect(url))
    assert outcomes.of_exception(dropped.value) == f"dropped/{reason}"
    assert crawler.stats.get_value(f"urltrap/redirect/{reason}") == 1


def test_a_limit_of_zero_lets_redirects_through() -> None:
    middleware, _ = _redirects(URLLENGTH_LIMIT=0, URLTRAP_MAX_SEGMENT_REPEATS=0)
    assert middleware.process_request(_redirect("http://h.test/" + "y/" * 2000)) is None


def test_the_addon_registers_both_in_either_mode_between_depth_and_url_length() -> None:
    for services in (SERVICES, {}):
        settings = Settings(services)
        DistributedAddon().update_settings(settings)
        assert settings.getdict("DOWNLOADER_MIDDLEWARES")[REDIRECTS] == 40
        assert settings.getdict("SPIDER_MIDDLEWARES")[LINKS] == 850
    crawler = get_crawler(_Spider, {"ADDONS": {DistributedAddon: 0}})
    order = [type(m).__name__ for m in SpiderMiddlewareManager.from_crawler(crawler).middlewares]
    assert order.index("UrlLengthMiddleware") < order.index("CanonicalLinksMiddleware") \
        < order.index("DepthMiddleware")  # output runs from the depth limit down: canonical
    # first, then the length of the canonical URL
    off = Settings({"SPIDER_MIDDLEWARES": {LINKS: None}})
    DistributedAddon().update_settings(off)
    assert off.getdict("SPIDER_MIDDLEWARES")[LINKS] is None  # a project's None wins


def test_a_dropped_link_counts_in_the_ledger_as_discarded() -> None:
    assert STAT_COUNTERS["urltrap/path_repeats"] == "discarded/path_repeats"
    counted: dict[str, int] = {}

    class Tally:
        def record(self, *_: Any) -> None: ...

        def count(self, name: str, n: int = 1) -> None:
            counted[name] = counted.get(name, 0) + n

    middleware, crawler = _links()
    output = [Request(f"http://h.test/{n}/x/x/x/x") for n in range(3)]
    assert list(middleware.process_spider_output(_page(), output)) == []
    Accounting(crawler, LeaseRegistry(lambda _: None), Tally()).stats_growth(
        crawler.stats.get_stats())
    assert counted == {"discarded/path_repeats": 3}


def test_a_seed_is_taken_in_the_crawls_canonical_form() -> None:
    submitted: list[str] = []

    class State:
        async def claim_seed(self, fingerprint: str, record: str) -> bool:
            return True

    class Stats:
        def inc_value(self, key: str) -> None: ...

    def submit(request: Request, *_: Any, **__: Any) -> bool:
        submitted.append(request.url)
        return True

    rules = CanonicalRules.from_settings(_crawler(CANONICAL_DROP_PARAMS=["ref"]).settings)

    async def main() -> None:
        claims = SeedClaims(spider=Spider("s"), fingerprint=lambda r: r.url.encode(),
                            state=State(), submit=submit,
                            stats=Stats(), finish=lambda _: None, dead=lambda *a: None, limit=2,
                            signer=SeedSigner(b"a seed key of 16+ bytes"), canonical_rules=rules)
        seeds = [b"http://A.test/p?ref=x&utm_source=y", b'{"url": "http://a.test/q?ref=1"}']
        for i, value in enumerate(seeds):
            coro = claims.take(Record("s", 0, i, value, 1), Lease("s", 0, i, 1))
            assert coro is not None
            await coro

    asyncio.run(main())
    assert submitted == ["http://a.test/p?utm_source=y", "http://a.test/q"]
