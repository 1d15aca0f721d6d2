"""ProxyPoolMiddleware and UserAgentRotationMiddleware: in process, and real crawls through
a real HTTP proxy (proxy.py, with Basic auth) plus a closed port standing for a dead proxy."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from helpers import wait_until
from scrapy import Request, Spider
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.exceptions import (
    CloseSpider,
    DownloadConnectionRefusedError,
    IgnoreRequest,
    NotConfigured,
)
from scrapy.http import Response
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.connections.clients import redis_client
from crawler.frontier.delay import NOT_BEFORE_KEY
from crawler.middlewares.proxies import AVOID_KEY, ID_KEY, ProxyPoolMiddleware
from crawler.middlewares.useragent import UserAgentRotationMiddleware
from crawler.politeness.proxypool import State, parse_proxy

T = TypeVar("T")
USER, SECRET = "crawl", "pr0xy-s3cret"
SECRETS = (SECRET, base64.b64encode(f"{USER}:{SECRET}".encode()).decode())
OURS = "crawler.middlewares.proxies.ProxyPoolMiddleware"
PROXY_ON = {"PROXY_ENABLED": True, "DOWNLOADER_MIDDLEWARES": {OURS: 610}}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# -- services: a local origin (HTTP and HTTPS) and proxy.py ------------------------------
class _Origin(BaseHTTPRequestHandler):
    hits: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.hits.append((self.path, self.headers.get("Proxy-Authorization")))
        body = b"" if self.path == "/empty" else f"<html>{self.path}</html>".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(server: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    yield from (f"http://127.0.0.1:{port}"
                for port in _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Origin)))


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from ipaddress import IPv4Address

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class _TLSServer(ThreadingHTTPServer):
    """TLS handshakes in the request threads: a slow one cannot block the accept loop."""

    context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self.context.wrap_socket(request, server_side=True) as tls:
            super().finish_request(tls, client_address)


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = _TLSServer(("127.0.0.1", 0), _Origin)
    server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.context.load_cert_chain(*_self_signed(tmp_path_factory.mktemp("tls")))
    yield from (f"https://127.0.0.1:{port}" for port in _serve(server))


@pytest.fixture(scope="module")
def proxy_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """proxy.py on a free loopback port, Basic auth USER:SECRET; stopped by its PID."""
    directory = tmp_path_factory.mktemp("proxy")
    port_file = directory / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
         "--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1",
         "--basic-auth", f"{USER}:{SECRET}", "--log-level", "WARNING"],
        cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text().strip()):
            assert process.poll() is None and time.monotonic() < deadline, "proxy.py did not start"
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: only what it started
            process.wait(10)


# -- in process -------------------------------------------------------------------------
class ProxySpider(Spider):
    name = "proxies"


GOOD = f"http://{USER}:{SECRET}@127.0.0.1:3128"
OTHER = "http://127.0.0.2:3128"


def make(proxies: list[str], **settings: Any) -> ProxyPoolMiddleware:
    crawler = get_crawler(ProxySpider, {**PROXY_ON, "ROTATING_PROXY_LIST": proxies, **settings})
    crawler.spider = ProxySpider.from_crawler(crawler)
    middleware: ProxyPoolMiddleware = build_from_crawler(ProxyPoolMiddleware, crawler)
    run(middleware.spider_opened())
    return middleware


def stats(middleware: ProxyPoolMiddleware) -> dict[str, Any]:
    return middleware.stats.get_stats()  # type: ignore[no-any-return]


def kill(middleware: ProxyPoolMiddleware, address: str) -> None:
    """Ban *address* (the only proxy of the pool) through the middleware."""
    request = Request("http://example.com/banned")
    run(middleware.process_request(request))
    assert request.meta[ID_KEY] == parse_proxy(address).id
    run(middleware.process_response(request, Response(request.url, status=403,
                                                       request=request)))
    assert middleware.pool.get(parse_proxy(address).id).state is State.DEAD


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "MONGO_URI", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


def test_not_configured_unless_enabled() -> None:
    with pytest.raises(NotConfigured):
        build_from_crawler(ProxyPoolMiddleware, get_crawler(ProxySpider, {}))


@pytest.mark.parametrize(("settings", "named"), [
    ({"PROXY_WHEN_NONE": "sometimes"}, "PROXY_WHEN_NONE"),
    ({"PROXY_BAN_POLICY": "no.such.Policy"}, "PROXY_BAN_POLICY"),
    ({"PROXY_BACKOFF_BASE": 0}, "PROXY_BACKOFF_BASE"),
    ({"ROTATING_PROXY_LIST": [GOOD, f"ftp://{USER}:{SECRET}@h:1"]}, "ROTATING_PROXY_LIST"),
    ({"ROTATING_PROXY_LIST_PATH": "/nonexistent/proxies.txt"}, "ROTATING_PROXY_LIST_PATH"),
    ({"DOWNLOADER_MIDDLEWARES": {OURS: 800}}, "DOWNLOADER_MIDDLEWARES"),
    ({"HTTPPROXY_ENABLED": False}, "HTTPPROXY_ENABLED"),
])
def test_bad_settings_are_named_without_credentials(settings: dict[str, Any], named: str) -> None:
    crawler = get_crawler(ProxySpider, {**PROXY_ON, **settings})
    with pytest.raises(SettingError) as info:
        build_from_crawler(ProxyPoolMiddleware, crawler)
    assert info.value.setting == named
    assert_no_secret(str(info.value))


def test_an_unreachable_shared_store_closes_the_spider(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    crawler = get_crawler(ProxySpider, {**PROXY_ON, "ROTATING_PROXY_LIST": [GOOD],
                                        "REDIS_URL": unreachable, "CONNECT_TIMEOUT": 0.5})
    middleware = build_from_crawler(ProxyPoolMiddleware, crawler)
    assert type(middleware.store).__name__ == "RedisProxyStore"
    with pytest.raises(CloseSpider) as info:
        run(middleware.spider_opened())
    assert info.value.reason == "proxy_pool_unavailable"
    run(middleware.spider_closed())
    assert "Cannot start the proxy pool" in caplog.text
    assert_no_secret(caplog.text)


def test_proxies_come_from_a_file_too(tmp_path: Path) -> None:
    listing = tmp_path / "proxies.txt"
    listing.write_text(f"# the pool\n{GOOD}\n\n127.0.0.3:8080\n")
    middleware = make([OTHER], ROTATING_PROXY_LIST_PATH=str(listing))
    assert set(middleware.pool.proxies) == {parse_proxy(a).id
                                            for a in (GOOD, OTHER, "127.0.0.3:8080")}


def test_credentials_travel_only_in_the_proxy_authorization_header() -> None:
    middleware = make([GOOD])
    httpproxy = HttpProxyMiddleware.from_crawler(get_crawler(ProxySpider))
    request = Request("http://example.com/a")
    assert run(middleware.process_request(request)) is None
    proxy_id = parse_proxy(GOOD).id
    assert request.meta["download_slot"] == f"proxy:{proxy_id}" and request.meta[ID_KEY] == proxy_id
    httpproxy.process_request(request)
    assert request.meta["proxy"] == "http://127.0.0.1:3128"
    assert request.headers["Proxy-Authorization"] == b"Basic " + SECRETS[1].encode()
    response = Response(request.url, body=b"ok", request=request)
    assert run(middleware.process_response(request, response)) is response
    assert b"Proxy-Authorization" not in request.headers  # the request object may live on
    assert stats(middleware)["proxy/requests"] == 1
    assert stats(middleware)[f"proxy/{proxy_id}/requests"] == 1
    assert_no_secret(repr(stats(middleware)), repr(request.meta))


def test_a_banned_request_comes_back_as_a_fresh_copy_for_another_proxy() -> None:
    middleware = make([GOOD, OTHER], PROXY_BAN_RETRIES=2, PROXY_BACKOFF_BASE=0.01)
    request = Request("http://example.com/a", meta={"crawler_lease": 7}, priority=3)
    run(middleware.process_request(request))
    first = request.meta[ID_KEY]
    request.headers["Proxy-Authorization"] = b"Basic c2VjcmV0"  # as HttpProxyMiddleware would
    banned = Response(request.url, status=403, body=b"go away", request=request)
    retry = run(middleware.process_response(request, banned))
    assert isinstance(retry, Request) and retry is not request
    assert retry.dont_filter and retry.priority == 3 and retry.meta["crawler_lease"] == 7
    assert retry.meta[AVOID_KEY] == [first] and "proxy" not in retry.meta
    assert "download_slot" not in retry.meta and b"Proxy-Authorization" not in retry.headers
    assert "retry_times" not in retry.meta  # a ban retry is not one of RETRY_TIMES
    run(middleware.process_request(retry))
    assert retry.meta[ID_KEY] != first  # the other proxy
    assert middleware.pool.get(first).state is State.DEAD
    assert stats(middleware)["proxy/bans"] == 1 and stats(middleware)["proxy/dead"] == 1
    # the first one comes back on probation after its pause: avoided but usable
    wait_until(lambda: middleware.pool.get(first).state is State.PROBATION, 10, "probation")
    again = run(middleware.process_response(retry, Response(retry.url, status=429,
                                                             request=retry)))
    assert isinstance(again, Request) and len(again.meta[AVOID_KEY]) == 2
    run(middleware.process_request(again))
    final = Response(again.url, status=429, request=again)
    assert run(middleware.process_response(again, final)) is final  # out of ban retries
    assert stats(middleware)["proxy/ban_retries"] == 2
    assert stats(middleware)["proxy/ban_retries_exhausted"] == 1


def test_connection_errors_through_a_proxy_are_bans_other_exceptions_pass() -> None:
    middleware = make([GOOD, OTHER])
    request = Request("http://example.com/a")
    run(middleware.process_request(request))
    assert run(middleware.process_exception(request, IgnoreRequest("robots"))) is None
    retry = run(middleware.process_exception(request, DownloadConnectionRefusedError("no")))
    assert isinstance(retry, Request) and stats(middleware)["proxy/bans"] == 1


def test_a_proxy_chosen_by_the_spider_is_left_alone() -> None:
    middleware = make([GOOD])
    for proxy in ("http://10.9.9.9:1", None):
        request = Request("http://example.com/", meta={"proxy": proxy})
        run(middleware.process_request(request))
        assert request.meta["proxy"] == proxy and ID_KEY not in request.meta
    assert "proxy/requests" not in stats(middleware)


def test_when_none_direct_sends_without_a_proxy() -> None:
    middleware = make([OTHER], PROXY_WHEN_NONE="direct")
    kill(middleware, OTHER)
    request = Request("http://example.com/", meta={"download_slot": "proxy:x"})
    assert run(middleware.process_request(request)) is None
    assert request.meta["proxy"] is None and "download_slot" not in request.meta
    assert stats(middleware)["proxy/none_usable"] == 1 and stats(middleware)["proxy/direct"] == 1


def test_when_none_fail_ignores_the_request_with_a_reason() -> None:
    middleware = make([OTHER], PROXY_WHEN_NONE="fail")
    kill(middleware, OTHER)
    with pytest.raises(IgnoreRequest, match=r"No usable proxy .*PROXY_WHEN_NONE=fail"):
        run(middleware.process_request(Request("http://example.com/")))
    assert stats(middleware)["proxy/none_usable"] == 1


def test_when_none_wait_hands_the_request_to_the_frontier_until_the_first_revival() -> None:
    middleware = make([OTHER], SCHEDULER="crawler.frontier.scheduler.KafkaScheduler",
                      PROXY_BACKOFF_BASE=20)
    killed = time.time()
    kill(middleware, OTHER)
    request = Request("http://example.com/", meta={"crawler_lease": 3})
    started = time.time()
    delayed = run(middleware.process_request(request))
    returned = time.time()
    assert isinstance(delayed, Request) and delayed.dont_filter
    assert delayed.meta["crawler_lease"] == 3
    # due when the proxy revives: PROXY_BACKOFF_BASE after it died (before *started*)
    assert killed + 20 - 0.01 <= delayed.meta[NOT_BEFORE_KEY] <= returned + 20 + 0.01
    # it came back at once instead of sleeping out the 20 s (a generous ceiling)
    assert returned - started < 10 and stats(middleware)["proxy/none_usable"] == 1


def test_when_none_wait_sleeps_on_one_node_until_a_proxy_is_back() -> None:
    middleware = make([OTHER], PROXY_BACKOFF_BASE=0.3)
    kill(middleware, OTHER)
    request = Request("http://example.com/")
    started = time.monotonic()
    assert run(middleware.process_request(request)) is None
    # it slept until the revival (a lower bound), not PROXY_WAIT_MAX (30 s) or for ever
    assert 0.25 <= time.monotonic() - started < 20
    assert request.meta[ID_KEY] == parse_proxy(OTHER).id
    run(middleware.spider_closed())
    assert stats(middleware)["proxy/revived"] == 1
    assert stats(middleware)["proxy/pool/probation"] == 1


def test_no_credentials_in_logs_or_stats(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    middleware = make([GOOD, OTHER], PROXY_WHEN_NONE="fail", PROXY_BAN_RETRIES=1)
    for n in range(6):
        request = Request(f"http://example.com/{n}")
        try:
            run(middleware.process_request(request))
        except IgnoreRequest as exc:
            assert_no_secret(str(exc))
            continue
        run(middleware.process_response(request, Response(request.url, status=407,
                                                          request=request)))
    run(middleware.spider_closed())
    assert stats(middleware)["proxy/dead"] == 2 and "No usable proxy" in caplog.text
    assert parse_proxy(GOOD).id in caplog.text  # proxies are named, by their id
    assert_no_secret(caplog.text, repr(stats(middleware)))


def test_user_agents_rotate_unless_the_spider_set_one() -> None:
    agents = ["UA one, (KHTML, like Gecko)", "UA two"]
    crawler = get_crawler(ProxySpider, {"USERAGENT_ROTATION_ENABLED": True,
                                        "USERAGENT_LIST": "\n".join(agents),
                                        "USER_AGENT": "Scrapy/2 (+x)"})
    middleware = build_from_crawler(UserAgentRotationMiddleware, crawler)
    seen = set()
    for n in range(50):  # Scrapy's default (its UserAgentMiddleware ran first), or none
        headers = {"User-Agent": "Scrapy/2 (+x)"} if n % 2 else {}
        request = Request("http://example.com/", headers=headers)
        middleware.process_request(request)
        seen.add(request.headers.to_unicode_dict()["User-Agent"])
    assert seen == set(agents)
    mine = Request("http://example.com/", headers={"User-Agent": "mine"})
    middleware.process_request(mine)
    assert mine.headers["User-Agent"] == b"mine"
    with pytest.raises(NotConfigured):
        build_from_crawler(UserAgentRotationMiddleware, get_crawler(ProxySpider))
    with pytest.raises(SettingError, match="USERAGENT_LIST"):
        build_from_crawler(UserAgentRotationMiddleware, get_crawler(
            ProxySpider, {"USERAGENT_ROTATION_ENABLED": True}))


# -- real crawls --------------------------------------------------------------------------
CRAWL = textwrap.dedent("""
    import json, sys
    import scrapy
    from scrapy.crawler import CrawlerProcess

    config = json.loads(sys.argv[1])

    class PagesSpider(scrapy.Spider):
        name = "pages"

        async def start(self):
            for url in config["urls"]:
                yield scrapy.Request(url)

        def parse(self, response):
            yield {"url": response.url, "status": response.status}

    process = CrawlerProcess(settings=config["settings"], install_root_handler=True)
    crawler = process.create_crawler(PagesSpider)
    process.crawl(crawler)
    process.start()
    stats = {k: v if isinstance(v, (int, float)) else str(v)
             for k, v in crawler.stats.get_stats().items()}
    with open(config["stats"], "w") as f:
        json.dump(stats, f)
