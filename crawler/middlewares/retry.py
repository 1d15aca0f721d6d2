"""Status-aware retries with exponential backoff, replacing Scrapy's RetryMiddleware.

``429`` and ``503`` wait what ``Retry-After`` says (capped by ``RETRY_AFTER_MAX``),
other 5xx, ``408`` and network errors (Playwright's too, for a page rendered in the
browser) back off exponentially with full jitter, other statuses are not retried;
``RETRY_STATUS_OVERRIDES`` changes any of that
(see :mod:`crawler.politeness.backoff`). Budgets depend on the class of failure:
``RETRY_LATER_TIMES`` for "come back later", ``RETRY_NETWORK_TIMES`` for network errors,
``RETRY_TIMES`` for the rest, all within ``RETRY_MAX_TIME`` per request. With the Kafka
frontier a retry waits in the worker's buffer under its request's lease
(:func:`crawler.frontier.delay.delayed`); with Scrapy's scheduler the middleware sleeps
on the event loop before returning it.

A request out of retries is recorded before it may end: a warning, stats, and a
document in ``<CRAWL_ID>.failures`` (:mod:`crawler.storage.failures`) when MongoDB is
configured. Enable it in place of Scrapy's::

    RETRY_BACKOFF_ENABLED = True
    DOWNLOADER_MIDDLEWARES = {
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
        "crawler.middlewares.retry.BackoffRetryMiddleware": 550,
    }
"""

from __future__ import annotations

import logging
import random
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit, urlunsplit

from scrapy import signals
from scrapy.downloadermiddlewares.retry import RetryMiddleware, get_retry_request
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    NotConfigured,
    ResponseDataLossError,
)
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message
from twisted.internet import defer
from twisted.internet import error as tx
from twisted.web.client import ResponseFailed

from crawler._scrapy import TunnelError
from crawler.browser.errors import network_category
from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.frontier.config import lease_timeout
from crawler.frontier.delay import delayed, scheduler_delays, sleep
from crawler.ledger import outcomes
from crawler.politeness.backoff import (
    Action,
    Budgets,
    Decision,
    Outcome,
    RetryConfig,
    RetryPolicy,
    retry_class,
    worst_case_delay,
)
from crawler.storage.failures import Failure, FailureStore

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)
# get_retry_request() logs the request's repr, whose URL may hold credentials: it gets a
# logger that never emits, and this module logs its own lines with the URL stripped.
_SILENT = logging.Logger(f"{__name__}.silent", logging.CRITICAL + 1)

_STOCK = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
CLASS_KEY = "retry_class_times"  # retries made per class (later, network, other)
STARTED_KEY = "retry_started"  # time.time() of the request's first failure
#: exception types per network error category, most specific first
_CATEGORIES: tuple[tuple[str, tuple[type[BaseException], ...]], ...] = (
    ("timeout", (DownloadTimeoutError, tx.TimeoutError, tx.TCPTimedOutError,
                 defer.TimeoutError, TimeoutError)),
    ("dns", (CannotResolveHostError, tx.DNSLookupError, socket.gaierror)),
    ("connection_refused", (DownloadConnectionRefusedError, tx.ConnectionRefusedError,
                            ConnectionRefusedError)),
    ("connection_lost", (ResponseDataLossError, DownloadFailedError, ResponseFailed,
                         tx.ConnectionClosed, ConnectionError)),
    ("connect_error", (tx.ConnectError, TunnelError)),
    ("io_error", (OSError,)),
)


def classify(exception: BaseException) -> str | None:
    """The network error category of *exception*, or None: not a network error. A page
    rendered in the browser fails with Playwright's errors: see
    :func:`crawler.browser.errors.network_category`."""
    for category, types in _CATEGORIES:
        if isinstance(exception, types):
            return category
    return network_category(exception)


