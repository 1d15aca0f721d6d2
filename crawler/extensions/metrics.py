"""A Prometheus exporter: the crawl's stats as metrics, served over HTTP by every worker.

``METRICS_ENABLED = True`` switches it on. Each exporter has its own
:class:`~prometheus_client.CollectorRegistry` and serves it with prometheus_client's
HTTP server in a daemon thread on ``METRICS_HOST:METRICS_PORT`` (port ``0``: a free
port). The chosen port is logged and stored in the stats as ``metrics/port``.

Nothing runs on the hot path but one histogram observation per response: counters
and gauges are read from the crawler's stats when Prometheus scrapes. Every series
carries the labels ``crawl_id`` and ``worker`` (:func:`crawler.config.keys.worker_id`,
``host:pid:<6 hex>``: the node id of the heartbeats and ``scrapy cluster status``). See
``docs/metrics.md``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.statscollectors import StatsCollector

from crawler.config import readers as config
from crawler.config.keys import worker_id
from crawler.extensions.proxymetrics import proxy_families
from crawler.ledger.balance import of_stats

logger = logging.getLogger(__name__)

LABELS = ("crawl_id", "worker")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# counter name (without _total), help, stats key
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("crawler_pages", "Responses received (pages downloaded).", "response_received_count"),
    ("crawler_items", "Items scraped.", "item_scraped_count"),
    ("crawler_dedup_filtered", "Requests filtered as duplicates by the Bloom dupefilter.",
     "bloom/filtered"),
    ("crawler_frontier_consumed", "Records taken from the Kafka frontier.", "frontier/consumed"),
    ("crawler_frontier_acked", "Frontier records acknowledged.", "frontier/acked"),
    ("crawler_ratelimit_waits", "Requests that waited for a token-bucket slot.",
     "ratelimit/waits"),
    ("crawler_ratelimit_wait_seconds", "Seconds requests waited for token-bucket slots.",
     "ratelimit/wait_seconds"),
    ("crawler_items_stored", "Items written to MongoDB.", "mongo/stored"),
    ("crawler_items_rejected", "Items MongoDB refused.", "mongo/rejected"),
    ("crawler_proxy_retries", "Requests re-issued through another proxy (the proxy budget).",
     "proxy/retries"),
    ("crawler_proxy_retries_exhausted", "Requests whose proxy budget ran out.",
     "proxy/retries_exhausted"),
)
# counter name (without _total), help, label, stats key prefix
LABELLED_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("crawler_responses", "Responses by HTTP status.", "status",
     "downloader/response_status_count/"),
    ("crawler_retries", "Retries scheduled, by reason.", "reason", "retry/reason_count/"),
    ("crawler_items_dropped", "Items dropped, by reason.", "reason",
     "item_dropped_reasons_count/"),
    ("crawler_proxy_blamed_failures", "Failures seen through the proxy pool, by the party "
     "blamed (cause: proxy or origin).", "cause", "proxy/blame/"),
    ("crawler_proxy_probes", "Background probes of dead proxies, by result (ok, failed).",
     "result", "proxy/probes/"),
    ("crawler_ledger", "The crawl ledger, for the whole crawl (every worker's share, read "
     "from Redis each second): records by outcome and counts of work; scrapy cluster report "
     "reconciles them.", "name", "ledger/"),
)
NETWORK = (("received", "downloader/response_bytes"), ("sent", "downloader/request_bytes"))
PROXY_STATES = ("alive", "dead", "probation")
LAG_PREFIX = "frontier/lag/"
ALERT_PREFIX = "alerts/active/"  # stats of crawler.extensions.alerts


class CrawlStatsCollector(Collector):
    """Turns a snapshot of the crawler's stats into metric families at scrape time."""

    def __init__(self, stats: StatsCollector, labels: dict[str, str]) -> None:
        self.stats = stats
        self.labels = labels
        self.process = ProcessCollector(registry=None)

    def collect(self) -> Iterator[Metric]:
        # dict.copy() runs under the GIL without calling Python code: a consistent
        # snapshot even while the reactor thread updates the stats
        stats: dict[str, Any] = self.stats.get_stats().copy()
        yield from self._counters(stats)
        yield from self._labelled(stats)
        yield from proxy_families(stats, self.labels)
        yield from self._gauges(stats)
        yield from self._process()

    def _counter(self, name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*LABELS, *extra])

    def _counters(self, stats: dict[str, Any]) -> Iterator[Metric]:
        values = list(self.labels.values())
        for name, doc, key in COUNTERS:
            family = self._counter(name, doc)
            family.add_metric(values, _number(stats.get(key)))
            yield family
        failures = self._counter(
            "crawler_failures", "Requests given up on after their retries.")
        failures.add_metric(values, max(_number(stats.get("retry/failed")),
                                        _number(stats.get("retry/max_reached"))))
        yield failures
        network = self._counter(
            "crawler_network_bytes", "HTTP bytes downloaded and uploaded.", ("direction",))
        for direction, key in NETWORK:
            network.add_metric([*values, direction], _number(stats.get(key)))
        yield network

    def _labelled(self, stats: dict[str, Any]) -> Iterator[Metric]:
        values = list(self.labels.values())
        for name, doc, label, prefix in LABELLED_COUNTERS:
            family = self._counter(name, doc, (label,))
            for key, value in stats.items():
                if key.startswith(prefix):
                    family.add_metric([*values, key[len(prefix):]], _number(value))
            yield family

    def _gauges(self, stats: dict[str, Any]) -> Iterator[Metric]:
        values = list(self.labels.values())
        if "frontier/consumed" in stats:
            taken = _number(stats.get("frontier/consumed"))
            unacked = taken - _number(stats.get("frontier/acked")) - _number(
                stats.get("frontier/stale_dropped"))
            family = GaugeMetricFamily(
                "crawler_frontier_unacked_records",
                "Frontier records taken and not yet acknowledged (buffered or leased).",
                labels=list(LABELS))
            family.add_metric(values, max(unacked, 0.0))
            yield family
        lags = {k[len(LAG_PREFIX):]: v for k, v in stats.items()
                if k.startswith(LAG_PREFIX) and v is not None}
        if lags:
            lag = GaugeMetricFamily(
                "crawler_frontier_lag_records",
                "Kafka lag of each partition this worker owns (high-water mark - committed).",
                labels=[*LABELS, "partition"])
            for partition, value in sorted(lags.items()):
                lag.add_metric([*values, partition], _number(value))
            yield lag
        present = [s for s in PROXY_STATES if f"proxy/pool/{s}" in stats]
        if present:
            proxies = GaugeMetricFamily(
                "crawler_proxy_pool_proxies", "Proxies of the pool by state, at the last sync.",
                labels=[*LABELS, "state"])
            for state in present:
                proxies.add_metric([*values, state], _number(stats[f"proxy/pool/{state}"]))
            yield proxies
        yield from self._balance(stats)
        yield from self._alerts(stats)

    def _balance(self, stats: dict[str, Any]) -> Iterator[Metric]:
        """``ledger_balance/<name>`` (crawler.ledger.balance): the crawl's, as last read."""
        found = of_stats(stats)
        if not found:
            return
        family = GaugeMetricFamily(
            "crawler_ledger_balance_records", "The crawl's balance at the worker's last read "
            "(every 30 s): pending, unaccounted, Kafka lag, redelivered records.",
            labels=[*LABELS, "name"])
        for name, value in sorted(found.items()):
            family.add_metric([*self.labels.values(), name], _number(value))
        yield family

    def _alerts(self, stats: dict[str, Any]) -> Iterator[Metric]:
        """``alerts/active/<name>`` (set by the alerts extension) as one gauge per alert."""
        names = sorted(k[len(ALERT_PREFIX):] for k in stats if k.startswith(ALERT_PREFIX))
        if not names:
            return
        family = GaugeMetricFamily(
            "crawler_alerts_active", "1 while the alert is active in this worker, else 0.",
            labels=[*LABELS, "alert"])
        for name in names:
            family.add_metric([*self.labels.values(), name], _number(stats[ALERT_PREFIX + name]))
        yield family

    def _process(self) -> Iterator[Metric]:
        """prometheus_client's process metrics, with this worker's labels added."""
        for family in self.process.collect():
            family.samples = [s._replace(labels={**self.labels, **s.labels})
                              for s in family.samples]
            yield family


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``METRICS_HOST`` and ``METRICS_PORT``, validated (the switch is ``METRICS_ENABLED``)."""

    host: str
    port: int

    @classmethod
    def from_settings(cls, settings: Any) -> MetricsConfig:
        port = config.get_int(settings, "METRICS_PORT", minimum=0)
        if port > 65535:
            raise config.SettingError("METRICS_PORT", f"expected a port <= 65535, got {port}")
        return cls(host=config.get_str(settings, "METRICS_HOST"), port=port)


class MetricsExporter:
    """``EXTENSIONS = {"crawler.extensions.metrics.MetricsExporter": 0}``."""

    def __init__(self, crawler: Crawler, *, host: str, port: int) -> None:
        self.crawler = crawler
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "crawler_download_latency_seconds",
            "Seconds from sending a request to receiving its response headers.",
            labelnames=LABELS, buckets=LATENCY_BUCKETS, registry=self.registry)
        self._latency: Any = None
        self.server: WSGIServer | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MetricsExporter:
        settings = crawler.settings
        if not config.get_bool(settings, "METRICS_ENABLED"):
            raise NotConfigured("METRICS_ENABLED is off")
        cfg = MetricsConfig.from_settings(settings)
        exporter = cls(crawler, host=cfg.host, port=cfg.port)
        crawler.signals.connect(exporter.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(exporter.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(exporter.response_received, signal=signals.response_received)
        return exporter

    def spider_opened(self, spider: Spider) -> None:
        assert self.crawler.stats is not None
        labels = {"crawl_id": config.crawl_id(self.crawler.settings, spider.name),
                  "worker": worker_id()}
        self._latency = self.latency.labels(**labels)
        self.registry.register(CrawlStatsCollector(self.crawler.stats, labels))
        try:
            self.server, _ = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            logger.error("Metrics exporter disabled: cannot listen on %s:%d "
                         "(settings METRICS_HOST, METRICS_PORT): %s", self.host, self.port, exc)
            return
        port = self.server.server_port
        self.crawler.stats.set_value("metrics/port", port)
        logger.info("Metrics exporter listening on http://%s:%d/metrics (crawl_id=%s, worker=%s)",
                    _host(self.host), port, labels["crawl_id"], labels["worker"])

    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        latency = request.meta.get("download_latency")
        if self._latency is not None and isinstance(latency, (int, float)):
            self._latency.observe(latency)

    async def spider_closed(self, spider: Spider) -> None:
        server, self.server = self.server, None
        if server is not None:
            # shutdown() waits for serve_forever's poll loop (up to 0.5 s): not on the loop
            await asyncio.to_thread(_stop, server)


def _stop(server: WSGIServer) -> None:
    server.shutdown()
    server.server_close()
    logger.info("Metrics exporter stopped")


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
