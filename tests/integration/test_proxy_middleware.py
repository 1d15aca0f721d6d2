"""ProxyPoolMiddleware: real crawls through a real HTTP proxy (proxy.py, with Basic auth) plus a
closed port standing for a dead proxy. In process: tests/unit/test_proxy_middleware_unit.py."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from asyncio import run
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.proxies import SECRET, USER
from support.proxycrawl import Crawl, urls_of

from crawler.connections.clients import redis_client
from crawler.localstack.stack import free_port
from crawler.politeness.proxypool import parse_proxy


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


@pytest.fixture(autouse=True)
def _no_services_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "MONGO_URI", "CRAWL_ID"):
        monkeypatch.delenv(name, raising=False)


# -- real crawls (support.proxycrawl.Crawl: a crawl in a subprocess) ----------------------


def test_dead_proxies_are_evicted_after_a_bounded_number_of_requests(
        tmp_path: Path, origin: str, tls_origin: str, proxy_port: int) -> None:
    good = f"http://{USER}:{SECRET}@127.0.0.1:{proxy_port}"
    refused = f"http://{USER}:{SECRET}@127.0.0.1:{free_port()}"  # nothing listens
    wrong = f"http://intruder:{SECRET}-wrong@127.0.0.1:{proxy_port}"  # 407 from proxy.py
    urls = urls_of(origin, 30, "a") + urls_of(tls_origin, 10, "b")  # HTTP and CONNECT
    _Origin.hits.clear()
    crawl = Crawl(tmp_path, urls, ROTATING_PROXY_LIST=[good, refused, wrong],
                  PROXY_BACKOFF_BASE=300)
    crawl.wait()
    stats = crawl.stats
    assert sorted(i["url"] for i in crawl.items) == sorted(urls)
    assert stats["proxy/dead"] == 2 and stats["proxy/retries"] >= 2
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
                  PROXY_BACKOFF_BASE=300, CONCURRENT_REQUESTS=1)
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
                  PROXY_BACKOFF_BASE=300, PROXY_WAIT_MAX=0.3, PROXY_REFRESH_INTERVAL=0.2,
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
