"""The proxy pool's failure attribution as metrics: per proxy, per host (capped), totals,
probes and the proxy budget, read from a crawler's stats at collect time (no server; the
exporter's HTTP side: tests/integration/test_metrics.py)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler
from support.metrics import MetricsSpider

from crawler.extensions.metrics import CrawlStatsCollector
from crawler.extensions.proxymetrics import HOST_CAP, blame_counts

LABELS = {"crawl_id": "c1", "worker": "h:1:abcdef"}
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def stats_with(values: dict[str, Any]) -> StatsCollector:
    crawler = get_crawler(MetricsSpider, {})
    assert crawler.stats is not None
    for key, value in values.items():
        crawler.stats.set_value(key, value)
    return crawler.stats


def collect(values: dict[str, Any]) -> Series:
    collector = CrawlStatsCollector(stats_with(values), LABELS)
    series: Series = {}
    for family in collector.collect():
        for sample in family.samples:
            extra = {k: v for k, v in sample.labels.items() if k not in LABELS}
            assert {k: sample.labels[k] for k in LABELS} == LABELS, sample
            series[(sample.name, frozenset(extra.items()))] = sample.value
    return series


def named(series: Series, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in series.items() if n == name}


def key(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


STATS = {
    "proxy/blame/proxy": 7, "proxy/blame/origin": 4,
    "proxy/127.0.0.1:3128/blame/proxy": 5, "proxy/127.0.0.1:3128/blame/origin": 1,
    "proxy/10.0.0.1:3128~81a60f20/blame/proxy": 2,  # no origin failure through it yet
    "proxy/[::1]:8080/blame/origin": 3,
    "proxy/host/127.0.0.2:8123/blame/proxy": 6, "proxy/host/127.0.0.2:8123/blame/origin": 4,
    "proxy/host/example.com/blame/proxy": 1,
    "proxy/127.0.0.1:3128/requests": 40, "proxy/pool/alive": 2, "proxy/pool/dead": 1,
    "proxy/retries": 9, "proxy/retries_exhausted": 2,
    "proxy/probes/ok": 3, "proxy/probes/failed": 5,
}


def test_failures_by_proxy_and_cause() -> None:
    found = named(collect(STATS), "crawler_proxy_failures_total")
    assert found == {
        key(proxy="127.0.0.1:3128", cause="proxy"): 5,
        key(proxy="127.0.0.1:3128", cause="origin"): 1,
        key(proxy="10.0.0.1:3128~81a60f20", cause="proxy"): 2,
        key(proxy="10.0.0.1:3128~81a60f20", cause="origin"): 0,
        key(proxy="[::1]:8080", cause="proxy"): 0,
        key(proxy="[::1]:8080", cause="origin"): 3,
    }  # neither host/..., pool/... nor the totals are taken for a proxy id


def test_failures_by_host_and_cause() -> None:
    found = named(collect(STATS), "crawler_proxy_host_failures_total")
    assert found == {
        key(host="127.0.0.2:8123", cause="proxy"): 6,
        key(host="127.0.0.2:8123", cause="origin"): 4,
        key(host="example.com", cause="proxy"): 1,
        key(host="example.com", cause="origin"): 0,
    }


def test_totals_probes_and_the_proxy_budget() -> None:
    series = collect(STATS)
    assert named(series, "crawler_proxy_blamed_failures_total") == {
        key(cause="proxy"): 7, key(cause="origin"): 4}
    assert named(series, "crawler_proxy_probes_total") == {
        key(result="ok"): 3, key(result="failed"): 5}
    assert named(series, "crawler_proxy_retries_total") == {key(): 9}
    assert named(series, "crawler_proxy_retries_exhausted_total") == {key(): 2}


def test_hosts_are_capped_to_those_with_the_most_failures() -> None:
    stats: dict[str, Any] = {}
    for n in range(HOST_CAP + 20):  # host n has n proxy failures and 1 origin failure
        stats[f"proxy/host/site{n}.example:80/blame/proxy"] = n
        stats[f"proxy/host/site{n}.example:80/blame/origin"] = 1
    found = named(collect(stats), "crawler_proxy_host_failures_total")
    hosts = {dict(labels)["host"] for labels in found}
    assert hosts == {f"site{n}.example:80" for n in range(20, HOST_CAP + 20)}
    assert len(found) == 2 * HOST_CAP


def test_without_a_proxy_pool_the_families_are_empty() -> None:
    series = collect({"response_received_count": 3})
    for name in ("crawler_proxy_failures_total", "crawler_proxy_host_failures_total",
                 "crawler_proxy_blamed_failures_total", "crawler_proxy_probes_total"):
        assert named(series, name) == {}, name
    assert named(series, "crawler_proxy_retries_total") == {key(): 0}


def test_odd_keys_are_not_read_as_proxies_or_hosts() -> None:
    proxies, hosts = blame_counts({
        "proxy/blame/proxy": 1, "proxy/pool/blame/proxy": 1, "proxy/a:1/blame/other": 1,
        "proxy/host//blame/proxy": 1, "proxy/host/a/b:1/blame/origin": 1,
        "proxy/x/y:1/blame/proxy": 1, "other/a:1/blame/proxy": 1, "proxy/a:1/blame/proxy": "?",
    })
    assert proxies == {"a:1": {"proxy": 0.0, "origin": 0.0}}  # a non-number reads 0
    assert hosts == {}


def test_the_families_render_as_prometheus_text() -> None:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(CrawlStatsCollector(stats_with(STATS), LABELS))
    text = generate_latest(registry).decode()
    assert ('crawler_proxy_failures_total{cause="proxy",crawl_id="c1",proxy="127.0.0.1:3128",'
            'worker="h:1:abcdef"} 5.0') in text
    assert f"only the {HOST_CAP} hosts with the most failures" in text
