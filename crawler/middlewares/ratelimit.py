"""``RateLimitMiddleware``: a per-host token bucket shared by the whole cluster.

Settings ``RATELIMIT_*``; the buckets and their maths are in :mod:`crawler.politeness.ratelimiter`
and :mod:`crawler.politeness.tokenbucket`. A request that must wait for its slot reserves it,
then either goes back to the Kafka frontier's buffer as a :func:`crawler.frontier.delay.delayed`
copy (the worker goes on with other hosts) or, with Scrapy's own scheduler, sleeps.

Redis errors follow :mod:`crawler.connections.redis_errors`: a transient one stalls the request (it
waits, or goes back to the buffer) and is retried with a backoff; a deterministic one
(``OOM``, ``NOPERM``, a script error) is logged once and closes the worker with reason
``redis_error``: the request goes back to the buffer, its lease unacknowledged.
See ``docs/ratelimit.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from crawler import _scrapy
from crawler.config import readers as config
from crawler.connections import clients as connection
from crawler.connections import shared
from crawler.connections.retry import RedisRetry, RetryStopped, retry
from crawler.connections.tasks import Tasks
from crawler.frontier.completion import REDIS_ERROR
from crawler.frontier.delay import (
    NOT_BEFORE_KEY,
    WAITS_FOR_KEY,
    delayed,
    scheduler_delays,
    sleep,
)
from crawler.middlewares.ratelimit_adapt import META_KEY, AdaptiveResponses
from crawler.middlewares.robots import ROBOTS_FETCH
from crawler.politeness.adapted import AdaptedHosts
from crawler.politeness.crawldelay import crawl_delays
from crawler.politeness.hostlimit import HostLimitConfig
from crawler.politeness.latency import LatencyDelays
from crawler.politeness.ratelimiter import (
    Grant,
    Limiter,
    LocalLimiter,
    RateLimitConfig,
    RedisLimiter,
    normal_host,
)
from crawler.politeness.tokenbucket import Limit
from crawler.politeness.unit import looked_up, politeness_unit

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_ON_TIME = 0.001  # seconds of wait not worth waiting for
HOLD_MARGIN = 5.0  # seconds a gap's token holds its host past the request's download timeout
_STALE = 300.0  # a reserved slot this far in the past is not honoured (a re-queued copy)
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


class _GiveBack(Exception):
    """A reservation failed: the request goes back to the buffer after *delay* seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.delay = delay


