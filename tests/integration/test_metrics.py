"""The Prometheus exporter: series from stats and signals, its port, and a real Prometheus
scraping two distributed workers (Kafka, Redis, MongoDB)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request, Spider, signals
from scrapy.http import HtmlResponse
from servers.testproxies import start_proxies
from support.metrics import build

from crawler.config.keys import CrawlKeys, worker_id
from crawler.extensions.metrics import MetricsExporter
from crawler.localstack.demo import Worker, start_worker, wait_all, worker_command, worker_logs
from crawler.localstack.stack import Stack, free_port
from tests.helpers import SHORT_IDLE, wait_until

PROMETHEUS = Path("/usr/bin/prometheus")
SERVICE_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "MONGO_DATABASE", "CRAWL_ID")
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SERVICE_VARS:
        monkeypatch.delenv(name, raising=False)


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


# -- a real Prometheus scraping two distributed workers ---------------------------------


def prometheus_binary() -> Path:
    """/usr/bin/prometheus, installed with apt-get if missing.

    Without it and without apt-get the test skips, unless ``CI=true``: then it fails.
    """
    if PROMETHEUS.exists():
        return PROMETHEUS
    apt = shutil.which("apt-get")
    if apt is None:
        message = ("needs /usr/bin/prometheus (Debian package 'prometheus') and apt-get is "
                   "unavailable to install it; `./run tests` installs it")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    install = [apt, "install", "-y", "prometheus"]
    if subprocess.run(install, capture_output=True, check=False).returncode != 0:
        subprocess.run([apt, "update"], capture_output=True, check=True)
        subprocess.run(install, capture_output=True, check=True)
    assert PROMETHEUS.exists(), "apt-get installed 'prometheus' but not /usr/bin/prometheus"
    return PROMETHEUS


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
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
    except OSError:
        return []
    return list(body["data"]["result"]) if body.get("status") == "success" else []


def by_worker(port: int, promql: str) -> dict[str, float]:
    """``{worker label: value}`` of an instant query aggregated ``by (worker)``."""
    return {r["metric"]["worker"]: float(r["value"][1]) for r in query(port, promql)}


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def distributed_settings(port: int, proxies: list[str]) -> dict[str, Any]:
    """Default settings but for these overrides, each for the reason given."""
    return {
        # Prometheus is configured with its targets before the workers start, so it scrapes
        # them from their first second (the default 0 picks a free port, published in the
        # worker's heartbeat as metrics_port)
        "METRICS_PORT": port,
        # a rate switches the rate limiter on (it is off without one); 4 requests/s for the
        # one host, shared by both workers through Redis, makes requests wait for tokens
        "RATELIMIT_RATE": 4,
        # a proxy list switches the proxy pool on: two real proxies and a refused port
        "ROTATING_PROXY_LIST": ",".join(proxies),
        # the wait after the drain is not under test: 3 s instead of 30 (helpers.SHORT_IDLE)
        **SHORT_IDLE,
    }


@pytest.mark.e2e
def test_prometheus_scrapes_two_distributed_workers(
        stack: Stack, demo_site: str, demo_site_pages: int, crawl_id: str, tmp_path: Path) -> None:
    """Kafka, Redis and MongoDB: every mechanism's series, as Prometheus stored them."""
    binary = prometheus_binary()
    ports = [free_port(), free_port()]
    prometheus, api = start_prometheus(binary, [f"127.0.0.1:{p}" for p in ports], tmp_path)
    proxies = start_proxies(tmp_path / "proxies", healthy=2, auth=False)
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    workers: list[Worker] = []
    try:
        wait_until(lambda: len(query(api, "up")) == 2, 120, "Prometheus up with two targets")
        workers = [start_worker(i, worker_command(
            demo_site + "/", distributed_settings(port, [*proxies.healthy, proxies.dead])),
            env, tmp_path / "logs") for i, port in enumerate(ports)]
        selector = f'{{crawl_id="{crawl_id}"}}'
        done = (f"sum(crawler_items_stored_total{selector}) == {demo_site_pages} "
                f"and sum(crawler_frontier_unacked_records{selector}) == 0")
        wait_until(lambda: len(query(api, done)) == 1, 300,
                   f"{demo_site_pages} items stored and no unacked record, in Prometheus")
        _check_series(api, selector, crawl_id, heartbeat_ids(env["REDIS_URL"], crawl_id, workers),
                      ports, demo_site_pages)
        drained = f"sum(crawler_frontier_lag_records{selector}) == 0"
        wait_until(lambda: len(query(api, drained)) == 1, 120, "the lag back to 0")
        assert wait_all(workers, timeout=180) == [0, 0]
    finally:
        for worker in workers:
            stop(worker.process, signal.SIGINT)  # Scrapy's graceful shutdown
            worker.log.close()
        stop(prometheus)
        proxies.stop()
    logs = worker_logs(workers)
    assert "Distributed mode" in logs
    assert logs.count("Metrics exporter stopped") == 2, logs[-3000:]


