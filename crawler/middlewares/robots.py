"""robots.txt for the whole cluster, by RFC 9309 (``docs/robots.md``).

Replaces Scrapy's ``RobotsTxtMiddleware`` (same ``ROBOTSTXT_OBEY``, ``ROBOTSTXT_PARSER`` and
``ROBOTSTXT_USER_AGENT``). Each origin's robots.txt is fetched once for the whole crawl and
its verdict shared in Redis (:mod:`crawler.robots`); a 5xx, a 429 or a network error
disallows the host until the verdict expires, and its requests wait for it in the frontier's
buffer, unacknowledged. A ``Crawl-delay`` (up to ``ROBOTSTXT_CRAWL_DELAY_MAX``) becomes the
host's cluster-wide rate (:mod:`crawler.politeness.crawldelay`).

A request of an origin with no verdict yet waits up to :data:`INLINE_WAIT` for it here, then
goes back to the buffer (the worker goes on with other hosts); with Scrapy's own scheduler
(single-node mode) it waits here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Self

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object

from crawler import _scrapy
from crawler.config import readers as config
from crawler.config.keys import worker_id
from crawler.connections import shared
from crawler.frontier.delay import delayed, scheduler_delays, sleep
from crawler.middlewares.sitemaps import sitemap_requests
from crawler.politeness.crawldelay import crawl_delays
from crawler.robots import (
    GONE,
    RULES,
    UNREACHABLE,
    Known,
    MemoryRobotsStore,
    RedisRobotsStore,
    RobotsBook,
    RobotsPolicy,
    Verdict,
    allowed_after_refusal,
    claim_seconds,
    of_status,
    robots_policy,
    unreachable,
)

logger = logging.getLogger(__name__)
INLINE_WAIT = 1.0  # seconds a request waits here for its origin's verdict before going back
PRIORITY = 1000  # of a robots.txt download (Scrapy's)
DEFAULT_PORTS = {"http": 80, "https": 443}
ROBOTS_FETCH = "robotstxt_fetch"  # request meta: this is a robots.txt download


class RobotsUnreachable(IgnoreRequest):
    """The host's robots.txt was unreachable ``ROBOTSTXT_RETRIES`` times in a row."""

    ledger_reason = "robots_unreachable"


def origin_of(request: Request) -> str:
    """``scheme://host:port`` of *request*: what one robots.txt covers."""
    url = urlparse_cached(request)
    port = url.port or DEFAULT_PORTS.get(url.scheme, 0)
    host = (url.hostname or "").lower()
    return f"{url.scheme}://{f'[{host}]' if ':' in host else host}:{port}"


