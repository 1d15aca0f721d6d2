"""A site on ``[::1]`` whose links, redirect and seeds point at a listener on ``127.0.0.1``,
for the SSRF guard's end-to-end test (both in threads).

``/`` links to ``/a``, ``/b``, ``/r`` (302 to the listener), and to the listener by IP
(``http://127.0.0.1:L/linked``), by IPv4-mapped IPv6 address and by the name ``localhost``.
Every page waits for :attr:`GuardSite.gate`, so the test can put the listener's hosts in the
crawl's scope (``scrapy seed``) before any link is seen. The :class:`Listener` accepts TCP
connections, records each and closes it: what a crawl that got past the guard would reach.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers.pages import link_page

PAGES = ("/", "/a", "/b")  # the pages the crawl may store


class Listener:
    """A TCP listener on ``127.0.0.1`` that records every connection it accepts (and answers
    it 404)."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.port: int = self._socket.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self._socket.accept()
            except OSError:  # closed by stop()
                return
            self.accepted.append(peer)
            _answer_404(connection)

    def stop(self) -> None:
        self._socket.close()


def _answer_404(connection: socket.socket) -> None:
    """A 404 to whatever was asked: an internal service that answers HTTP (a connection
    closed unanswered makes robots.txt unreachable, and the host's pages wait 30 s a try)."""
    try:
        connection.settimeout(2.0)
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
    except OSError:
        pass
    finally:
        connection.close()


class _Handler(BaseHTTPRequestHandler):
    server: GuardSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.gate.wait(120)
        path = self.path.split("?", 1)[0]
        target = self.server.target
        if path == "/r":
            self.send_response(302)
            self.send_header("Location", f"{target}/redirected")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path not in PAGES:
            self.send_error(404)
            return
        links = ["/a", "/b", "/r", f"{target}/linked",
                 target.replace("127.0.0.1", "[::ffff:127.0.0.1]") + "/mapped-link",
                 target.replace("127.0.0.1", "localhost") + "/named-link"] \
            if path == "/" else ["/"]
        page = link_page(path, links)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


class GuardSite(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def __init__(self, target: str) -> None:
        super().__init__(("::1", 0), _Handler)
        self.target = target  # the listener: http://127.0.0.1:L
        self.gate = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://[::1]:{self.server_address[1]}"

    def start(self) -> GuardSite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
