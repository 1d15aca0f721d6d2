"""An origin that answers *status* (429 or 503, no Retry-After) to any request that comes
while its token bucket (``rate`` a second, a burst of ``burst``) is empty, in a thread.

``/`` links to ``/p/0`` ... ``/p/<pages - 1>``; robots.txt is a 404 and is never throttled.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers.pages import link_page


class _Handler(BaseHTTPRequestHandler):
    server: Throttled

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        status, body = self.server.answer(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Throttled(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: int, status: int, rate: float, burst: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages, self.status, self.rate, self.burst = pages, status, rate, burst
        self.tokens, self.at = burst, time.monotonic()
        self.answers: list[tuple[float, str, int]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path: str) -> tuple[int, bytes]:
        if path == "/robots.txt":
            return 404, b""
        status = 200 if self._take() else self.status
        self.answers.append((time.monotonic(), path, status))
        if status != 200:
            return status, b"slow down"
        if path == "/":
            return 200, link_page("index", [f"/p/{i}" for i in range(self.pages)])
        return 200, link_page(path, ["/"])

    def _take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True

    def refused(self) -> int:
        return sum(1 for _at, _path, status in self.answers if status != 200)

    def close(self) -> None:
        self.shutdown()
        self.server_close()
