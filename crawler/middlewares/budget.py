"""``HOST_PAGE_BUDGET``: at most that many pages of one host in a crawl (0: no limit).

A downloader middleware at order 110, after robots.txt (100: a forbidden page costs nothing).
Each request counts once against its host (a Redis ``INCR`` of ``{<CRAWL_ID>}:budget:<host>``
for the whole cluster, a counter in memory in single-node mode); its retries, and its
redirects on the same host, carry the mark and count no more. A request past the budget is
dropped: the ledger's ``dropped/host_budget``, stat ``budget/dropped``. A worker killed after
counting a request but before its page was stored counts it again when the request comes
back: after a kill a host may get a page or two fewer than its budget, never more. Redis
failing holds the requests back in the frontier's buffer, uncounted (never lets them
through).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Self

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.connections import shared
from crawler.frontier.delay import delayed

logger = logging.getLogger(__name__)
COUNTED = "host_budget_counted"  # request meta: the host this request was counted against
KEEP = 30 * 86400  # seconds a host's count outlives its last page
RETRY = 1.0  # seconds a request waits in the buffer while Redis cannot count it
ERRORS = (RedisError, OSError, TimeoutError)


class OverBudget(IgnoreRequest):
    ledger_reason = "host_budget"


class HostBudgetMiddleware:
    def __init__(self, crawler: Crawler, budget: int, crawl_id: str, *, shared_: bool) -> None:
        self.crawler, self.budget, self.stats = crawler, budget, crawler.stats
        self.keys, self.shared = CrawlKeys(crawl_id), shared_
        self._redis: Any = None
        self._local: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._failing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        budget = config.get_int(s, "HOST_PAGE_BUDGET", minimum=0)
        if not budget:
            raise NotConfigured("HOST_PAGE_BUDGET is 0: no limit")
        middleware = cls(crawler, budget, config.crawl_id(s, crawler.spidercls.name),
                         shared_=bool(config.get_str(s, "REDIS_URL")))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    async def spider_opened(self) -> None:
        if self.shared:
            self._redis = shared.redis_for(self.crawler)

    async def spider_closed(self) -> None:
        if self._redis is not None:
            await shared.release_redis(self.crawler, self._redis)
            self._redis = None

    async def process_request(self, request: Request) -> Request | None:
        host = (urlparse_cached(request).hostname or "").lower()
        if request.meta.get(COUNTED) == host or request.meta.get("dont_obey_robotstxt"):
            return None  # counted already (a retry, a redirect on the host), or a robots.txt
        try:
            count = await self._count(host)
        except ERRORS as exc:  # Redis down: the request waits in the buffer, uncounted
            self.stats.inc_value("budget/redis_errors")
            if not self._failing:
                logger.warning("Cannot count pages against HOST_PAGE_BUDGET (requests wait): "
                               "%s", exc)
            self._failing = True
            return delayed(request, RETRY, dont_filter=True)
        self._failing = False
        request.meta[COUNTED] = host
        if count > self.budget:
            self.stats.inc_value("budget/dropped")
            if host not in self._warned:
                self._warned.add(host)
                logger.info("%s has used its budget of %d pages (HOST_PAGE_BUDGET): its "
                            "other requests are dropped", host, self.budget)
            raise OverBudget(f"{host} is over HOST_PAGE_BUDGET={self.budget}")
        return None

    async def _count(self, host: str) -> int:
        """The host's count with this request's."""
        if self._redis is None:
            self._local[host] += 1
            return self._local[host]
        key = self.keys.host_pages(host)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, KEEP)
            count, _ = await pipe.execute()
        return int(count)
