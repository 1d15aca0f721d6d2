"""Probes of dead proxies: one small exchange through the proxy, never a crawl request.

With ``PROXY_PROBE_URL`` empty (the default) a probe asks the proxy to ``CONNECT`` to a
host the crawl knows, the ``host:port`` of its latest answer through the pool, and
passes on ``200``. With a URL, it sends ``GET <url>`` through the proxy (for an ``https``
URL, ``CONNECT`` to its host) and passes on a status below 400. A probe carries the
proxy's credentials and reads nothing but the status line; it gives up after
``PROXY_PROBE_TIMEOUT`` seconds. Some proxies only tunnel to port 443 (tinyproxy's
``ConnectPort``, squid's ``SSL_ports``): give them a ``PROXY_PROBE_URL``.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from contextlib import suppress
from urllib.parse import unquote, urlsplit

from crawler.politeness.proxypool import Proxy

MAX_STATUS_LINE = 1024


def _request(proxy: Proxy, target: str, url: str) -> bytes:
    parts = urlsplit(proxy.url)
    lines = [f"GET {url} HTTP/1.1", f"Host: {urlsplit(url).netloc}"] if url else \
        [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Proxy-Authorization: Basic " + base64.b64encode(pair.encode()).decode())
    lines += ["Connection: close", "", ""]
    return "\r\n".join(lines).encode()


def connect_target(url: str) -> str:
    """``host:port`` to ``CONNECT`` to for *url* (an https URL's probe)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def probe(proxy: Proxy, *, target: str = "", url: str = "",
                timeout: float = 5.0) -> str | None:
    """None if *proxy* got through to *target* (``host:port``) or *url*, else why not."""
    if url.startswith("https://"):
        target, url = connect_target(url), ""
    if not target and not url:
        return "nothing to probe with yet"
    try:
        return await asyncio.wait_for(_exchange(proxy, target, url), timeout)
    except TimeoutError:
        return f"no answer in {timeout:g}s"
    except (OSError, ssl.SSLError, ValueError) as exc:
        return type(exc).__name__


async def _exchange(proxy: Proxy, target: str, url: str) -> str | None:
    parts = urlsplit(proxy.url)
    secure = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if secure else 80)
    reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=secure)
    try:
        writer.write(_request(proxy, target, url))
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
        with suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    return _judge(line[:MAX_STATUS_LINE], connect=not url)


def _judge(line: bytes, *, connect: bool) -> str | None:
    fields = line.split()
    if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        return "no HTTP answer"
    status = int(fields[1])
    good = 200 <= status < 300 if connect else status < 400
    return None if good else f"status {status}"
