"""``scrapy cluster dashboard``: a live web page over ``scrapy cluster status``.

:func:`serve` reads the crawl's state from Redis once a second on the caller's
asyncio loop (the same :class:`~crawler.commands.cluster.Reader`,
:class:`~crawler.operations.clusterview.RateTracker` and
:func:`~crawler.operations.clusterview.build_status`
as ``scrapy cluster status --json``) and keeps the latest status in a
:class:`StatusStore`. A :class:`~http.server.ThreadingHTTPServer` in a daemon thread
serves it: ``GET /`` is the page (:mod:`crawler.operations.dashboard_page`, no external
resources), ``GET /api/status`` the status as JSON. It only reads Redis.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from redis.exceptions import RedisError

from crawler.connections.tasks import every
from crawler.operations import clusterview
from crawler.operations.clusterview import RateTracker, Snapshot
from crawler.operations.dashboard_page import PAGE

HOST = "127.0.0.1"
REFRESH = 1.0  # seconds between two reads of Redis


class StatusStore:
    """The latest status (or the latest read error), shared with the HTTP threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._body = json.dumps({"error": "no status read yet"}).encode()
        self._ok = False

    def set_status(self, status: Mapping[str, Any]) -> None:
        body = json.dumps(status, sort_keys=True).encode()
        with self._lock:
            self._body, self._ok = body, True

    def set_error(self, message: str) -> None:
        body = json.dumps({"error": message, "time": time.time()}).encode()
        with self._lock:
            self._body, self._ok = body, False

    def get(self) -> tuple[bool, bytes]:
        """(True, status JSON) or (False, ``{"error": ...}`` JSON)."""
        with self._lock:
            return self._ok, self._body


class Handler(BaseHTTPRequestHandler):
    """``/`` the page, ``/api/status`` the JSON; anything else 404."""

    server: DashboardServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif path == "/api/status":
            ok, body = self.server.store.get()
            self._send(200 if ok else 503, "application/json", body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one request a second per open page: not worth a log line


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: StatusStore) -> None:
        self.store = store
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"


def start_server(store: StatusStore, port: int, host: str = HOST) -> DashboardServer:
    """Bind (port 0: a free port) and serve in a daemon thread; ``shutdown()`` stops it."""
    server = DashboardServer((host, port), store)
    threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True).start()
    return server


def announce(line: str) -> None:
    print(line, flush=True)


Summary = Callable[[float], Awaitable[dict[str, Any] | None]]


async def refresh(read: Callable[[], Awaitable[Snapshot]], rates: RateTracker,
                  stale_after: float, store: StatusStore, describe: str,
                  summary: Summary | None = None) -> None:
    """One read into *store*: the status, or the error that prevented it. With no worker
    left and the crawl marked finished, the status has its *summary* (``finished``)."""
    try:
        snapshot = await read()
    except (RedisError, OSError) as exc:
        store.set_error(f"Redis unreachable at {describe}: {exc}")
        return
    status = clusterview.build_status(snapshot, rates.update(snapshot.workers), stale_after)
    if summary is not None and not snapshot.workers and snapshot.finished_at is not None:
        status["finished"] = await summary(snapshot.finished_at)
    store.set_status(status)


async def serve(read: Callable[[], Awaitable[Snapshot]], stale_after: float, port: int,
                describe: str, *, host: str = HOST,
                ready: Callable[[str], None] = announce, summary: Summary | None = None) -> None:
    """Serve the dashboard and refresh it every second, until cancelled or Ctrl-C.

    *describe* names the Redis server in error messages (a masked URL); *ready*
    gets the line announcing the URL once the server listens.
    """
    store, rates = StatusStore(), RateTracker()
    await refresh(read, rates, stale_after, store, describe, summary)
    server = start_server(store, port, host)
    try:
        ready(f"Dashboard: {server.url}")
        await every(REFRESH, partial(refresh, read, rates, stale_after, store, describe,
                                     summary))
    finally:
        server.shutdown()
        server.server_close()
