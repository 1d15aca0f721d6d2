"""The proxy pool's failure attribution as metric families, read from a worker's stats.

The proxy middleware counts each failure seen through the pool against the party at fault:
``proxy/<proxy_id>/blame/<cause>`` per proxy and ``proxy/host/<host>/blame/<cause>`` per
request host, ``cause`` being ``proxy`` or ``origin``. A proxy id always holds a ``:``
(``host:port[~<8 hex>]``) and never a ``/``, so ``proxy/host/...``, ``proxy/blame/...``
and ``proxy/pool/...`` are never taken for one. Hosts are capped to :data:`HOST_CAP`, the
ones with the most failures, so that a broad crawl cannot grow a series per site it met.
Used by :class:`crawler.extensions.metrics.CrawlStatsCollector`; see ``docs/metrics.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

CAUSES = ("proxy", "origin")
HOST_CAP = 100  # hosts exported, those with the most failures (both causes) first
HOST_PREFIX = "proxy/host/"
BLAME = "/blame/"

Counts = dict[str, dict[str, float]]  # proxy id or host -> cause -> failures


def _split(key: str) -> tuple[str, str] | None:
    """``(middle, cause)`` of ``proxy/<middle>/blame/<cause>``, or None."""
    if not key.startswith("proxy/"):
        return None
    middle, sep, cause = key[len("proxy/"):].rpartition(BLAME)
    if not sep or cause not in CAUSES or not middle:
        return None
    return middle, cause


def blame_counts(stats: Mapping[str, Any]) -> tuple[Counts, Counts]:
    """Failures by proxy id and by host, each with both causes (0 when not counted yet)."""
    proxies: Counts = {}
    hosts: Counts = {}
    for key, value in stats.items():
        parts = _split(key)
        if parts is None:
            continue
        middle, cause = parts
        if middle.startswith("host/"):
            name, into = middle[len("host/"):], hosts
        else:
            name, into = middle, proxies
            if ":" not in name:  # not a proxy id (proxy/blame/<cause> is the total)
                continue
        if not name or "/" in name:
            continue
        into.setdefault(name, dict.fromkeys(CAUSES, 0.0))[cause] = _number(value)
    return proxies, hosts


def top_hosts(hosts: Counts, cap: int = HOST_CAP) -> list[str]:
    """The *cap* hosts with the most failures, most first (ties by name)."""
    return sorted(hosts, key=lambda h: (-sum(hosts[h].values()), h))[:cap]


def proxy_families(stats: Mapping[str, Any], labels: Mapping[str, str]) -> Iterator[Metric]:
    """``crawler_proxy_failures`` by proxy and cause, ``crawler_proxy_host_failures`` by host
    and cause (the top :data:`HOST_CAP` hosts)."""
    names, values = list(labels), list(labels.values())
    proxies, hosts = blame_counts(stats)
    by_proxy = CounterMetricFamily(
        "crawler_proxy_failures",
        "Failures seen through the proxy pool, by proxy and by the party blamed "
        "(cause: proxy or origin).", labels=[*names, "proxy", "cause"])
    for proxy in sorted(proxies):
        for cause in CAUSES:
            by_proxy.add_metric([*values, proxy, cause], proxies[proxy][cause])
    yield by_proxy
    by_host = CounterMetricFamily(
        "crawler_proxy_host_failures",
        "Failures seen through the proxy pool, by the request's host[:port] and the party "
        f"blamed (cause: proxy or origin); only the {HOST_CAP} hosts with the most failures "
        "in this worker.", labels=[*names, "host", "cause"])
    for host in top_hosts(hosts):
        for cause in CAUSES:
            by_host.add_metric([*values, host, cause], hosts[host][cause])
    yield by_host


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0