def strip_userinfo(url: str) -> str:
    """Page *url* without ``user:password@``, safe to log and store in a failure record.

    For the URLs of crawled pages only: a service address is logged through
    :func:`crawler.config.readers.mask_url`, the one masking function."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class BackoffRetryMiddleware:
    """Retry failed downloads after status-aware, jittered delays; record final failures."""

    def __init__(
        self, *, crawler: Crawler, base: float, cap: float, retry_after_max: float,
        overrides: Mapping[Outcome, Action], max_retry_times: int, priority_adjust: int,
        delay_in_scheduler: bool, failures: FailureStore | None,
        rng: random.Random | None = None, budgets: Budgets | None = None,
        later_statuses: frozenset[int] | None = None,
    ) -> None:
        self.crawler = crawler
        self.policy = RetryPolicy(base=base, cap=cap, retry_after_max=retry_after_max,
                                  overrides=dict(overrides), rng=rng or random.Random())
        self.max_retry_times, self.priority_adjust = max_retry_times, priority_adjust
        self.budgets = budgets or Budgets(later=max_retry_times, network=max_retry_times,
                                          other=max_retry_times, max_time=float("inf"))
        self.later_statuses = later_statuses if later_statuses is not None else frozenset()
        self.delay_in_scheduler = delay_in_scheduler
        self.failures = failures

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        if not config.get_bool(s, "RETRY_BACKOFF_ENABLED"):
            raise NotConfigured("BackoffRetryMiddleware needs RETRY_BACKOFF_ENABLED=True")
        _check_stock_retry_disabled(s)
        cfg = RetryConfig.from_settings(s)
        middleware = cls(
            crawler=crawler, base=cfg.base, cap=cfg.cap, retry_after_max=cfg.retry_after_max,
            overrides=cfg.overrides, max_retry_times=cfg.max_retry_times,
            priority_adjust=cfg.priority_adjust, delay_in_scheduler=scheduler_delays(crawler),
            failures=FailureStore.from_crawler(crawler), budgets=cfg.budgets,
            later_statuses=cfg.later_statuses,
        )
        if middleware.delay_in_scheduler:
            middleware._check_lease_budget(s)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        if request.meta.get("dont_retry", False):
            return response
        retry_after = response.headers.get(b"Retry-After")
        retry = await self._retry(request, response.status, response_status_message(
            response.status), retry_after=retry_after, last_status=response.status)
        return retry or response

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        category = classify(exception)
        if category is None or request.meta.get("dont_retry", False):
            return None
        reason = f"{type(exception).__module__}.{type(exception).__qualname__}"
        return await self._retry(request, category, reason, last_status=None)

    async def spider_closed(self) -> None:
        if self.failures is not None:
            await self.failures.close()

    async def _retry(self, request: Request, outcome: Outcome, reason: str, *,
                     retry_after: bytes | None = None,
                     last_status: int | None) -> Request | None:
        """The delayed retry of *request*, or None once it is not retried (any more)."""
        attempt = int(request.meta.get("retry_times", 0))
        decision = self.policy.decide(outcome, attempt, retry_after=retry_after)
        if decision is None:
            return None
        kind = retry_class(outcome, retry_after=retry_after is not None,
                           later=self.later_statuses)
        used = dict(request.meta.get(CLASS_KEY) or {})
        started = float(request.meta.get(STARTED_KEY) or time.time())
        spent = self.budgets.spent(kind, used, time.time() - started + decision.delay,
                                   request.meta.get("max_retry_times"), attempt)
        if spent is not None:
            self.stats.inc_value("retry/max_reached")  # Scrapy's name for it
            self.stats.inc_value(f"retry/exhausted/{kind}")
            await self._give_up(request, reason, attempt + 1, last_status, spent)
            return None
        assert self.crawler.spider is not None
        retry = get_retry_request(
            request, spider=self.crawler.spider, reason=reason, max_retry_times=attempt + 1,
            priority_adjust=request.meta.get("priority_adjust", self.priority_adjust),
            logger=_SILENT, give_up_log_level=logging.DEBUG,
        )
        assert retry is not None  # max_retry_times allows one more: the budgets decided
        retry.meta[CLASS_KEY] = {**used, kind: int(used.get(kind, 0)) + 1}
        retry.meta[STARTED_KEY] = started
        self.stats.inc_value(f"retry/class/{kind}")
        return await self._delay(retry, decision, reason)

    async def _delay(self, retry: Request, decision: Decision, reason: str) -> Request:
        total = self.stats.get_value("retry/delay_seconds", 0.0) + decision.delay
        self.stats.set_value("retry/delay_seconds", total)  # inc_value() is typed int
        logger.debug("Retrying %s in %.2fs (%s, retry %d, %s)", strip_userinfo(retry.url),
                     decision.delay, reason, retry.meta["retry_times"], decision.source)
        if self.delay_in_scheduler:
            return delayed(retry, decision.delay)
        await sleep(decision.delay)
        return retry

    async def _give_up(self, request: Request, reason: str, attempts: int,
                       last_status: int | None, spent: str) -> None:
        url = strip_userinfo(request.url)
        self.stats.inc_value("retry/failed")
        outcomes.tell(self.crawler, request, outcomes.RETRIES_EXHAUSTED)
        logger.warning("Gave up on %s after %d attempts: %s (%s)", url, attempts, reason, spent)
        if self.failures is not None:
            fingerprint = self.crawler.request_fingerprinter.fingerprint(request).hex()
            await self.failures.record(Failure.now(
                fingerprint=fingerprint, url=url, reason=reason, attempts=attempts,
                last_status=last_status))

    @property
    def stats(self) -> StatsCollector:
        assert self.crawler.stats is not None
        return self.crawler.stats

    def _check_lease_budget(self, settings: BaseSettings) -> None:
        """Warn when one request's retries can outlast its frontier lease."""
        p, b = self.policy, self.budgets
        retries = b.later + b.network + b.other
        waits = min(worst_case_delay(retries, p.base, p.cap, p.retry_after_max), b.max_time)
        lease = lease_timeout(settings)
        if waits >= lease:
            logger.warning(
                "%d retries may wait up to %.0fs (RETRY_MAX_TIME, RETRY_BACKOFF_MAX, "
                "RETRY_AFTER_MAX), longer than KAFKA_LEASE_TIMEOUT=%.0fs: such a request's "
                "lease expires and it is re-queued while its retry still waits",
                retries, waits, lease)


def _check_stock_retry_disabled(settings: BaseSettings) -> None:
    """Both retry middlewares would share ``retry_times`` and retry without delays."""
    if not settings.getbool("RETRY_ENABLED"):
        return
    components = settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    for component in build_component_list(components):
        cls = load_object(component) if isinstance(component, str) else component
        if cls is RetryMiddleware:
            raise SettingError(
                "DOWNLOADER_MIDDLEWARES",
                f"RETRY_BACKOFF_ENABLED replaces {_STOCK}: set it to None in "
                "DOWNLOADER_MIDDLEWARES (or RETRY_ENABLED=False)")
