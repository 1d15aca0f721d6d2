"""Alerts: every ``ALERT_INTERVAL`` seconds each worker checks the rules of
:mod:`crawler.operations.alert_rules`.

``ALERTS_ENABLED = True`` switches it on (the add-on does in distributed mode).
It reads this worker's stats and, with ``REDIS_URL``, the crawl's heartbeat hash
``{CRAWL_ID}:workers`` and the Bloom filter's metadata. Heartbeats are judged on
Redis's clock with the crawl state's reader (:func:`crawler.frontier.crawlstate.read_workers`):
no worker host's clock is compared with another's. For each alert it logs a
WARNING when the alert becomes active and an INFO when it clears, sets the stat
``alerts/active/<name>`` to 1 or 0 (exported as ``crawler_alerts_active``),
records it in the Redis hash ``{CRAWL_ID}:alerts`` (read by ``scrapy cluster
status``) and, with ``ALERT_WEBHOOK_URL``, POSTs it as JSON from a daemon thread.
Nothing here may stop the crawl: every failure is logged. See ``docs/alerts.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio as aioredis
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys, worker_id
from crawler.connections import shared
from crawler.connections.tasks import Tasks, every
from crawler.dedup.backend import BloomConfig
from crawler.dedup.dupefilter import RedisBloom
from crawler.frontier import crawlstate
from crawler.operations.alert_rules import (
    RULES,
    Alert,
    AlertInput,
    LagTracker,
    Thresholds,
    evaluate,
    summed_lag,
)

logger = logging.getLogger(__name__)
STAT_PREFIX = "alerts/active/"


stale_after = crawlstate.stale_after_setting  # the workers' one rule


def thresholds(settings: Any) -> Thresholds:
    """The ``ALERT_*`` thresholds, validated. A node is silent once it is lost by the
    crawl's rule (:func:`stale_after`) and ``ALERT_NODE_SILENT_SECONDS`` have passed."""
    limits = Thresholds(
        failure_rate=config.get_float(settings, "ALERT_FAILURE_RATE", minimum=0, maximum=1),
        lag_growing_minutes=config.get_float(settings, "ALERT_LAG_GROWING_MINUTES",
                                             minimum=0, exclusive_min=True),
        min_proxies=config.get_int(settings, "ALERT_MIN_PROXIES", minimum=0),
        bloom_fill=config.get_float(settings, "ALERT_BLOOM_FILL", minimum=0, maximum=1),
        node_silent_seconds=config.get_float(settings, "ALERT_NODE_SILENT_SECONDS",
                                             minimum=0, exclusive_min=True),
    )
    silent = max(limits.node_silent_seconds, stale_after(settings))
    return replace(limits, node_silent_seconds=silent)


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """The settings the alerts read (``ALERT_*``, and Redis and the Bloom filter to watch),
    validated in one place: :class:`~crawler.config.SettingError` names a bad one."""

    limits: Thresholds
    interval: float
    ttl: float
    webhook: str
    webhook_timeout: float
    stale_after: float
    redis_url: str
    bloom: BloomConfig

    @classmethod
    def from_settings(cls, settings: Any) -> AlertsConfig:
        s = settings
        return cls(
            limits=thresholds(s),
            interval=config.get_float(s, "ALERT_INTERVAL", minimum=0, exclusive_min=True),
            ttl=config.get_float(s, "ALERT_TTL", minimum=1),
            webhook=config.get_str(s, "ALERT_WEBHOOK_URL"),
            webhook_timeout=config.get_float(s, "ALERT_WEBHOOK_TIMEOUT", minimum=0,
                                             exclusive_min=True),
            stale_after=stale_after(s), redis_url=config.get_str(s, "REDIS_URL"),
            bloom=BloomConfig.from_settings(s),
        )


def post_json(url: str, payload: dict[str, Any], timeout: float) -> None:
    """POST *payload* as JSON; log, never raise (runs in a daemon thread)."""
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
    except Exception as exc:  # a webhook must never break the crawl
        logger.warning("Alert webhook %s failed: %s", config.mask_url(url), exc)


