"""Probes of dead proxies through real proxy.py processes, and a dead proxy brought back by
its probes in a real crawl (no crawl request spent on it while it is dead)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from servers.testproxies import AUTH, ProxySet, start_proxies
from support.proxycrawl import Crawl, urls_of

from crawler.localstack.stack import free_port
from crawler.politeness.probe import probe
from crawler.politeness.proxypool import parse_proxy


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 404 if self.path.startswith("/missing") else 200
        body = f"<html>{self.path}</html>".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxySet]:
    with start_proxies(tmp_path_factory.mktemp("proxies")) as started:
        yield started


def _probe(address: str, **kw: Any) -> str | None:
    return asyncio.run(probe(parse_proxy(address), **kw))


def test_a_connect_probe_tells_working_proxies_from_broken_ones(proxies: ProxySet,
                                                                site: str) -> None:
    authed = proxies.healthy[-1]
    assert "@" in authed
    for good in [*proxies.healthy, proxies.slow]:
        assert _probe(good, target=site) is None, good
    assert _probe(proxies.forbidden, target=site) == "status 403"
    assert _probe(proxies.dead, target=site) == "ConnectionRefusedError"
    without_credentials = "http://" + authed.rsplit("@", 1)[1]
    assert _probe(without_credentials, target=site) == "status 407"
    assert _probe(proxies.slow, target=site, timeout=0.3) == "no answer in 0.3s"
    assert _probe(proxies.healthy[0]) == "nothing to probe with yet"


def test_a_url_probe_gets_the_url_through_the_proxy(proxies: ProxySet, site: str) -> None:
    assert _probe(proxies.healthy[-1], url=f"http://{site}/health") is None
    assert _probe(proxies.healthy[0], url=f"http://{site}/missing") == "status 404"
    assert _probe(proxies.forbidden, url=f"http://{site}/health") == "status 403"


def _proxy_on(port: int, directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(port),
         "--num-acceptors", "1", "--threaded", "--log-level", "WARNING",
         "--basic-auth", ":".join(AUTH), "--data-dir", str(directory),
         "--cache-dir", str(directory / "cache")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_a_recovered_proxy_is_back_within_seconds_by_its_probes(tmp_path: Path, site: str,
                                                                monkeypatch: Any) -> None:
    """The only proxy is down when the crawl starts: it dies on the first request, no further
    request goes to it, and once it listens again its probes bring it back (PROXY_WHEN_NONE's
    default, wait, holds the requests meanwhile) and the crawl completes through it."""
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "MONGO_URI", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    address = f"http://{AUTH[0]}:{AUTH[1]}@127.0.0.1:{port}"
    urls = urls_of(f"http://{site}", 10, "recover")
    crawl = Crawl(tmp_path, urls, ROTATING_PROXY_LIST=[address], CONCURRENT_REQUESTS=1)
    wait_until(lambda: "No usable proxy" in crawl.text(), 30, "the pool empty")
    time.sleep(6)  # a failed probe or two while it is still down
    started = time.monotonic()
    proxy = _proxy_on(port, tmp_path / "proxy")
    try:
        wait_until(lambda: "is back on probation" in crawl.text(), 30, "the proxy back")
        back_after = time.monotonic() - started
        crawl.wait()
    finally:
        proxy.terminate()
        proxy.wait(10)
    stats = crawl.stats
    proxy_id = parse_proxy(address).id
    assert sorted(i["url"] for i in crawl.items) == sorted(urls)
    assert stats["proxy/probes/failed"] >= 1 and stats["proxy/probes/ok"] >= 1
    # one refused request killed it; the rest went through it after its revival
    assert stats[f"proxy/{proxy_id}/requests"] == len(urls) + 1
    assert back_after < 20, f"back {back_after:.1f}s after it listened (PROXY_BACKOFF_BASE 5 s)"
    crawl.assert_no_secret()