""")


class Crawl:
    """A crawl of *urls* in a subprocess: its log (DEBUG), stats and items."""

    def __init__(self, tmp_path: Path, urls: list[str], **settings: Any) -> None:
        self.dir = tmp_path
        (tmp_path / "crawl.py").write_text(CRAWL)
        self.log, self.items_path = tmp_path / "crawl.log", tmp_path / "items.jsonl"
        config = {"urls": urls, "stats": str(tmp_path / "stats.json"), "settings": {
            **PROXY_ON, "LOG_LEVEL": "DEBUG", "LOG_FILE": str(self.log),
            "FEEDS": {str(self.items_path): {"format": "jsonlines"}},
            "CONCURRENT_REQUESTS": 8, "DOWNLOAD_TIMEOUT": 10, **settings}}
        self.process = subprocess.Popen(
            [sys.executable, str(tmp_path / "crawl.py"), json.dumps(config)], cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(self, timeout: float = 60) -> None:
        output, _ = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, output[-3000:]
        assert "Traceback" not in self.text(), self.text()[-3000:]

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    @property
    def stats(self) -> dict[str, Any]:
        return json.loads((self.dir / "stats.json").read_text())  # type: ignore[no-any-return]

    @property
    def items(self) -> list[dict[str, Any]]:
        if not self.items_path.exists():
            return []
        return [json.loads(line) for line in self.items_path.read_text().splitlines()]

    def assert_no_secret(self) -> None:
        assert_no_secret(self.text(), json.dumps(self.stats), self.items_path.read_text()
                         if self.items_path.exists() else "")


def urls_of(base: str, count: int, prefix: str) -> list[str]:
    return [f"{base}/{prefix}/{n}" for n in range(count)]


def test_dead_proxies_are_evicted_after_a_bounded_number_of_requests(
        tmp_path: Path, origin: str, tls_origin: str, proxy_port: int) -> None:
    good = f"http://{USER}:{SECRET}@127.0.0.1:{proxy_port}"
    refused = f"http://{USER}:{SECRET}@127.0.0.1:{free_port()}"  # nothing listens
    wrong = f"http://intruder:{SECRET}-wrong@127.0.0.1:{proxy_port}"  # 407 from proxy.py
    urls = urls_of(origin, 30, "a") + urls_of(tls_origin, 10, "b")  # HTTP and CONNECT
    _Origin.hits.clear()
    crawl = Crawl(tmp_path, urls, ROTATING_PROXY_LIST=[good, refused, wrong],
                  PROXY_BACKOFF_BASE=600)
    crawl.wait()
    stats = crawl.stats
    assert sorted(i["url"] for i in crawl.items) == sorted(urls)
    assert stats["proxy/dead"] == 2 and stats["proxy/ban_retries"] >= 2
    for dead in (refused, wrong):  # at most what was in flight when it died
        assert 1 <= stats.get(f"proxy/{parse_proxy(dead).id}/requests", 0) <= 8
    assert stats[f"proxy/{parse_proxy(good).id}/requests"] >= len(urls)
    assert len(_Origin.hits) == len(urls)  # each page once, every one through the proxy
    assert all(auth is None for _, auth in _Origin.hits)  # the proxy kept the credentials
    assert "retry/count" not in stats  # bans were re-issued, not retried
    crawl.assert_no_secret()


@pytest.mark.parametrize("mode", ["direct", "fail"])
def test_when_no_proxy_is_usable_in_a_real_crawl(tmp_path: Path, origin: str, mode: str) -> None:
    refused = f"http://{USER}:{SECRET}@127.0.0.1:{free_port()}"
    urls = urls_of(origin, 10, f"when-none-{mode}")
    crawl = Crawl(tmp_path, urls, ROTATING_PROXY_LIST=[refused], PROXY_WHEN_NONE=mode,
                  PROXY_BACKOFF_BASE=600, CONCURRENT_REQUESTS=1)
    crawl.wait()
    assert crawl.stats["proxy/none_usable"] >= len(urls) - 1
    if mode == "direct":
        assert len(crawl.items) == len(urls) and crawl.stats["proxy/direct"] >= len(urls) - 1
    else:
        assert crawl.items == [] and "PROXY_WHEN_NONE=fail" in crawl.text()
    crawl.assert_no_secret()


def test_wait_mode_picks_up_a_proxy_an_operator_adds_live(
        tmp_path: Path, origin: str, proxy_port: int, redis_url: str, crawl_id: str) -> None:
    good = f"http://{USER}:{SECRET}@127.0.0.1:{proxy_port}"
    refused = f"http://{USER}:{SECRET}@127.0.0.1:{free_port()}"
    urls = urls_of(origin, 10, "wait")
    crawl = Crawl(tmp_path, urls, ROTATING_PROXY_LIST=[refused], PROXY_WHEN_NONE="wait",
                  PROXY_BACKOFF_BASE=600, PROXY_WAIT_MAX=0.3, PROXY_REFRESH_INTERVAL=0.2,
                  REDIS_URL=redis_url, CRAWL_ID=crawl_id)
    deadline = time.monotonic() + 30
    while "No usable proxy" not in crawl.text():
        assert crawl.process.poll() is None and time.monotonic() < deadline, crawl.text()[-3000:]
        time.sleep(0.1)

    async def add() -> None:
        client = redis_client(redis_url)
        await client.sadd(f"{{{crawl_id}}}:proxies", good)
        await client.aclose()

    run(add())
    crawl.wait()
    assert sorted(i["url"] for i in crawl.items) == sorted(urls)
    assert crawl.stats["proxy/none_usable"] >= 1 and "Proxy pool edited: added" in crawl.text()
    assert crawl.stats[f"proxy/{parse_proxy(good).id}/requests"] == len(urls)
    crawl.assert_no_secret()