class AlertsExtension:
    """``EXTENSIONS = {"crawler.extensions.alerts.AlertsExtension": 510}``."""

    def __init__(self, crawler: Crawler, cfg: AlertsConfig) -> None:
        self.crawler, self.cfg = crawler, cfg
        self.limits = cfg.limits
        self.interval = cfg.interval
        self.ttl = cfg.ttl
        self.webhook = cfg.webhook
        self.webhook_timeout = cfg.webhook_timeout
        self.worker = worker_id()
        self.stale_after = cfg.stale_after  # heartbeats summed for the lag: the live workers'
        self.lag = LagTracker()
        self.clock = crawlstate.HeartbeatClock()
        self.active: dict[str, tuple[Alert, float]] = {}  # name -> (alert, since)
        self.redis: aioredis.Redis | None = None
        self.bloom: RedisBloom | None = None
        self.keys = CrawlKeys("")
        self.crawl_id = ""
        self._tasks = Tasks("alerts")
        self._task: asyncio.Task[None] | None = None  # the check loop, while it runs

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AlertsExtension:
        settings = crawler.settings
        if not config.get_bool(settings, "ALERTS_ENABLED"):
            raise NotConfigured("ALERTS_ENABLED is off")
        ext = cls(crawler, AlertsConfig.from_settings(settings))
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    async def spider_opened(self, spider: Spider) -> None:
        self.open(spider.name)
        self._task = self._tasks.spawn(every(self.interval, self._check_once), "checks")

    def open(self, spider_name: str) -> None:
        """Resolve the crawl id, set every alert stat to 0, connect to Redis if configured."""
        self.crawl_id = config.crawl_id(self.crawler.settings, spider_name)
        self.keys = CrawlKeys(self.crawl_id)
        assert self.crawler.stats is not None
        for name in RULES:
            self.crawler.stats.set_value(STAT_PREFIX + name, 0)
        cfg = self.cfg
        if not cfg.redis_url:
            return
        self.redis = shared.redis_for(self.crawler)
        self.bloom = RedisBloom.for_crawl(self.redis, self.crawl_id, cfg.bloom)

    async def _check_once(self) -> None:
        try:
            await self.check()
        except Exception as exc:  # Redis outage: try again next time
            logger.warning("Alert check failed: %s", exc)

    async def spider_closed(self, spider: Spider) -> None:
        self._task = None
        await self._tasks.close()
        await self.close()

    async def close(self) -> None:
        client, self.redis = self.redis, None
        if client is not None:
            await shared.release_redis(self.crawler, client)

    async def read(self) -> AlertInput:
        """This worker's stats and, with Redis, the heartbeats and the Bloom filter's state,
        all on Redis's clock."""
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats().copy()
        if self.redis is None or self.bloom is None:
            return AlertInput(now=time.time(), stats=stats)
        now, docs = await self._heartbeats()
        info = await self.bloom.info()
        lag = summed_lag(docs, now, self.stale_after)
        return AlertInput(now=now, stats=stats,
                          heartbeats={w: float(d["ts"]) for w, d in docs.items()},
                          bloom_fill=info.fill if info.slices else None,
                          bloom_exists=bool(info.slices),
                          lag_growing=self.lag.update(now, lag))

    async def _heartbeats(self) -> tuple[float, dict[str, dict[str, Any]]]:
        """Redis's time and every heartbeat, its ``ts`` when it was written (Redis time)."""
        assert self.redis is not None
        now, docs, _ = await crawlstate.read_workers(self.redis, self.keys.workers, self.clock)
        return now, docs

    async def check(self) -> list[Alert]:
        """Evaluate the rules once and act on what became active, stayed active or cleared."""
        data = await self.read()
        alerts = evaluate(data, self.limits)
        current = {a.name: a for a in alerts}
        for name in [n for n in self.active if n not in current]:
            await self._cleared(name)
        for alert in alerts:
            await self._raised(alert, data.now)
        return alerts

    async def _raised(self, alert: Alert, now: float) -> None:
        new = alert.name not in self.active
        since = now if new else self.active[alert.name][1]
        self.active[alert.name] = (alert, since)
        payload = self.payload(alert, since, now)
        if new:
            logger.warning("Alert %s active: %s", alert.name, alert.message)
            assert self.crawler.stats is not None
            self.crawler.stats.set_value(STAT_PREFIX + alert.name, 1)
            if self.webhook:
                threading.Thread(target=post_json, daemon=True, name="alert-webhook",
                                 args=(self.webhook, payload, self.webhook_timeout)).start()
        if self.redis is not None:
            await self.redis.hset(self.keys.alerts, alert.name, json.dumps(payload))
            await self.redis.expire(self.keys.alerts, max(int(self.ttl), 1))

    async def _cleared(self, name: str) -> None:
        alert, _ = self.active.pop(name)
        logger.info("Alert %s cleared (was: %s)", name, alert.message)
        assert self.crawler.stats is not None
        self.crawler.stats.set_value(STAT_PREFIX + name, 0)
        if self.redis is None:
            return
        stored = await self.redis.hget(self.keys.alerts, name)
        if stored is not None and json.loads(stored).get("worker") == self.worker:
            await self.redis.hdel(self.keys.alerts, name)  # another worker's alert stays

    def payload(self, alert: Alert, since: float, now: float) -> dict[str, Any]:
        return {"alert": alert.name, "severity": alert.severity, "message": alert.message,
                "value": alert.value, "threshold": alert.threshold, "since": since,
                "ts": now, "ttl": self.ttl, "worker": self.worker, "crawl_id": self.crawl_id}
