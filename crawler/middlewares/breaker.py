"""``HostBreakerMiddleware``: a host that stops answering is paused, then probed.

The rule is :mod:`crawler.politeness.breaker`'s (``HOSTBREAKER_*``). A downloader middleware at
order 555: its ``process_request`` runs after the retry middleware's (550) and before the rate
limiter takes a token (560); its ``process_exception`` hears a network error before the retry
middleware turns it into a retry. A request of an open host is never dropped: it goes back to
the Kafka frontier's buffer (with Scrapy's own scheduler, it sleeps) and keeps its lease.
robots.txt fetches pass (their own retry rule is in :mod:`crawler.robots`). A host open for
``HOSTBREAKER_GIVE_UP`` seconds has its requests dropped (``dropped/host_down``). See
``docs/politeness.md``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from crawler.frontier.delay import delayed, scheduler_delays, sleep
from crawler.middlewares.retry import classify
from crawler.middlewares.robots import ROBOTS_FETCH
from crawler.politeness.breaker import BreakerConfig, Breakers
from crawler.politeness.unit import politeness_unit

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class HostDown(IgnoreRequest):
    ledger_reason = "host_down"


class HostBreakerMiddleware:
    def __init__(self, crawler: Crawler, cfg: BreakerConfig, *, delays: bool) -> None:
        self.stats, self.delays = crawler.stats, delays
        self.breakers = Breakers(cfg)
        self.unit = politeness_unit(crawler.settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        cfg = BreakerConfig.from_settings(crawler.settings)
        if cfg.failures <= 0:
            raise NotConfigured("HOSTBREAKER_FAILURES is 0")
        return cls(crawler, cfg, delays=scheduler_delays(crawler))

    def _host(self, request: Request) -> str:
        return self.unit(urlparse_cached(request).hostname or "")

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get(ROBOTS_FETCH):
            return None  # robots.txt has its own rule for a host that does not answer
        host = self._host(request)
        if self.breakers.gone(host):
            self.stats.inc_value("breaker/dropped")
            raise HostDown(f"{host} has not answered for {self.breakers.cfg.give_up:g} s")
        wait = self.breakers.wait(host)
        if wait <= 0:
            return None
        self.stats.inc_value("breaker/delayed")
        if self.delays:
            return delayed(request, wait, dont_filter=True)
        await sleep(wait)
        return None

    def process_response(self, request: Request, response: Response) -> Response:
        host = self._host(request)
        if self.breakers.answered(host):
            self.stats.inc_value("breaker/closed")
            logger.info("Host breaker: %s answered again (%d): closed", host, response.status)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        category = classify(exception)
        if category is None:
            return None
        host = self._host(request)
        if self.breakers.failed(host):
            self.stats.inc_value("breaker/opened")
            logger.warning("Host breaker: %s failed %d times in a row without an answer "
                           "(last: %s): its requests wait, then one probes it", host,
                           self.breakers.cfg.failures, category)
        return None
