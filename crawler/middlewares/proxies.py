"""Rotate requests over a scored proxy pool whose health every worker shares.

Runs before Scrapy's ``HttpProxyMiddleware`` (750), which turns the chosen proxy's
credentials into a ``Proxy-Authorization`` header: ``DOWNLOADER_MIDDLEWARES =
{"crawler.middlewares.proxies.ProxyPoolMiddleware": 610}`` and ``PROXY_ENABLED =
True``. Each request gets a proxy picked by score and that proxy's download slot. What comes
back is blamed on the proxy or on the origin (:mod:`crawler.politeness.blame`): a
request failed by its proxy comes back at once as a copy for another proxy, under its
frontier lease, on the proxy budget (``PROXY_RETRIES``); the origin's failures go on to
the retry middleware and never lower a proxy's score. Dead proxies get no requests: they
are probed in the background (:mod:`crawler.politeness.probe`). See ``docs/proxies.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Self

from scrapy import signals
from scrapy.exceptions import CloseSpider, IgnoreRequest, NotConfigured
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import build_from_crawler

from crawler._scrapy import AUTH_PROXY_META
from crawler.config import readers as config
from crawler.config.readers import SettingError, mask_url
from crawler.connections.clients import ServiceUnavailable
from crawler.connections.retry import RedisRetry
from crawler.connections.tasks import Tasks, every
from crawler.frontier.delay import delayed, scheduler_delays, sleep
from crawler.politeness.banpolicy import SpiderPolicy
from crawler.politeness.blame import Blame, Cause, Verdict, host_of
from crawler.politeness.probe import Prober, connect_target
from crawler.politeness.proxyconfig import ProxyConfig
from crawler.politeness.proxypool import Outcome, Proxy, State
from crawler.politeness.proxystore import ProxyStore

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

ID_KEY = "proxy_pool_id"  # credential-free id of the proxy of this attempt ("" = direct)
TRIES_KEY = "proxy_pool_retries"  # re-issues of this request through another proxy
AVOID_KEY = "proxy_pool_avoid"  # ids that failed this request
_START_KEY = "proxy_pool_start"
_OWN_SLOT = "proxy_pool_own_slot"
_AUTH = b"Proxy-Authorization"
_HTTPPROXY = "scrapy.downloadermiddlewares.httpproxy.HttpProxyMiddleware"
_ATTEMPT_META = ("proxy", AUTH_PROXY_META, "download_slot", "download_latency", _START_KEY)
ALERT_EVERY = 30.0  # seconds between two "no usable proxy" warnings
HOST_STATS = 1000  # hosts with stats of their own; later ones count under "proxy/host/other"


class ProxyPoolMiddleware:
    """Pick a proxy per request, judge what comes back, share the verdict."""

    def __init__(self, *, crawler: Crawler, store: ProxyStore, ban_policy: object,
                 seeds: list[Proxy], when_none: str, retries: int, refresh_interval: float,
                 wait_max: float, delay_in_scheduler: bool, probe_url: str = "",
                 probe_timeout: float = 5.0) -> None:
        self.crawler, self.stats = crawler, crawler.stats
        self.store, self.pool, self.ban_policy = store, store.pool, ban_policy
        self.blame = Blame(ban_policy)
        self.seeds, self.when_none, self.retries = seeds, when_none, retries
        self.refresh_interval, self.wait_max = refresh_interval, wait_max
        self.delay_in_scheduler = delay_in_scheduler
        self.prober = Prober(store, crawler.stats, url=probe_url, timeout=probe_timeout,
                             changed=self._changed, kick=self._kick)
        self._tasks = Tasks("proxy pool")
        self._kick_again = False
        self._kicking: asyncio.Task[None] | None = None
        self._alerted = float("-inf")
        self._stat_hosts: set[str] = set()
        self._sync_retry = RedisRetry("proxy pool sync (using this worker's view meanwhile)")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        s = crawler.settings
        if not config.get_bool(s, "PROXY_ENABLED"):
            raise NotConfigured("ProxyPoolMiddleware needs PROXY_ENABLED=True")
        _check_httpproxy(s, f"{cls.__module__}.{cls.__qualname__}")
        cfg = ProxyConfig.from_settings(s)
        middleware = cls(
            crawler=crawler, store=build_from_crawler(cfg.store, crawler),
            ban_policy=build_from_crawler(cfg.ban_policy, crawler), seeds=list(cfg.seeds),
            when_none=cfg.when_none, retries=cfg.retries,
            refresh_interval=cfg.refresh_interval, wait_max=cfg.wait_max,
            delay_in_scheduler=scheduler_delays(crawler), probe_url=cfg.probe_url,
            probe_timeout=cfg.probe_timeout,
        )
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    # -- lifecycle ----------------------------------------------------------
    async def spider_opened(self) -> None:
        try:
            await self.store.open(self.seeds)
        except ServiceUnavailable as exc:
            logger.error("Cannot start the proxy pool: %s", exc)
            raise CloseSpider("proxy_pool_unavailable") from exc
        self._changed()
        if not self.pool.proxies:
            logger.warning("Proxy pool is empty: add proxies (ROTATING_PROXY_LIST, or SADD "
                           "to the shared set); until then PROXY_WHEN_NONE=%s applies",
                           self.when_none)
        logger.info("Proxy pool: %d proxies (%s), store %s, refresh every %.1fs",
                    len(self.pool.proxies), ", ".join(sorted(self.pool.proxies)) or "none",
                    type(self.store).__name__, self.refresh_interval)
        self.blame.policy = SpiderPolicy(self.ban_policy, self.crawler.spider)
        self._tasks.spawn(every(self.refresh_interval, self._sync), "refresh")
        self._tasks.spawn(every(self.prober.TICK, self.prober.run), "probes")

    async def spider_closed(self) -> None:
        await self._tasks.close()
        await self.store.close()
        self._changed()
        self._gauges()

    # -- requests -----------------------------------------------------------
    async def process_request(self, request: Request) -> Request | None:
        if "proxy" in request.meta and ID_KEY not in request.meta:
            return None  # a proxy (or None: no proxy) chosen by the spider
        if not self.prober.target:
            self.prober.target = connect_target(request.url)
        avoid = {*request.meta.get(AVOID_KEY, ()), request.meta.get(ID_KEY)}  # + the last one
        proxy = self.pool.pick(avoid)
        while proxy is None:
            self._alert()
            if self.when_none == "direct":
                self._assign(request, None)
                return None
            if self.when_none == "fail":
                self._fail(request)
            wait = self._wait_time()
            if self.delay_in_scheduler:  # the frontier holds it, under its lease
                return delayed(request, wait, dont_filter=True)
            await sleep(wait)
            await self.prober.run()
            self._changed()
            proxy = self.pool.pick(avoid)
        self._assign(request, proxy)
        return None

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        proxy_id = request.meta.get(ID_KEY)
        if not proxy_id or "cached" in response.flags:
            return response
        request.headers.pop(_AUTH, None)  # the request object may live on (leases, items)
        verdict = self.blame.response(request, response, proxy_id, self.pool.clock())
        if verdict.cause is not Cause.PROXY:
            self.prober.target = connect_target(request.url)
        self._record(request, proxy_id, verdict, _latency(request))
        return (self._reissue(request, proxy_id, verdict) if verdict.reissue else None) \
            or response

    async def process_exception(self, request: Request, exception: Exception) -> Request | None:
        proxy_id = request.meta.get(ID_KEY)
        if not proxy_id:
            return None
        request.headers.pop(_AUTH, None)
        verdict = self.blame.exception(request, exception, proxy_id, self.pool.clock())
        self._record(request, proxy_id, verdict, None)
        return self._reissue(request, proxy_id, verdict) if verdict.reissue else None

    # -- helpers ------------------------------------------------------------
    def _assign(self, request: Request, proxy: Proxy | None) -> None:
        meta = request.meta
        if not str(meta.get("download_slot", "proxy:")).startswith("proxy:"):
            meta[_OWN_SLOT] = meta["download_slot"]  # the spider's own slot, for direct sends
        for key in _ATTEMPT_META:  # a previous attempt's proxy, slot and credentials
            meta.pop(key, None)
        request.headers.pop(_AUTH, None)
        if proxy is None:
            meta["proxy"], meta[ID_KEY] = None, ""
            if _OWN_SLOT in meta:
                meta["download_slot"] = meta[_OWN_SLOT]
            self.stats.inc_value("proxy/direct")
            return
        meta["proxy"], meta[ID_KEY] = proxy.url, proxy.id
        meta["download_slot"] = f"proxy:{proxy.id}"
        meta[_START_KEY] = time.monotonic()
        self.stats.inc_value("proxy/requests")
        self.stats.inc_value(f"proxy/{proxy.id}/requests")

    def _record(self, request: Request, proxy_id: str, verdict: Verdict,
                latency: float | None) -> None:
        if verdict.outcome is None:
            return
        self.store.observe(proxy_id, verdict.outcome, latency)
        if verdict.cause is not Cause.NONE:
            host, cause = host_of(request.url), verdict.cause.value
            self.store.count_host(cause, host)
            if host not in self._stat_hosts and len(self._stat_hosts) >= HOST_STATS:
                host = "other"
            self._stat_hosts.add(host)
            for key in ("proxy/blame", f"proxy/{proxy_id}/blame", f"proxy/host/{host}/blame"):
                self.stats.inc_value(f"{key}/{cause}")
        if verdict.outcome in (Outcome.BAN, Outcome.FAILURE):
            kind = "bans" if verdict.outcome is Outcome.BAN else "failures"
            self.stats.inc_value(f"proxy/{kind}")
            self.stats.inc_value(f"proxy/{proxy_id}/{kind}")
            logger.debug("Proxy %s: %s (%s)", proxy_id, verdict.outcome.value, verdict.reason)
        self._changed()
        if verdict.outcome is Outcome.BAN and self.store.shared:
            self._kick()

    def _reissue(self, request: Request, proxy_id: str, verdict: Verdict) -> Request | None:
        """A fresh copy of *request* for another proxy, or None once out of proxy retries."""
        tries = int(request.meta.get(TRIES_KEY, 0))
        if request.meta.get("dont_retry") or tries >= self.retries:
            self.stats.inc_value("proxy/retries_exhausted")
            return None
        meta = {k: v for k, v in request.meta.items() if k not in _ATTEMPT_META}
        meta[TRIES_KEY] = tries + 1
        meta[AVOID_KEY] = [*request.meta.get(AVOID_KEY, ()), proxy_id]
        retry = request.replace(meta=meta, dont_filter=True)
        retry.headers.pop(_AUTH, None)
        self.stats.inc_value("proxy/retries")
        logger.debug("Re-issuing %s through another proxy than %s (%s; %d/%d)",
                     mask_url(request.url), proxy_id, verdict.reason, tries + 1, self.retries)
        return retry  # type: ignore[no-any-return]

    def _fail(self, request: Request) -> None:
        request.meta.pop(ID_KEY, None)
        counts = self.pool.counts()
        raise IgnoreRequest(
            f"No usable proxy for {mask_url(request.url)} ({len(self.pool.proxies)} in the "
            f"pool, {counts[State.DEAD]} dead) and PROXY_WHEN_NONE=fail")

    def _wait_time(self) -> float:
        revival = self.pool.next_revival()
        if revival is None:  # nothing to wait for but a live edit of the pool
            return min(self.refresh_interval, self.wait_max)
        # while none is usable, dead proxies are probed every PROXY_BACKOFF_BASE seconds
        return min(max(revival - self.pool.clock(), 0.05), self.wait_max,
                   self.pool.policy.backoff_base)

    def _alert(self) -> None:
        self.stats.inc_value("proxy/none_usable")
        now = time.monotonic()
        if now - self._alerted >= ALERT_EVERY:
            self._alerted = now
            revival = self.pool.next_revival()
            back = "never" if revival is None else f"in {revival - self.pool.clock():.1f}s"
            logger.warning("No usable proxy (%d in the pool, next back %s): PROXY_WHEN_NONE=%s",
                           len(self.pool.proxies), back, self.when_none)

    def _changed(self) -> None:
        for proxy_id, before, state in self.pool.transitions():
            if state is State.DEAD:
                self.stats.inc_value("proxy/dead")
                health = self.pool.get(proxy_id)
                logger.warning("Proxy %s is dead for %.0fs (death %d in a row)", proxy_id,
                               max(health.until - self.pool.clock(), 0), health.deaths)
            elif before is State.DEAD:
                self.stats.inc_value("proxy/revived")
                logger.info("Proxy %s is back on %s", proxy_id, state.value)

    def _gauges(self) -> None:
        for state, count in self.pool.counts().items():
            self.stats.set_value(f"proxy/pool/{state.value}", count)
        if lost := getattr(self.store, "lost", 0):
            self.stats.set_value("proxy/state_lost", lost)

    # -- shared store -------------------------------------------------------
    async def _sync(self) -> None:
        before = set(self.pool.proxies)
        try:
            await self.store.sync()
        except Exception as exc:  # logged once per stall (and per minute), or once if fatal
            self._sync_retry.failed(exc)
            return
        self._sync_retry.succeeded()
        added, removed = set(self.pool.proxies) - before, before - set(self.pool.proxies)
        if added or removed:
            logger.info("Proxy pool edited: added %s; removed %s",
                        ", ".join(sorted(added)) or "none", ", ".join(sorted(removed)) or "none")
        self._changed()
        self._gauges()

    def _kick(self) -> None:
        """Sync now (a ban was seen); coalesces with a sync already under way."""
        self._kick_again = True
        if self._kicking is None or self._kicking.done():
            self._kicking = self._tasks.spawn(self._kick_run(), "sync after a ban")

    async def _kick_run(self) -> None:
        while self._kick_again:
            self._kick_again = False
            await self._sync()


def _latency(request: Request) -> float | None:
    latency = request.meta.get("download_latency")
    if isinstance(latency, (int, float)):
        return float(latency)
    start = request.meta.get(_START_KEY)
    return time.monotonic() - start if isinstance(start, float) else None


def _check_httpproxy(settings: BaseSettings, ours: str) -> None:
    """Credentials reach the proxy only through HttpProxyMiddleware, which must run after us."""
    if not settings.getbool("HTTPPROXY_ENABLED"):
        raise SettingError("HTTPPROXY_ENABLED", "ProxyPoolMiddleware needs Scrapy's "
                           "HttpProxyMiddleware (it sends the proxy credentials)")
    names = [c if isinstance(c, str) else f"{c.__module__}.{c.__qualname__}"
             for c in build_component_list(
                 settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES"))]
    if _HTTPPROXY not in names:
        raise SettingError("DOWNLOADER_MIDDLEWARES", f"{_HTTPPROXY} is disabled; "
                           "ProxyPoolMiddleware needs it after itself (750)")
    if ours in names and names.index(ours) > names.index(_HTTPPROXY):
        raise SettingError("DOWNLOADER_MIDDLEWARES", "ProxyPoolMiddleware must come before "
                           "HttpProxyMiddleware (750): use an order below 750, e.g. 610")
