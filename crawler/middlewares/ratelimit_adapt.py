"""The response side of :class:`~crawler.middlewares.ratelimit.RateLimitMiddleware`: a 429 or
503 (``RATELIMIT_DECREASE_ON``) lowers the host's rate, or gives a host with none one
(``RATELIMIT_UNRATED_RATE``); a success counts towards its recovery; every answer feeds the
latency gap (``HOSTLIMIT_DELAY_FACTOR``). See ``docs/ratelimit.md``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from crawler.connections.retry import RedisRetry
from crawler.connections.tasks import Tasks
from crawler.frontier.delay import UNIT_FREED
from crawler.politeness.adapted import AdaptedHosts
from crawler.politeness.latency import LatencyDelays
from crawler.politeness.ratelimiter import Limiter, RateLimitConfig, normal_host
from crawler.politeness.tokenbucket import Limit
from crawler.politeness.unit import Unit

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)
_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
#: request meta: ``{"host", "taken", "lowered", "reserved", "due", "gap", "holder", "ended"}``
#: (JSON-safe); "holder": the slot of a gap's token, which holds the host until it ends
META_KEY = "ratelimit"


class AdaptiveResponses:
    """What the rate limiter learns from answers (a mix-in: the middleware holds the state)."""

    cfg: RateLimitConfig
    stats: Any
    limiter: Limiter | None
    adapted: AdaptedHosts | None
    feedback: RedisRetry
    latency: LatencyDelays
    unit: Unit
    host_delay: float

    crawler: Crawler
    _tasks: Tasks
    _refused: Callable[[], bool]  # whether Redis refused for good (closes the worker once)
    _limit: Callable[[str, float], Limit | None]  # a host's limit for its gap

    def _unit_of(self, request: Request) -> str:
        name = normal_host(urlparse_cached(request).hostname or "")
        return self.unit(name) if name else ""

    async def process_response(self, request: Request, response: Response) -> Response:
        ticket = request.meta.get(META_KEY)
        if self.latency.factor > 0:
            self.latency.observe(self._unit_of(request), request.meta.get("download_latency"))
        await self._ended(ticket)
        if self.cfg.adaptive is None or self.limiter is None:
            return response
        if not isinstance(ticket, dict):  # a host with no rate
            if response.status in self.cfg.decrease_on and self.adapted is not None:
                await self._adopt(self._unit_of(request), response.status)
            return response
        if response.status in self.cfg.decrease_on:
            self.stats.inc_value("ratelimit/slowdowns")
            await self._adapt(ticket, response.status)
        elif 200 <= response.status < 400 and ticket.get("lowered"):
            await self._adapt(ticket, None)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        await self._ended(request.meta.get(META_KEY))

    def left_downloader(self, request: Request) -> None:
        """Scrapy's ``request_left_downloader``: the answer (or the failure) came, before
        any middleware's ``process_response``; a redirect's copy no longer holds its host."""
        ending = self._release(request.meta.get(META_KEY))
        if ending is not None:
            self._tasks.spawn(self._send_end(*ending), "end a request's turn")

    async def _ended(self, ticket: object) -> None:
        ending = self._release(ticket)
        if ending is not None:
            await self._send_end(*ending)

    def _release(self, ticket: object) -> tuple[str, Limit, float | None] | None:
        """A request of a host with a gap ended (once: its *ticket* says so from now on): the
        host, its limit and the request's slot if it held the host."""
        if not isinstance(ticket, dict) or self.limiter is None or ticket.get("reserved") \
                or ticket.get("ended"):
            return None
        host, gap, holder = ticket.get("host"), ticket.get("gap"), ticket.get("holder")
        if not isinstance(host, str) or not isinstance(gap, (int, float)) or gap <= 0:
            return None
        limit = self._limit(host, gap)
        if limit is None:
            return None
        ticket["ended"] = True  # in place: the copies a retry or a redirect made share it
        return host, limit, holder if isinstance(holder, float) else None

    async def _send_end(self, host: str, limit: Limit, holder: float | None) -> None:
        """The host's next request goes a whole gap after this answer, not after this token
        (at the origin, tokens 0.535 s apart arrived as close as 0.30 s: the time from a token
        to the origin varies by up to 0.7 s under load); the first of its requests waiting
        in this worker's buffer goes then."""
        assert self.limiter is not None
        try:
            delay = await self.limiter.ended(host, limit, holder)
        except _ERRORS as exc:  # the next request keeps the token's spacing only
            self.stats.inc_value("ratelimit/redis_errors")
            self.feedback.failed(exc)
            self._refused()
            return
        self.crawler.signals.send_catch_log(UNIT_FREED, unit=host, delay=delay)

    async def _adopt(self, host: str, status: int) -> None:
        """*host*, with no rate, answered *status*: it gets one, lowered at once."""
        assert self.adapted is not None and self.limiter is not None
        if not host or self.adapted.limit(host) is not None:
            return  # a response to a request sent before it got its rate
        try:  # taken at 0: lowered once, by whichever worker comes first (not per answer)
            limit = await self.adapted.adopt(host)
            _changed, rate = await self.limiter.decrease(host, limit, 0.0)
        except _ERRORS as exc:  # the next 429 or 503 tries again
            self.stats.inc_value("ratelimit/redis_errors")
            self.feedback.failed(exc)
            return
        self.stats.inc_value("ratelimit/adopted")
        logger.info("Rate limit: %s (no rate) answered %d: it now has %.3g requests/s",
                    host, status, rate)

    async def _adapt(self, ticket: dict[str, Any], status: int | None) -> None:
        """Lower the host's rate after *status*, or count a success (*status* None)."""
        assert self.limiter is not None
        host, taken = ticket.get("host"), ticket.get("taken")
        if not isinstance(host, str) or not isinstance(taken, (int, float)):
            return
        gap = ticket.get("gap")
        gap = gap if isinstance(gap, (int, float)) else self.host_delay
        limit = self._limit(host, gap)
        if limit is None:
            return
        if status is not None and ticket.get("lowered") and self.cfg.limit(host, gap) is None:
            return  # an adopted rate is lowered once, to half RATELIMIT_UNRATED_RATE, no lower
        try:
            if status is not None:
                changed, rate = await self.limiter.decrease(host, limit, taken)
            else:
                changed, rate = await self.limiter.recover(host, limit)
        except _ERRORS as exc:  # a lost signal costs nothing but precision
            self.stats.inc_value("ratelimit/redis_errors")
            self.feedback.failed(exc)
            self._refused()
            return
        self.feedback.succeeded()
        if changed and status is not None:
            self.stats.inc_value("ratelimit/rate_decreased")
            logger.info("Rate limit: %s answered %d: its rate is now %.3g/s", host, status, rate)
        elif changed:
            self.stats.inc_value("ratelimit/rate_recovered")
            logger.debug("Rate limit: %s recovers: its rate is now %.3g/s", host, rate)
