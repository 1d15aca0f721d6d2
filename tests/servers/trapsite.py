"""A site of URL variants and traps for tests/e2e/test_canonical_traps.py (in a thread).

``/`` links to every one of these (:data:`VARIANTS`, :data:`TRAPS`):

- one page written many ways (``/page?utm_source=a``, ``/page;jsessionid=…``, ``#top``…),
  and ``/page?id=7`` twice (with and without ``utm_campaign``): two pages in canonical form;
- ``/calendar?month=YYYY-MM``: links to the next month for ever, a new query each time
  (with ``utm_source=calendar``);
- ``/rel/x/``: a relative link ``x/`` on every page (``/rel/x/x/x/…``); ``/alt/a/``:
  ``b/`` on a page whose last segment is ``a``, ``a/`` on the others (``/alt/a/b/a/b/…``);
- ``/long/yyy…``: a link longer than ``URLLENGTH_LIMIT``;
- redirects: ``/go`` to ``/landing?utm_source=go&sid=1``, ``/bounce`` into the path trap,
  ``/far`` to a URL longer than ``URLLENGTH_LIMIT``.

Every request is counted by its path and query as sent (:attr:`TrapSite.hits`).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from servers.pages import link_page

CAL_START = (2026, 12)
LONG = "/long/" + "y" * 2100  # past URLLENGTH_LIMIT (2083)
VARIANTS = ["/page?utm_source=a", "/page?utm_source=b&utm_medium=email", "/page?gclid=1",
            "/page;jsessionid=ABC123", "/page?fbclid=x&UTM_term=y", "/page#top", "/page",
            "/page?sid=9", "/page?id=7&utm_campaign=z", "/page?id=7"]
TRAPS = ["/calendar?month=2026-12", "/rel/x/", "/alt/a/", LONG, "/go", "/bounce", "/far"]
REDIRECTS = {"/go": "/landing?utm_source=go&sid=1", "/bounce": "/alt/a/b/a/b/a/b/a/",
             "/far": LONG + "z"}
ROBOTS = b"User-agent: *\nDisallow:\n"


def month(step: int) -> str:
    """``YYYY-MM`` of the month *step* months after :data:`CAL_START`."""
    index = CAL_START[0] * 12 + CAL_START[1] - 1 + step
    return f"{index // 12}-{index % 12 + 1:02d}"


class _Handler(BaseHTTPRequestHandler):
    server: TrapSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.saw(self.path)
        status, headers, body = self.server.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class TrapSite(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> TrapSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def saw(self, path: str) -> None:
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1

    def answer(self, target: str) -> tuple[int, dict[str, str], bytes]:
        path = urlsplit(target).path
        if target == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, ROBOTS
        if target == "/":
            absolute = self.base.replace("http://", "HTTP://") + "/page?utm_source=abs"
            return 200, {}, link_page("home", [*VARIANTS, absolute, *TRAPS])
        if target in REDIRECTS:
            return 302, {"Location": REDIRECTS[target]}, b""
        if path == "/calendar":
            current = parse_qs(urlsplit(target).query).get("month", [""])[0]
            after = [month(s + 1) for s in range(1000) if month(s) == current][:1]
            links = [f"/calendar?month={m}&utm_source=calendar" for m in after]
            return 200, {}, link_page(f"calendar {current}", links)
        if path.startswith("/rel/"):
            return 200, {}, link_page(path, ["x/"])
        if path.startswith("/alt/"):
            return 200, {}, link_page(path, ["b/" if path.endswith("/a/") else "a/"])
        if path.startswith(("/page", "/landing", "/long/")):
            return 200, {}, link_page(path, [])
        return 404, {}, b"no such page"
