"""robots.txt by RFC 9309, one fetch per origin for every worker sharing a store: the verdict
of each answer, the single flight, and what the middleware does with each verdict."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from crawler.frontier.delay import not_before
from crawler.ledger import outcomes
from crawler.middlewares.robots import ClusterRobotsTxtMiddleware, RobotsUnreachable, origin_of
from crawler.politeness.crawldelay import crawl_delays
from crawler.politeness.ratelimiter import RateLimitConfig
from crawler.politeness.tokenbucket import Limit
from crawler.robots import (
    ALLOW,
    GONE,
    RULES,
    UNREACHABLE,
    MemoryRobotsStore,
    RobotsBook,
    RobotsPolicy,
    Verdict,
    of_status,
)

POLICY = RobotsPolicy(ttl=86400, retry_after=30, retries=3, max_size=512000, max_redirects=5,
                      crawl_delay_max=30)


@pytest.mark.parametrize(("status", "kind"), [
    (200, RULES), (204, RULES), (400, ALLOW), (401, ALLOW), (403, ALLOW), (404, ALLOW),
    (410, ALLOW), (429, UNREACHABLE), (500, UNREACHABLE), (503, UNREACHABLE),
    (599, UNREACHABLE), (302, UNREACHABLE)])
def test_each_status_gets_the_verdict_rfc_9309_gives_it(status: int, kind: str) -> None:
    verdict = of_status(status, b"User-agent: *\nDisallow: /\n", POLICY, 1000.0, None)
    assert verdict.kind == kind
    assert verdict.expires == 1000.0 + (30 if kind == UNREACHABLE else 86400)


def test_unreachable_in_a_row_until_given_up_then_a_success_starts_over() -> None:
    kinds, previous = [], None
    for _ in range(4):
        previous = of_status(503, b"", POLICY, 0.0, previous)
        kinds.append((previous.kind, previous.failures))
    assert kinds == [(UNREACHABLE, 1), (UNREACHABLE, 2), (GONE, 3), (UNREACHABLE, 1)]
    assert of_status(200, b"", POLICY, 0.0, previous).failures == 0


def test_a_body_past_the_size_bound_is_cut_at_a_line_end() -> None:
    line = b"Disallow: /private/\n"
    body = line * (600 * 1024 // len(line))
    verdict = of_status(200, body, POLICY, 0.0, None)
    assert 500 * 1024 <= len(verdict.body) <= 512000
    assert verdict.body.endswith("\n") and verdict.body.count("Disallow") * len(line) == len(
        verdict.body)


def test_a_verdict_survives_json_and_a_foreign_value_is_none() -> None:
    verdict = Verdict(RULES, 200, "HTTP 200", "Disallow: /x", 0, 5.0)
    assert Verdict.from_json(verdict.to_json()) == verdict
    assert Verdict.from_json(b'{"kind": "maybe"}') is None
    assert Verdict.from_json(b"not json") is None


def test_workers_sharing_a_store_fetch_each_origin_once() -> None:
    fetched: list[str] = []

    async def fetch(origin: str, _previous: Verdict | None) -> Verdict:
        fetched.append(origin)
        await asyncio.sleep(0.3)
        return of_status(200, b"User-agent: *\nDisallow: /p/\n", POLICY, 2e9, None)

    async def main() -> list[str]:
        store = MemoryRobotsStore()
        books = [RobotsBook(store, fetch, parse=str, worker=f"w{i}", claim_seconds=30,
                            on_known=lambda *_: None) for i in range(3)]
        origins = ["http://a:80", "http://b:80"]
        known = await asyncio.gather(*(b.resolve(o) for b in books for o in origins
                                       for _ in range(3)))
        return sorted({k.verdict.kind for k in known}) + sorted(fetched)

    assert asyncio.run(main()) == [RULES, "http://a:80", "http://b:80"]


def test_a_claim_won_just_after_a_peer_stored_its_verdict_fetches_nothing() -> None:
    """The race the broad-crawl benchmark found: this worker read no verdict, a peer stored
    its verdict and freed its claim, then this worker's claim won. Without the second read
    it fetched robots.txt again (0 to 4 hosts a run)."""
    stored = of_status(200, b"User-agent: *\nDisallow: /p/\n", POLICY, 2e9, None)
    fetched: list[str] = []

    class Racing(MemoryRobotsStore):
        async def claim(self, origin: str, worker: str, seconds: float) -> bool:
            await self.put(origin, stored, "peer")  # the peer's put lands first
            return await super().claim(origin, worker, seconds)

    async def fetch(origin: str, _previous: Verdict | None) -> Verdict:
        fetched.append(origin)
        return stored

    async def main() -> Any:
        book = RobotsBook(Racing(), fetch, parse=str, worker="w", claim_seconds=30,
                          on_known=lambda *_: None)
        return await book.resolve("http://a:80")

    assert asyncio.run(main()).verdict == stored and fetched == []


class _Spider(Spider):
    name = "robots"


class _Engine:
    """Answers robots.txt with *answer*: a (status, body) or an exception to raise."""

    def __init__(self, answer: tuple[int, bytes] | BaseException) -> None:
        self.answer, self.requests = answer, 0

    async def download_async(self, request: Request) -> Response:
        self.requests += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        status, body = self.answer
        return Response(request.url, status=status, body=body, request=request)


def _outcome(answer: tuple[int, bytes] | BaseException, url: str = "http://a.test/p/1",
             **settings: Any) -> tuple[Any, Any]:
    """What the middleware does with a request once its origin's robots.txt gave *answer*:
    (the outcome, the crawler)."""
    crawler = get_crawler(_Spider, {"ROBOTSTXT_OBEY": True, "USER_AGENT": "fleet",
                                    "SCHEDULER": "crawler.frontier.scheduler.KafkaScheduler",
                                    **settings})
    crawler.spider = crawler._create_spider()
    crawler.engine = _Engine(answer)  # type: ignore[assignment]
    middleware = ClusterRobotsTxtMiddleware.from_crawler(crawler)

    async def run() -> Any:
        await middleware.spider_opened()
        try:
            return await middleware.process_request(Request(url))
        except IgnoreRequest as exc:
            return exc
    return asyncio.run(run()), crawler


def test_a_disallowed_page_is_ignored_as_robots_and_an_allowed_one_goes() -> None:
    body = b"User-agent: *\nDisallow: /p/\n"
    ignored, _ = _outcome((200, body))
    assert isinstance(ignored, IgnoreRequest)
    assert outcomes.of_exception(ignored) == "dropped/robots"
    assert _outcome((200, body), url="http://a.test/q")[0] is None


@pytest.mark.parametrize("answer", [(404, b"User-agent: *\nDisallow: /\n"), (403, b""),
                                    IgnoreRequest("max redirections reached")])
def test_no_rules_allow_everything(answer: Any) -> None:
    assert _outcome(answer)[0] is None


@pytest.mark.parametrize("answer", [(503, b""), (500, b""), (429, b""),
                                    ConnectionRefusedError("refused"), TimeoutError()])
def test_an_unreachable_robots_txt_sends_the_request_back_until_its_retry(answer: Any) -> None:
    back, _ = _outcome(answer)
    assert isinstance(back, Request)
    due = not_before(back)
    assert due is not None
    assert 29 < due - time.time() <= 31


def test_a_host_unreachable_too_often_is_dropped_with_its_reason() -> None:
    dropped, _ = _outcome((503, b""), ROBOTSTXT_RETRIES=1)
    assert isinstance(dropped, RobotsUnreachable)
    assert outcomes.of_exception(dropped) == "dropped/robots_unreachable"


@pytest.mark.parametrize(("delay", "cap", "expected"), [
    ("2", 30, 2.0), ("100", 30, 30.0), ("2", 0, None), (None, 30, None)])
def test_a_crawl_delay_becomes_the_hosts_rate_up_to_the_cap(delay: str | None, cap: float,
                                                            expected: float | None) -> None:
    body = b"User-agent: *\n" + (f"Crawl-delay: {delay}\n".encode() if delay else b"")
    _, crawler = _outcome((200, body), ROBOTSTXT_CRAWL_DELAY_MAX=cap)
    assert crawl_delays(crawler).get("a.test") == expected


def test_the_rate_limit_of_a_host_with_a_crawl_delay_is_one_per_delay_with_no_burst() -> None:
    crawler = get_crawler(_Spider, {"RATELIMIT_DOMAINS": {"b.test": {"rate": 0.1}}})
    cfg = RateLimitConfig.from_settings(crawler.settings, "robots")
    assert cfg.limit("a.test") is None
    assert cfg.limit("a.test", 2.0) == Limit(1 / 2.08, 1.0)  # a gap kept 3 % and 20 ms wide
    assert cfg.limit("b.test", 2.0) == Limit(0.1, 1.0)  # the stricter of the two


def test_origin_is_scheme_host_and_port() -> None:
    assert origin_of(Request("https://A.test/x")) == "https://a.test:443"
    assert origin_of(Request("http://a.test:8080/x")) == "http://a.test:8080"
    assert origin_of(Request("http://[::1]:8080/x")) == "http://[::1]:8080"
    assert Request(origin_of(Request("http://[::1]/x")) + "/robots.txt").url == (
        "http://[::1]:80/robots.txt")
