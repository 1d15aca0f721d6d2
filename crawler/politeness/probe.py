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
import logging
import ssl
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from crawler.politeness.proxypool import Outcome, Proxy, State

if TYPE_CHECKING:
    from crawler.politeness.proxystore import ProxyStore

logger = logging.getLogger(__name__)
NOTHING_YET = "nothing to probe with yet"

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
        return NOTHING_YET
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


class Prober:
    """Probes the dead members of *store*'s pool once their pause is over; while none of
    the pool is usable, every dead one every ``PROXY_BACKOFF_BASE`` seconds."""

    TICK = 1.0  # seconds between two looks for proxies due

    def __init__(self, store: ProxyStore, stats: Any, *, url: str, timeout: float,
                 changed: Callable[[], None], kick: Callable[[], None]) -> None:
        self.store, self.pool, self.stats = store, store.pool, stats
        self.url, self.timeout = url, timeout
        self.changed, self.kick = changed, kick
        self.target = ""  # host:port of the latest answer through the pool
        self._probing: set[str] = set()
        self._probed_at: dict[str, float] = {}

    def due(self) -> list[Proxy]:
        now = self.pool.clock()
        due = {p.id: p for p in self.pool.due(now)}
        counts = self.pool.counts()
        if not counts[State.ALIVE] and not counts[State.PROBATION]:
            base = self.pool.policy.backoff_base
            due.update((i, p) for i, p in self.pool.proxies.items()
                       if now - self._probed_at.get(i, float("-inf")) >= base)
        return [p for i, p in due.items() if i not in self._probing]

    async def run(self) -> None:
        """Probe every proxy due, all at once."""
        todo = self.due()
        if todo:
            await asyncio.gather(*(self._probe(p) for p in todo))

    async def _probe(self, proxy: Proxy) -> None:
        self._probing.add(proxy.id)
        self._probed_at[proxy.id] = self.pool.clock()
        try:
            failed = await probe(proxy, target=self.target, url=self.url,
                                 timeout=self.timeout)
        finally:
            self._probing.discard(proxy.id)
        if failed == NOTHING_YET:
            return
        self.stats.inc_value(f"proxy/probes/{'failed' if failed else 'ok'}")
        self.store.observe(proxy.id, Outcome.PROBE_FAILED if failed else Outcome.PROBE_OK)
        logger.debug("Probe of proxy %s: %s", proxy.id, failed or "through")
        self.changed()
        if not failed and self.store.shared:
            self.kick()
