"""The crawls of the shared-connection tests, each run as a script in its own process (one
Twisted reactor per process): the runner, the pages they crawl, the connections they count.

The scripts (tests/integration/shared_crawl.py, worker_pool_crawl.py) import this module:
:func:`run_crawl` puts tests/ on their ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

TESTS = Path(__file__).resolve().parents[1]


def run_crawl(script: Path, args: list[str], timeout: int) -> tuple[dict[str, Any], str]:
    """Run *script* with *args*; its last line of output as JSON, and its log (stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the crawl did not end within {timeout} s: {err[-5000:]}")
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


class Pages(BaseHTTPRequestHandler):
    """HTML pages; a subclass's :meth:`page` gives the status and body of a path."""

    def page(self, path: str) -> tuple[int, bytes]:
        raise NotImplementedError

    def do_GET(self) -> None:
        status, body = self.page(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve(pages: type[Pages]) -> ThreadingHTTPServer:
    """*pages* served on a free loopback port, in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def redis_connections(url: str, name: str) -> int:
    """How many connections of the Redis at *url* carry the client name *name*."""
    with redis.Redis.from_url(url) as admin:
        return sum(1 for c in admin.client_list() if c.get("name") == name)
