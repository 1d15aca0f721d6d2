"""The Prometheus exporter: series from stats and signals, its port, and a real Prometheus."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request, Spider, signals
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config import SettingError
from crawler.extensions.metrics import MetricsExporter, worker_id
from tests.helpers import wait_until

PROMETHEUS = Path("/usr/bin/prometheus")
SERVICE_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "MONGO_DATABASE", "CRAWL_ID")
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MetricsSpider(Spider):
    name = "metrics"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SERVICE_VARS:
        monkeypatch.delenv(name, raising=False)


def build(**settings: Any) -> tuple[MetricsExporter, Spider]:
    # no core extensions: the signals fired below reach the exporter alone
    crawler = get_crawler(MetricsSpider, {"METRICS_ENABLED": True, "EXTENSIONS_BASE": {},
                                          **settings})
    exporter = build_from_crawler(MetricsExporter, crawler)
    return exporter, MetricsSpider.from_crawler(crawler)


@pytest.fixture
def opened() -> Iterator[tuple[MetricsExporter, Spider]]:
    """An exporter whose spider_opened signal has fired; closed (server stopped) at the end."""
    exporter, spider = build(CRAWL_ID="crawl-1")
    exporter.crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
    yield exporter, spider
    asyncio.run(exporter.spider_closed(spider))


def scrape(port: int) -> Series:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(series: Series, name: str, **labels: str) -> float:
    """The value of the one sample *name* whose labels include *labels*."""
    found = [v for (n, ls), v in series.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def port_of(exporter: MetricsExporter) -> int:
    assert exporter.crawler.stats is not None
    port = exporter.crawler.stats.get_value("metrics/port")
    assert isinstance(port, int)
    return port


def test_not_configured_unless_enabled() -> None:
    crawler = get_crawler(MetricsSpider, {})
    with pytest.raises(NotConfigured):
        build_from_crawler(MetricsExporter, crawler)


@pytest.mark.parametrize("port", ["abc", -1, 70000])
def test_a_bad_port_is_named(port: Any) -> None:
    with pytest.raises(SettingError, match="METRICS_PORT"):
        build(METRICS_PORT=port)


def test_port_zero_picks_a_free_port_recorded_in_stats_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="crawler.extensions.metrics"):
        exporter, spider = build()
        exporter.crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
    try:
        port = port_of(exporter)
        assert port > 0
        assert f"listening on http://127.0.0.1:{port}/metrics" in caplog.text
        series = scrape(port)
        labels = {"crawl_id": "metrics", "worker": worker_id()}  # no CRAWL_ID: the spider's name
        assert value(series, "crawler_pages_total", **labels) == 0
    finally:
        asyncio.run(exporter.spider_closed(spider))


def test_series_follow_stats_and_signals(opened: tuple[MetricsExporter, Spider]) -> None:
    exporter, spider = opened
    stats = exporter.crawler.stats
    assert stats is not None
    for key, number in {
        "response_received_count": 7, "item_scraped_count": 5,
        "downloader/response_status_count/200": 6, "downloader/response_status_count/404": 1,
        "retry/reason_count/500 Internal Server Error": 3, "retry/failed": 2,
        "retry/max_reached": 1, "item_dropped_reasons_count/DropItem": 4,
        "bloom/filtered": 11, "frontier/consumed": 20, "frontier/acked": 12,
        "frontier/stale_dropped": 3, "proxy/pool/alive": 4, "proxy/pool/dead": 1,
        "proxy/pool/probation": 2, "ratelimit/waits": 9, "mongo/stored": 5,
        "mongo/rejected": 1, "downloader/response_bytes": 12345,
        "downloader/request_bytes": 678,
    }.items():
        stats.set_value(key, number)
    for latency in (0.03, 0.3):
        request = Request("http://127.0.0.1/p", meta={"download_latency": latency})
        response = HtmlResponse(request.url, body=b"<html></html>", request=request)
        exporter.crawler.signals.send_catch_log(
            signals.response_received, response=response, request=request, spider=spider)
    series = scrape(port_of(exporter))
    expected = {
        ("crawler_pages_total", ()): 7, ("crawler_items_total", ()): 5,
        ("crawler_responses_total", (("status", "200"),)): 6,
        ("crawler_responses_total", (("status", "404"),)): 1,
        ("crawler_retries_total", (("reason", "500 Internal Server Error"),)): 3,
        ("crawler_failures_total", ()): 2,
        ("crawler_items_dropped_total", (("reason", "DropItem"),)): 4,
        ("crawler_dedup_filtered_total", ()): 11,
        ("crawler_frontier_consumed_total", ()): 20, ("crawler_frontier_acked_total", ()): 12,
        ("crawler_frontier_unacked_records", ()): 5,
        ("crawler_proxy_pool_proxies", (("state", "alive"),)): 4,
        ("crawler_proxy_pool_proxies", (("state", "dead"),)): 1,
        ("crawler_proxy_pool_proxies", (("state", "probation"),)): 2,
        ("crawler_ratelimit_waits_total", ()): 9,
        ("crawler_items_stored_total", ()): 5, ("crawler_items_rejected_total", ()): 1,
        ("crawler_network_bytes_total", (("direction", "received"),)): 12345,
        ("crawler_network_bytes_total", (("direction", "sent"),)): 678,
        ("crawler_download_latency_seconds_count", ()): 2,
        ("crawler_download_latency_seconds_bucket", (("le", "0.05"),)): 1,
        ("crawler_download_latency_seconds_bucket", (("le", "0.5"),)): 2,
    }
    for (name, labels), number in expected.items():
        assert value(series, name, **dict(labels)) == number, name
    assert value(series, "crawler_download_latency_seconds_sum") == pytest.approx(0.33)
    assert value(series, "process_cpu_seconds_total") > 0
    assert value(series, "process_resident_memory_bytes") > 1_000_000
    ours = {"crawl_id": "crawl-1", "worker": worker_id()}
    assert all(set(ours.items()) <= labels for _, labels in series), "unlabelled series"


def test_values_are_read_when_prometheus_scrapes(opened: tuple[MetricsExporter, Spider]) -> None:
    exporter, _ = opened
    assert exporter.crawler.stats is not None
    port = port_of(exporter)
    assert value(scrape(port), "crawler_items_total") == 0
    assert ("crawler_proxy_pool_proxies" not in {name for name, _ in scrape(port)})
    exporter.crawler.stats.inc_value("item_scraped_count", 3)
    assert value(scrape(port), "crawler_items_total") == 3


def test_spider_closed_stops_the_server() -> None:
    exporter, spider = build()
    crawler = exporter.crawler
    crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
    port = port_of(exporter)
    scrape(port)
    asyncio.run(crawler.signals.send_catch_log_async(
        signals.spider_closed, spider=spider, reason="finished"))
    with pytest.raises(OSError):
        scrape(port)


def test_two_exporters_in_one_process_have_their_own_registries(
        opened: tuple[MetricsExporter, Spider]) -> None:
    first, _ = opened
    second, spider = build(CRAWL_ID="crawl-2")
    second.crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
    try:
        assert port_of(first) != port_of(second)
        assert value(scrape(port_of(second)), "crawler_pages_total", crawl_id="crawl-2") == 0
        assert not [ls for _, ls in scrape(port_of(first)) if ("crawl_id", "crawl-2") in ls]
    finally:
        asyncio.run(second.spider_closed(spider))


def test_a_port_in_use_is_logged_naming_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        exporter, spider = build(METRICS_PORT=busy.getsockname()[1])
        exporter.crawler.signals.send_catch_log(signals.spider_opened, spider=spider)
    assert "METRICS_PORT" in caplog.text
    assert exporter.crawler.stats is not None
    assert exporter.crawler.stats.get_value("metrics/port") is None
    asyncio.run(exporter.spider_closed(spider))  # nothing to stop


# -- a real Prometheus scraping two crawling workers -----------------------------------


def prometheus_binary() -> Path:
    """/usr/bin/prometheus, installed with apt-get if missing; skip only without apt-get."""
    if PROMETHEUS.exists():
        return PROMETHEUS
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.skip("needs /usr/bin/prometheus (Debian package 'prometheus') and apt-get is "
                    "unavailable to install it; `./run tests` installs it")
    install = [apt, "install", "-y", "prometheus"]
    if subprocess.run(install, capture_output=True, check=False).returncode != 0:
        subprocess.run([apt, "update"], capture_output=True, check=True)
        subprocess.run(install, capture_output=True, check=True)
    return PROMETHEUS


def start_worker(base_url: str, port: int, directory: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env["SCRAPY_SETTINGS_MODULE"] = "crawler.settings"
    extensions = json.dumps({"crawler.extensions.metrics.MetricsExporter": 500})
    cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"start_urls={base_url}/",
           "-s", "CRAWL_ID=metrics-it", "-s", f"EXTENSIONS={extensions}",
           "-s", "METRICS_ENABLED=True", "-s", f"METRICS_PORT={port}",
           # one request at a time, one a second: the worker lives ~50 s on 50 pages, and a
           # graceful stop waits for one download, not for a slot queue of delayed ones
           "-s", "CONCURRENT_REQUESTS=1", "-s", "DOWNLOAD_DELAY=1",
           "-s", "CLOSESPIDER_TIMEOUT=120",
           "-s", f"LOCAL_ITEMS_PATH={directory}/items-{port}.jsonl"]
    log = (directory / f"worker-{port}.log").open("wb")
    return subprocess.Popen(cmd, env=env, cwd=directory, stdout=log, stderr=subprocess.STDOUT)


def start_prometheus(binary: Path, targets: list[str], directory: Path) -> tuple[
        subprocess.Popen[bytes], int]:
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
              "scrape_configs": [{"job_name": "crawler",
                                  "static_configs": [{"targets": targets}]}]}
    (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    cmd = [str(binary), f"--config.file={directory / 'prometheus.yml'}",
           f"--storage.tsdb.path={directory / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
    log = (directory / "prometheus.log").open("wb")
    return subprocess.Popen(cmd, cwd=directory, stdout=log, stderr=subprocess.STDOUT), port


def query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = json.load(response)
    except OSError:
        return []
    return list(body["data"]["result"]) if body.get("status") == "success" else []


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.e2e
def test_prometheus_scrapes_two_crawling_workers(demo_site: str, tmp_path: Path) -> None:
    binary = prometheus_binary()
    ports = [free_port(), free_port()]
    workers = [start_worker(demo_site, port, tmp_path) for port in ports]
    prometheus, api = start_prometheus(binary, [f"127.0.0.1:{p}" for p in ports], tmp_path)
    try:
        def both_counting() -> bool:
            result = query(api, "crawler_pages_total > 0")
            return len({r["metric"]["worker"] for r in result}) == 2

        wait_until(both_counting, 60, "crawler_pages_total > 0 from both workers in Prometheus")
        pages = query(api, "crawler_pages_total")
        assert {r["metric"]["instance"] for r in pages} == {f"127.0.0.1:{p}" for p in ports}
        assert {r["metric"]["crawl_id"] for r in pages} == {"metrics-it"}
        assert {r["metric"]["worker"].rsplit(":", 1)[1] for r in pages} == {
            str(w.pid) for w in workers}
        latency = query(api, "sum by (worker) (crawler_download_latency_seconds_count)")
        assert len(latency) == 2 and all(float(r["value"][1]) > 0 for r in latency)
        assert len(query(api, 'crawler_responses_total{status="200"} > 0')) == 2
        assert len(query(api, "process_resident_memory_bytes > 0")) == 2
    finally:
        for worker in workers:
            stop(worker, signal.SIGINT)  # Scrapy's graceful shutdown: spider_closed runs
        stop(prometheus)
    for worker, port in zip(workers, ports, strict=True):
        log = (tmp_path / f"worker-{port}.log").read_text()
        assert f"listening on http://127.0.0.1:{port}/metrics" in log, log[-3000:]
        assert "Metrics exporter stopped" in log, log[-3000:]
        assert worker.returncode == 0, log[-3000:]
