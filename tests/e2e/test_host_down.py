"""A host that stops answering mid-crawl is paused, probed, and its pages wait for it.

Two workers at the default settings crawl 60 pages of an origin whose pages take 0.5 s.
After its 12th page the origin resets every connection for 12 s (SO_LINGER 0, no answer),
then answers again. The host breaker (``HOSTBREAKER_FAILURES`` 5, ``HOSTBREAKER_PAUSE`` 15 s)
pauses the host after five failures in a row: its requests wait in the buffer, one probe per
worker per pause, and every page is stored once after the origin is back, none failed.
Without the breaker (``HOSTBREAKER_FAILURES=0``) each request spends its network retries
(``RETRY_NETWORK_TIMES`` 4, backoff from 1 s) within the 12 s and is recorded failed.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import SHORT_IDLE, ledger_report
from servers.pages import link_page

from crawler.localstack.demo import running, stored_pages, wait_all, worker_command

pytestmark = pytest.mark.e2e
PAGES, DOWN_AFTER, DOWN_FOR, PAGE_TIME = 60, 12, 12.0, 0.5


class _Handler(BaseHTTPRequestHandler):
    server: Flaky

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.server.down(self.path):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if self.path == "/robots.txt":
            body, status = b"", 404
        else:
            time.sleep(PAGE_TIME if self.path != "/" else 0)
            hrefs = [f"/p/{n}" for n in range(PAGES)] if self.path == "/" else ["/"]
            body, status = link_page(self.path, hrefs), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Flaky(ThreadingHTTPServer):
    """Answers until DOWN_AFTER pages have been asked for, resets for DOWN_FOR s, answers."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages, self.resets, self.since = 0, 0, 0.0
        self._lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def down(self, path: str) -> bool:
        with self._lock:
            now = time.monotonic()
            if self.since and now - self.since < DOWN_FOR:
                self.resets += 1
                return True
            if path.startswith("/p/"):
                self.pages += 1
                if self.pages == DOWN_AFTER:
                    self.since = now
            return False

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def test_a_host_that_stops_answering_is_paused_and_loses_no_page(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    origin = Flaky()
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    try:
        # SHORT_IDLE only shortens the wait once the crawl drained
        with running(2, worker_command(origin.base + "/", SHORT_IDLE), env, tmp_path) as ws:
            assert wait_all(ws, timeout=300) == [0, 0]
            logs = "".join(Path(w.log.name).read_text(errors="replace") for w in ws)
    finally:
        origin.close()
    print(f"{origin.resets} connections reset while down")  # for -s
    assert origin.since, "the origin never went down: the test proves nothing"
    report = ledger_report(crawl_id, env)
    assert report["requests"].get("failed", {}) == {}, report
    assert stored_pages(env["MONGO_URI"], "crawler", crawl_id) == (PAGES + 1, PAGES + 1)
    assert "failed 5 times in a row without an answer" in logs
    # per worker: what it had in flight when the origin went down and what it sent while the
    # first failures came back (a reset frees its slot at once), then a probe per 15 s pause:
    # 36 on 2026-12-06; without the breaker, 237 (each request spent its network retries)
    assert origin.resets <= 50, origin.resets