def heartbeat_ids(redis_url: str, crawl_id: str, workers: list[Worker]) -> set[str]:
    """The heartbeat fields (node ids of ``scrapy cluster status``) of these live workers."""
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        beats = client.hgetall(CrawlKeys(crawl_id).workers)
    pids = {w.process.pid for w in workers}
    ids = {f for f, v in beats.items() if json.loads(v)["info"]["pid"] in pids}
    assert len(ids) == len(pids), f"heartbeats of {pids}: {beats}"
    return ids


def _check_series(api: int, selector: str, crawl_id: str, names: set[str],
                  ports: list[int], pages: int) -> None:
    every = query(api, f'count by (worker, crawl_id, instance) ({{__name__=~"crawler_.+", '
                       f'crawl_id="{crawl_id}"}})')
    assert {r["metric"]["worker"] for r in every} == names
    assert {r["metric"]["instance"] for r in every} == {f"127.0.0.1:{p}" for p in ports}
    assert not query(api, f'{{__name__=~"crawler_.+", crawl_id!="{crawl_id}"}}'), "unlabelled"

    def per_worker(promql: str) -> dict[str, float]:
        found = by_worker(api, promql)
        assert set(found) == names, f"{promql}: {found}"
        return found

    def at_least(promql: str, floor: float) -> None:
        found = per_worker(promql)
        assert all(v >= floor for v in found.values()), f"{promql}: {found}"

    at_least(f"sum by (worker) (crawler_pages_total{selector})", 1)  # both crawled
    assert sum(per_worker(f"sum by (worker) (crawler_items_stored_total{selector})")
               .values()) == pages
    consumed = per_worker(f"sum by (worker) (crawler_frontier_consumed_total{selector})")
    acked = per_worker(f"sum by (worker) (crawler_frontier_acked_total{selector})")
    assert sum(consumed.values()) >= pages and sum(acked.values()) >= pages
    # records waited in the buffers (rate limited), and were all acked at the end
    at_least(f"max by (worker) (max_over_time(crawler_frontier_unacked_records{selector}[30m]))", 1)
    # the lag of each worker's partitions grew while pages were discovered, and fell to 0
    at_least(f"max by (worker) (max_over_time(crawler_frontier_lag_records{selector}[30m]))", 1)
    partitions = {r["metric"]["partition"] for r in query(
        api, f"max_over_time(crawler_frontier_lag_records{selector}[30m])")}
    assert {f"{crawl_id}.requests:{n}" for n in range(12)} <= partitions  # KAFKA_PARTITIONS
    # every page links back to pages already seen: the Bloom filter refused them
    at_least(f"sum by (worker) (crawler_dedup_filtered_total{selector})", 1)
    at_least(f"sum by (worker) (crawler_ratelimit_waits_total{selector})", 1)
    at_least(f"sum by (worker) (crawler_ratelimit_wait_seconds_total{selector})", 0.01)
    # both real proxies carried pages; the refused port was found dead and shared
    at_least(f'max by (worker) (crawler_proxy_pool_proxies{{state="alive",'
             f'crawl_id="{crawl_id}"}})', 2)
    at_least(f'max by (worker) (max_over_time(crawler_proxy_pool_proxies{{state="dead",'
             f'crawl_id="{crawl_id}"}}[30m]))', 1)
    at_least(f"sum by (worker) (crawler_download_latency_seconds_count{selector})", 1)
    at_least(f'sum by (worker) (crawler_responses_total{{status="200",'
             f'crawl_id="{crawl_id}"}})', 1)
    assert len(query(api, "process_resident_memory_bytes > 0")) == 2
