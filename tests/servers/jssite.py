"""A site whose links exist only once JavaScript has run, for the browser tests (a thread).

``/p/<n>`` (``n`` from 0 to ``pages - 1``) is a page with no ``<a href>`` at all: its
script ``/app.js`` adds, 150 ms after the page has loaded, a link to each of its children
``3n+1 .. 3n+3`` (a tree: 40 pages are four levels deep), then ``<p id="ready">``. A
client that does not run scripts finds no link; one that reads the page as soon as it has
loaded finds none either: it must wait for ``#ready`` (a page method). Every page answer
is held back ``delay`` seconds. ``/status/<code>`` answers that status with a page.
``/reset/<k>/<name>`` resets the connection (no answer, SO_LINGER 0) the first *k* times it is
asked for, then answers a page.

The server logs each request's path and ``User-Agent``, and counts the page requests in
flight at once (:attr:`JsSite.peak`).
"""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers import faultorigin

CHILDREN = 3
SCRIPT = b"""
const body = document.body, n = Number(body.dataset.page), total = Number(body.dataset.pages);
window.addEventListener("load", () => setTimeout(() => {
  for (let child = CHILDREN * n + 1; child <= CHILDREN * n + CHILDREN; child++) {
    if (child >= total) break;
    const link = document.createElement("a");
    link.href = "/p/" + child;
    link.textContent = "page " + child;
    body.append(link);
  }
  const ready = document.createElement("p");
  ready.id = "ready";
  body.append(ready);
}, 150));
""".replace(b"CHILDREN", str(CHILDREN).encode())
_PAGE = re.compile(r"^/p/(\d+)$")
_STATUS = re.compile(r"^/status/(\d{3})$")
_RESET = re.compile(r"^/reset/(\d+)/")


def page_html(number: int, pages: int) -> bytes:
    return (f"<html><head><title>Page {number}</title></head>"
            f'<body data-page="{number}" data-pages="{pages}"><h1>Page {number}</h1>'
            '<script src="/app.js"></script></body></html>').encode()


class _Handler(BaseHTTPRequestHandler):
    server: JsSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.log.append((path, self.headers.get("User-Agent", "")))
        if path == "/app.js":
            self._send(200, "application/javascript", SCRIPT)
            return
        page, status, reset = _PAGE.match(path), _STATUS.match(path), _RESET.match(path)
        if reset and self.server.paths().count(path) <= int(reset[1]):
            faultorigin.reset(self)
        elif reset:
            self._send(200, "text/html", page_html(0, 0))
        elif page and int(page[1]) < self.server.pages:
            with self.server.in_flight():
                time.sleep(self.server.delay)
                self._send(200, "text/html", page_html(int(page[1]), self.server.pages))
        elif status:
            self._send(int(status[1]), "text/html", page_html(0, 0))
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, status: int, kind: str, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # a browser killed with its worker
            pass


class JsSite(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: int = 40, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages, self.delay = pages, delay
        self.log: list[tuple[str, str]] = []  # (path, User-Agent) of every request
        self.peak = 0  # the most page requests in flight at once
        self._now = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def urls(self) -> list[str]:
        return [f"{self.base}/p/{n}" for n in range(self.pages)]

    def paths(self) -> list[str]:
        return [path for path, _agent in self.log]

    def in_flight(self) -> _InFlight:
        return _InFlight(self)

    def start(self) -> JsSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def _begin(self) -> None:
        with self._lock:
            self._now += 1
            self.peak = max(self.peak, self._now)

    def _end(self) -> None:
        with self._lock:
            self._now -= 1


class _InFlight:
    def __init__(self, site: JsSite) -> None:
        self._site = site

    def __enter__(self) -> None:
        self._site._begin()

    def __exit__(self, *exc: object) -> None:
        self._site._end()


def main() -> None:  # python -m servers.jssite [pages] [delay], from tests/
    import sys

    site = JsSite(int(sys.argv[1]) if len(sys.argv) > 1 else 40,
                  float(sys.argv[2]) if len(sys.argv) > 2 else 0.0).start()
    print(site.base, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