class ClusterRobotsTxtMiddleware:
    """Downloader middleware at order 100 (Scrapy's robots.txt middleware's place)."""

    def __init__(self, crawler: Crawler, policy: RobotsPolicy, *, delays: bool,
                 claim: float, agent: str) -> None:
        self.crawler, self.policy, self.delays, self.agent = crawler, policy, delays, agent
        self.claim, self.stats = claim, crawler.stats
        self.sitemaps = config.get_bool(crawler.settings, "SITEMAP_DISCOVERY")
        self.parser_class = load_object(crawler.settings.get("ROBOTSTXT_PARSER"))
        self.book: RobotsBook | None = None
        self._opened = asyncio.Event()
        self._redis: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        if not s.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured("ROBOTSTXT_OBEY is off")
        agent = s.get("ROBOTSTXT_USER_AGENT") or s.get("USER_AGENT") or "*"
        middleware = cls(crawler, robots_policy(s), delays=scheduler_delays(crawler),
                         claim=claim_seconds(s), agent=str(agent))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    async def spider_opened(self) -> None:
        s = self.crawler.settings
        if config.get_str(s, "REDIS_URL"):
            self._redis = shared.redis_for(self.crawler)
            crawl = config.crawl_id(s, self.crawler.spidercls.name)
            store: Any = RedisRobotsStore(self._redis, crawl)
        else:
            store = MemoryRobotsStore()
        self.book = RobotsBook(store, self._fetch, parse=self._parse, worker=worker_id(),
                               claim_seconds=self.claim, on_known=self._learned,
                               stats=self.stats)
        self._opened.set()

    async def spider_closed(self) -> None:
        if self.book is not None:
            self.book.close()
        if self._redis is not None:
            await shared.release_redis(self.crawler, self._redis)
            self._redis = None

    # -- requests -----------------------------------------------------------
    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get("dont_obey_robotstxt"):
            return None
        if urlparse_cached(request).scheme not in DEFAULT_PORTS:
            return None
        await self._opened.wait()
        assert self.book is not None
        origin = origin_of(request)
        known = self.book.known(origin)
        if known is None:
            task = self.book.resolve(origin)
            try:
                known = await asyncio.wait_for(asyncio.shield(task),
                                               INLINE_WAIT if self.delays else None)
            except TimeoutError:
                self.stats.inc_value("robotstxt/waited")
                return delayed(request, INLINE_WAIT, dont_filter=True)
        return await self._apply(request, known)

    async def _apply(self, request: Request, known: Known) -> Request | None:
        verdict = known.verdict
        if verdict.kind == RULES and not known.parser.allowed(request.url, self._agent(request)):
            logger.debug("Forbidden by robots.txt: %s", request)
            self.stats.inc_value("robotstxt/forbidden")
            raise IgnoreRequest("Forbidden by robots.txt")
        if verdict.kind == GONE:
            self.stats.inc_value("robotstxt/unreachable_dropped")
            raise RobotsUnreachable(f"robots.txt unreachable ({verdict.reason}, "
                                    f"{verdict.failures} times)")
        if verdict.kind == UNREACHABLE:
            self.stats.inc_value("robotstxt/held")
            wait = max(verdict.expires - time.time(), 0.0) + 0.05
            if self.delays:
                return delayed(request, wait, dont_filter=True)
            await sleep(wait)
            return await self.process_request(request)
        return None

    def _agent(self, request: Request) -> str | bytes:
        if self.crawler.settings.get("ROBOTSTXT_USER_AGENT"):
            return self.agent
        return request.headers.get(b"User-Agent") or self.agent

    # -- robots.txt ---------------------------------------------------------
    async def _fetch(self, origin: str, previous: Verdict | None) -> Verdict:
        """Download *origin*'s robots.txt (this worker holds the claim) and judge it."""
        meta = {"dont_obey_robotstxt": True, "redirect_ttl": self.policy.max_redirects,
                "max_retry_times": 1, ROBOTS_FETCH: True}
        request = Request(origin + "/robots.txt", priority=PRIORITY, meta=meta,
                          callback=NO_CALLBACK, dont_filter=True)
        self.stats.inc_value("robotstxt/request_count")
        try:
            response = await _scrapy.download(self.crawler, request)
        except IgnoreRequest as exc:  # a guard, the redirect limit: the pages meet the same
            verdict = allowed_after_refusal(f"refused: {exc}", self.policy, time.time())
        except Exception as exc:
            verdict = unreachable(0, f"{type(exc).__name__}: {exc}", self.policy,
                                  time.time(), previous)
        else:
            self.stats.inc_value(f"robotstxt/response_status_count/{response.status}")
            verdict = of_status(response.status, response.body, self.policy, time.time(),
                                previous)
        self.stats.inc_value(f"robotstxt/verdict/{verdict.kind}")
        if verdict.kind == RULES and self.sitemaps:
            self._discover(origin, verdict.body)
        if verdict.kind in (UNREACHABLE, GONE):
            logger.warning("robots.txt of %s: %s (%s): %s", origin, verdict.reason,
                           verdict.kind, "its requests wait" if verdict.kind == UNREACHABLE
                           else "its requests are dropped")
        return verdict

    def _discover(self, origin: str, body: str) -> None:
        """Schedule its ``Sitemap:`` URLs (this worker fetched it for the cluster)."""
        for request in sitemap_requests(body, origin):
            self.stats.inc_value("sitemap/discovered")
            _scrapy.schedule(self.crawler, request)

    def _parse(self, body: str) -> Any:
        return build_from_crawler(self.parser_class, self.crawler, body.encode("utf-8"))

    def _learned(self, origin: str, known: Known) -> None:
        """A verdict arrived: the host's Crawl-delay, capped, becomes its rate."""
        host = origin.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
        delays = crawl_delays(self.crawler)
        delay = known.parser.crawl_delay(self.agent) if known.parser is not None else None
        if delay and self.policy.crawl_delay_max > 0:
            delays[host] = min(float(delay), self.policy.crawl_delay_max)
        else:
            delays.pop(host, None)