class RateLimitMiddleware(AdaptiveResponses):
    """Downloader middleware (order 560: its ``process_request`` runs before the proxy pool
    (610) and Scrapy's stats (850) count a request it sends back to wait; its
    ``process_response`` sees a 429 or 503 before the retry middleware at 550 turns it into a
    retry). ``RATELIMIT_ENABLED``."""

    def __init__(self, crawler: Crawler, cfg: RateLimitConfig, *, delays: bool,
                 host_delay: float = 0.0) -> None:
        """*host_delay*: ``HOSTLIMIT_DELAY`` (``DOWNLOAD_DELAY``), every host's least gap."""
        self.crawler, self.cfg, self.delays, self.host_delay = crawler, cfg, delays, host_delay
        self.stats = crawler.stats
        self.limiter: Limiter | None = None
        self._opened = asyncio.Event()
        self.retry = RedisRetry("rate limit", base=cfg.backoff, cap=cfg.backoff_max)
        self.feedback = RedisRetry("rate limit feedback (adaptive updates are skipped)",
                                   base=cfg.backoff, cap=cfg.backoff_max)
        self._fatal: str | None = None  # the error line, once Redis refused for good
        self._closer: asyncio.Future[Any] | None = None
        self._tasks = Tasks("rate limit")
        self._warned: set[str] = set()
        self.crawl_delays = crawl_delays(crawler)  # host -> its robots.txt Crawl-delay
        self.unit = politeness_unit(crawler.settings)
        self.latency = LatencyDelays.from_settings(crawler.settings)  # HOSTLIMIT_DELAY_FACTOR
        self.adapted: AdaptedHosts | None = None  # rate-less hosts that answered 429/503
        self.download_timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not config.get_bool(crawler.settings, "RATELIMIT_ENABLED"):
            raise NotConfigured("RATELIMIT_ENABLED is off")
        cfg = RateLimitConfig.from_settings(crawler.settings, crawler.spidercls.name)
        hosts = HostLimitConfig.from_settings(crawler.settings)
        middleware = cls(crawler, cfg, delays=scheduler_delays(crawler),
                         host_delay=hosts.delay if hosts.enabled else 0.0)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(middleware.left_downloader,
                                signal=signals.request_left_downloader)
        return middleware

    async def spider_opened(self) -> None:
        if not self.cfg.redis_url:
            self.limiter = LocalLimiter(self.cfg)
        else:
            client = shared.redis_for(self.crawler)
            try:
                await connection.check_redis(client, self.cfg.redis_url)
            except connection.ServiceUnavailable as exc:
                await shared.release_redis(self.crawler, client)
                logger.error("Rate limit: %s", exc)
                raise CloseSpider("ratelimit_redis_unavailable") from exc
            self.limiter = RedisLimiter(client, self.cfg.crawl_id, self.cfg,
                                        release=partial(shared.release_redis, self.crawler))
        if self.cfg.adaptive is not None and self.cfg.unrated_rate > 0:  # else none is adopted
            self.adapted = AdaptedHosts(getattr(self.limiter, "client", None),
                                        self.cfg.crawl_id, self.cfg.unrated_rate,
                                        self.cfg.state_ttl)
            self._tasks.spawn(self.adapted.run(), "read the adapted hosts")
        self._opened.set()
        self._announce()

    def _announce(self) -> None:
        logger.info("Rate limit: %s, %s; waiting requests %s", self.cfg.summary(),
                    "shared in Redis" if self.cfg.redis_url else "in memory",
                    "go back to the frontier's buffer" if self.delays else "sleep")

    async def spider_closed(self) -> None:
        await self._tasks.close()
        if self.limiter is not None:
            await self.limiter.close()

    # -- requests -----------------------------------------------------------
    async def process_request(self, request: Request) -> Request | None:
        name = normal_host(urlparse_cached(request).hostname or "")
        if not name:
            return None
        await looked_up(self.unit, name)  # POLITENESS_UNIT=ip: the name's address first
        host = self.unit(name)  # what the bucket counts: POLITENESS_UNIT
        gap = max(self.crawl_delays.get(name, 0.0), self.host_delay, self.latency.gap(host))
        limit = self._limit(host, gap)
        if limit is None:  # no rate for this host: nothing to reserve
            return None
        await self._opened.wait()
        if await self._holding(request, host) or await self._redeem(request, host):
            return None
        # a delay's gap (Crawl-delay, DOWNLOAD_DELAY) is kept at the origin: its token is taken
        # when the request goes out, never reserved ahead (a reserved slot's request came back
        # from the buffer up to 21 ms late, and the next one, on time, came 0.979 s after it)
        max_wait = _ON_TIME if gap > 0 else self.cfg.max_wait
        return await self._acquire(request, host, limit, max_wait, gap)

    async def _holding(self, request: Request, host: str) -> bool:
        """Whether *request* holds *host* already: its token's request came back before it
        reached the downloader (a later middleware sent it back to wait), so it goes on the
        token it has. One that holds another host lets that one go first."""
        ticket = request.meta.get(META_KEY)
        if not isinstance(ticket, dict):
            return False
        holder = ticket.get("holder")
        if not isinstance(holder, float) or ticket.get("ended"):
            return False
        if time.time() - holder > self._hold(request):  # a copy from before a re-queue
            return False
        if ticket.get("host") == host:
            return True
        await self._ended(ticket)
        return False

    async def _redeem(self, request: Request, host: str) -> bool:
        """Whether *request* is a delayed copy back at the slot it reserved (waits if early)."""
        ticket = request.meta.get(META_KEY)
        if not (isinstance(ticket, dict) and ticket.get("reserved") and ticket.get("host") == host):
            return False
        due = ticket.get("due")
        if not isinstance(due, (int, float)) or due - time.time() < -_STALE:
            return False
        early = due - time.time()
        request.meta[META_KEY] = {**ticket, "reserved": False}
        self.stats.inc_value("ratelimit/redeemed")
        if early > _ON_TIME:  # downloaded without the scheduler's help (engine.download)
            await sleep(early)
        return True

    async def _acquire(self, request: Request, host: str, limit: Limit,
                       max_wait: float, gap: float) -> Request | None:
        hold = self._hold(request) if gap > 0 else 0.0
        while True:
            try:
                grant = await retry(lambda: self._reserve(host, limit, max_wait, hold),
                                    errors=_ERRORS,
                                    on_retry=self._reserve_failed, stop=self._refused,
                                    sleep=sleep)
            except RetryStopped:  # closing: the request waits in the buffer, unacknowledged
                return delayed(request, self.cfg.backoff_max, dont_filter=True)
            except _GiveBack as back:
                return delayed(request, back.delay, dont_filter=True)
            self.retry.succeeded()
            self._note(host, grant)
            request.meta[META_KEY] = {"host": host, "taken": grant.now, "reserved": False,
                                      "lowered": grant.rate < grant.configured, "gap": gap}
            if grant.reserved:
                if hold:  # its slot, which holds the host until this request ends
                    request.meta[META_KEY]["holder"] = grant.now + grant.wait
                return await self._wait(request, grant.wait)
            self.stats.inc_value("ratelimit/deferred")  # past RATELIMIT_MAX_WAIT
            # a held host's next slot is unknown until its request ends: ask again a gap on
            # (sooner if it ends in this worker: its first waiting request is told)
            wait = min(grant.wait - max_wait, 1 / grant.rate) if hold else grant.wait - max_wait
            if self.delays and not request.meta.get(ROBOTS_FETCH):  # engine.download: sleep
                copy = delayed(request, wait, dont_filter=True)
                copy.meta[WAITS_FOR_KEY] = host
                return copy
            await sleep(wait)

    async def _reserve(self, host: str, limit: Limit, max_wait: float, hold: float) -> Grant:
        assert self.limiter is not None
        return await self.limiter.reserve(host, limit, max_wait, hold)

    def _hold(self, request: Request) -> float:
        """Seconds a gap's token holds its host at most: the request's download timeout and
        a margin (a worker killed mid-request frees the host then)."""
        timeout = request.meta.get("download_timeout")
        timeout = timeout if isinstance(timeout, (int, float)) else self.download_timeout
        return max(float(timeout), self.download_timeout) + HOLD_MARGIN

    def _reserve_failed(self, exc: Exception, _attempt: int, _delay: float) -> float:
        """Count a failed reservation; the request goes back to the buffer unless it sleeps."""
        self.stats.inc_value("ratelimit/redis_errors")
        delay = self.retry.failed(exc)
        if self.delays or not self._running() or self._refused():
            raise _GiveBack(delay)
        return delay

    async def _wait(self, request: Request, wait: float) -> Request | None:
        self.stats.inc_value("ratelimit/granted")
        if wait <= _ON_TIME:
            return None
        self.stats.inc_value("ratelimit/waits")
        self.stats.set_value("ratelimit/wait_seconds",
                             self.stats.get_value("ratelimit/wait_seconds", 0.0) + wait)
        if not self.delays:
            await sleep(wait)
            return None
        copy = delayed(request, wait, dont_filter=True)
        copy.meta[META_KEY] = {**copy.meta[META_KEY], "reserved": True,
                               "due": copy.meta[NOT_BEFORE_KEY]}
        return copy

    def _note(self, host: str, grant: Grant) -> None:
        if grant.bad_override:
            self.stats.inc_value("ratelimit/bad_overrides")
            if host not in self._warned:
                self._warned.add(host)
                logger.warning("Rate limit: the live override of %s in %s is not JSON "
                               "{\"rate\": >0, \"burst\": >=1}: ignoring what is wrong in it",
                               host, getattr(self.limiter, "overrides_key", "Redis"))

    def _refused(self) -> bool:
        """Whether Redis refused a rate-limit call for good; closes the worker once."""
        if self._fatal is not None:
            return True
        self._fatal = self.retry.fatal or self.feedback.fatal
        if self._fatal is None:
            return False
        try:
            closing = _scrapy.close_spider(self.crawler, REDIS_ERROR)
        except RuntimeError:  # no engine (yet): nothing to close
            return True
        logger.info("Closing: Redis refuses the rate limit: %s", self._fatal)
        self._closer = self._tasks.spawn(_awaited(closing), "close the worker")
        return True

    def _running(self) -> bool:
        return _scrapy.engine_running(self.crawler)

    def _limit(self, host: str, gap: float) -> Limit | None:
        limit = self.cfg.limit(host, gap)
        if limit is None and self.adapted is not None:
            return self.adapted.limit(host)  # no rate, but it answered 429 or 503
        return limit



async def _awaited(future: asyncio.Future[None]) -> None:
    await future
