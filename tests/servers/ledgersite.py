"""A site with every way a URL can end, for the crawl ledger's tests (in a thread).

``/`` links to a tree of ``PAGES`` pages (``/p/<n>`` links to ``/p/<2n+1>``, ``/p/<2n+2>``),
and to one of each: a broken link (``/missing/<n>``: 404), a redirect (``/moved`` -> 301
``/landing``), an off-site link (another loopback address), a path robots.txt forbids
(``/private/secret``), a chain deeper than the depth limit (``/deep/<k>`` links to
``/deep/<k+1>`` up to ``DEEP``), a page that always answers 500 (``/flaky``) and a page
titled "reject me" (``/odd``). Only seeds
reach ``/seeded/<n>``. Each 200 answer is remembered (:attr:`LedgerSite.ok`).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers.pages import link_page

PAGES = 400
DEEP = 40  # past distributed mode's DEPTH_LIMIT (32)
LATENCY = 0.01
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


class _Handler(BaseHTTPRequestHandler):
    server: LedgerSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        time.sleep(LATENCY)
        status, headers, body = self.server.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if status == 200:
            self.server.saw(self.path)


class LedgerSite(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, offsite: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.offsite = offsite  # an absolute URL on another host
        self.ok: set[str] = set()
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> LedgerSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def saw(self, path: str) -> None:
        with self._lock:
            self.ok.add(path)

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, ROBOTS
        if path == "/":
            links = ["/p/0", "/missing/1", "/moved", self.offsite, "/private/secret",
                     "/deep/1", "/flaky", "/odd"]
            return 200, {}, link_page("home", links)
        if path == "/moved":
            return 301, {"Location": "/landing"}, b""
        if path == "/flaky":
            return 500, {}, b"broken for good"
        if path == "/odd":
            return 200, {}, link_page("reject me", [])
        for prefix, render in (("/p/", self._tree), ("/deep/", self._deep),
                               ("/seeded/", self._leaf), ("/landing", self._leaf)):
            if path.startswith(prefix):
                return render(path[len(prefix):])
        return 404, {}, b"no such page"

    def _tree(self, rest: str) -> tuple[int, dict[str, str], bytes]:
        if not rest.isdigit() or int(rest) >= PAGES:
            return 404, {}, b"no such page"
        n = int(rest)
        links = [f"/p/{c}" for c in (2 * n + 1, 2 * n + 2) if c < PAGES]
        return 200, {}, link_page(f"page {n}", [*links, "/", f"/missing/{n}"])

    def _deep(self, rest: str) -> tuple[int, dict[str, str], bytes]:
        k = int(rest) if rest.isdigit() else DEEP
        links = [f"/deep/{k + 1}"] if k < DEEP else []
        return 200, {}, link_page(f"deep {k}", links)

    @staticmethod
    def _leaf(_rest: str) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, link_page("leaf", [])

    def pages(self) -> set[str]:
        """The URLs of every page served with a 200 (robots.txt aside): one item each."""
        with self._lock:
            return {self.base + p for p in self.ok if p != "/robots.txt"}
