"""A small web of hosts on loopback addresses (``127.0.1.<n>``, one threaded server each),
each with its own robots.txt, for the cluster-wide robots.txt tests.

Every host serves ``/`` (links to its pages, to ``/private/<k>`` and to every other host's
``/``), ``/p/<i>`` (a page) and ``/private/<k>``. What each host's robots.txt answers is its
:class:`HostSpec`; a ``flaky`` host answers 503 until ``recover_after`` seconds after its
first robots.txt request; a ``sitemap`` host's robots.txt names a sitemap index, whose one
gzip sitemap lists ``/hidden/<i>`` pages no page links to. Every request is logged with its
arrival time.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers.pages import link_page

PRIVATE = 3  # /private/<k> links on each index
HIDDEN = 2  # /hidden/<i> pages a sitemap host lists in its sitemap and links nowhere


@dataclass(frozen=True)
class HostSpec:
    name: str
    pages: int
    robots: bytes | None  # None: 404
    flaky: bool = False  # robots.txt answers 503 until recover_after s after its first fetch
    recover_after: float = 3.0
    sitemap: bool = False  # robots.txt names a sitemap index -> a gzip sitemap -> /hidden/<i>


@dataclass(frozen=True)
class Hit:
    at: float
    host: str  # the spec's name
    path: str
    status: int


class _Handler(BaseHTTPRequestHandler):
    server: _Host

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        status, body = self.server.answer(self.path)
        self.server.web.log.append(Hit(time.time(), self.server.spec.name, self.path, status))
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if self.path.endswith(".txt")
                         else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Host(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: str, spec: HostSpec, web: RobotsWeb) -> None:
        super().__init__((address, 0), _Handler)
        self.spec, self.web = spec, web
        self.first_robots: float | None = None

    @property
    def base(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"

    def answer(self, path: str) -> tuple[int, bytes]:
        if path == "/robots.txt":
            return self._robots()
        if path == "/":
            links = [f"/p/{i}" for i in range(self.spec.pages)]
            links += [f"/private/{k}" for k in range(PRIVATE)]
            links += [h.base + "/" for h in self.web.hosts if h is not self]
            return 200, link_page(self.spec.name, links)
        if path.startswith(("/p/", "/private/", "/hidden/")):
            return 200, link_page(f"{self.spec.name} {path}", ["/"])
        if self.spec.sitemap and path in ("/sitemap_index.xml", "/sitemap1.xml.gz"):
            return 200, self._sitemap(path)
        return 404, b"not found"

    def _sitemap(self, path: str) -> bytes:
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        if path == "/sitemap_index.xml":
            return (f'<?xml version="1.0"?><sitemapindex {ns}><sitemap><loc>{self.base}'
                    f'/sitemap1.xml.gz</loc></sitemap></sitemapindex>').encode()
        urls = "".join(f"<url><loc>{self.base}/hidden/{i}</loc></url>" for i in range(HIDDEN))
        return gzip.compress(f'<?xml version="1.0"?><urlset {ns}>{urls}</urlset>'.encode())

    def _robots(self) -> tuple[int, bytes]:
        now = time.time()
        if self.first_robots is None:
            self.first_robots = now
        if self.spec.flaky and now < self.first_robots + self.spec.recover_after:
            return 503, b"busy"
        if self.spec.robots is None:
            return 404, b"no robots here"
        if self.spec.sitemap:
            return 200, self.spec.robots + f"Sitemap: {self.base}/sitemap_index.xml\n".encode()
        return 200, self.spec.robots


class RobotsWeb:
    """The hosts of *specs*, the n-th on ``<network>.<n+1>``; ``close()`` when done."""

    def __init__(self, specs: list[HostSpec], network: str = "127.0.1") -> None:
        self.log: list[Hit] = []  # list.append is atomic: handler threads need no lock
        self.hosts = [_Host(f"{network}.{n + 1}", spec, self) for n, spec in enumerate(specs)]
        self._threads = [threading.Thread(target=h.serve_forever, daemon=True)
                         for h in self.hosts]
        for thread in self._threads:
            thread.start()

    def host(self, name: str) -> _Host:
        return next(h for h in self.hosts if h.spec.name == name)

    def hits(self, name: str, path: str | None = None) -> list[Hit]:
        return [h for h in self.log if h.host == name and (path is None or h.path == path)]

    def close(self) -> None:
        for host in self.hosts:
            host.shutdown()
            host.server_close()
