"""A hostile origin on ``127.0.0.1`` for the hostile-pages end-to-end test (in threads).

``/`` links to every trap below and to the two link pages. What each path serves, and what
a crawl at the default distributed settings must make of it (:data:`TRAPS`):

- ``/big``: 200 MB of HTML with its ``Content-Length``; ``/endless``: HTML for ever, no
  length; ``/bomb``: a gzip body of 1 MB that inflates to 1 GiB. All three: ``dropped/size``.
- ``/slow``: 600 bytes at one byte a second: it times out and ends as ``failed/retries``
  (tests/e2e/test_slow_page.py; the hostile-pages test leaves it out of ``/``: its five
  attempts at the default 30 s timeout were most of that test's time).
- ``/spiral/N``: a 302 to ``/spiral/N+1`` for ever: ``dropped/redirects``.
- ``/loop/a`` and ``/loop/b``: 302s to each other. A redirect keeps its request's lease
  and skips the dupefilter, so the loop too ends at the redirect limit: ``dropped/redirects``.
- ``/cal/Y/M``: a calendar linking the month before and the month after, for ever; the
  depth limit ends it.
- ``/links/0`` and ``/links/1``: 10,000 links each, to the same ``/leaf/N`` pages.
- ``/enc/<name>``: invalid, unknown, conflicting and mixed encodings (:data:`ENCODINGS`);
  each links to ``/after/<name>``, which is stored only if the links of the page were read
  (:data:`UNREADABLE`: the page whose header's lie hides its link from a browser too).

Every request is counted by path (:attr:`HostileSite.hits`).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers.pages import link_page

LEAVES = 10_000
BIG = 200 * 1000 * 1000
BOMB = 1 << 30  # bytes the gzip bomb inflates to
SLOW = 600  # bytes of /slow, one a second
CAL_START = (2026, 12)
TRAPS = {"/big": "dropped/size", "/endless": "dropped/size", "/bomb": "dropped/size",
         "/slow": "failed/retries", "/spiral/0": "dropped/redirects",
         "/loop/a": "dropped/redirects"}
UNREADABLE = ("utf16-claim",)  # UTF-16 by its header, ASCII in fact: its link is unreadable
_FILLER = b"<p>" + b"hostile " * 8187 + b"</p>\n"  # 64 KiB of HTML

#: name -> (Content-Type header, body); every body links to /after/<name>, in ASCII but for
#: bom-conflict, whose byte-order mark wins over its header (as in a browser): UTF-16-LE
ENCODINGS: dict[str, tuple[str, bytes]] = {
    "bad-utf8": ("text/html; charset=utf-8",
                 b"<title>bad \xff\xfe \xc3\x28 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80</title>"),
    "unknown-charset": ("text/html; charset=x-hostile-42", b"<title>unknown \xe9\xe8</title>"),
    "conflict": ("text/html; charset=utf-8",
                 b'<meta charset="shift_jis"><title>conflict \x93\x94 \x82\xa0</title>'),
    "utf16-claim": ("text/html; charset=utf-16", b"<title>odd length ascii</title>!"),
    "mixed": ("text/html",
              "<title>mixed caf\u00e9 ".encode() + "caf\u00e9</title>".encode("latin-1")),
    "nul": ("text/html; charset=utf-8", b"<title>nul \x00 \x01 \x1b[31m</title>\x00\x00"),
    "bom-conflict": ("text/html; charset=iso-8859-1",
                     b"\xff\xfe" + "<title>bom</title>".encode("utf-16-le")),
}


def _bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip member
    block = b"\0" * (1 << 20)
    parts = [packer.compress(block) for _ in range(BOMB >> 20)]
    return b"".join([*parts, packer.flush()])


def calendar(year: int, month: int, step: int) -> tuple[int, int]:
    """The month *step* months after (*year*, *month*)."""
    index = year * 12 + month - 1 + step
    return index // 12, index % 12 + 1


def month_path(year: int, month: int) -> str:
    return f"/cal/{year}/{month}"


class _Handler(BaseHTTPRequestHandler):
    server: HostileSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        with self.server.lock:
            self.server.hits[path] += 1
        try:
            self._serve(path)
        except OSError:  # the crawler hung up: what it must do to /big, /endless and /slow
            pass

    def _serve(self, path: str) -> None:
        if path == "/big":
            self._head(200, "text/html", BIG)
            for _ in range(BIG // len(_FILLER)):
                self.wfile.write(_FILLER)
            self.wfile.write(_FILLER[:BIG % len(_FILLER)])
        elif path == "/endless":
            self._head(200, "text/html", None)
            while True:
                self.wfile.write(_FILLER)
        elif path == "/bomb":
            self.server.bomb_ready.wait(120)
            self._head(200, "text/html", len(self.server.bomb), {"Content-Encoding": "gzip"})
            self.wfile.write(self.server.bomb)
        elif path == "/slow":
            self._head(200, "text/html", SLOW)
            for _ in range(SLOW):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1.0)
        elif path.startswith(("/spiral/", "/loop/")):
            self._redirect(path)
        else:
            self._page(path)

    def _redirect(self, path: str) -> None:
        if path.startswith("/spiral/"):
            target = f"/spiral/{int(path.rsplit('/', 1)[1]) + 1}"
        else:
            target = "/loop/b" if path == "/loop/a" else "/loop/a"
        self.send_response(302)
        self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _page(self, path: str) -> None:
        kind, _, rest = path[1:].partition("/")
        if path == "/":
            self._send(link_page("hostile", [
                *self.server.traps, month_path(*CAL_START), "/links/0", "/links/1",
                *(f"/enc/{n}" for n in ENCODINGS)]))
        elif kind == "links" and rest in ("0", "1"):
            self._send(link_page(path, [f"/leaf/{n}" for n in range(LEAVES)]))
        elif kind == "cal":
            year, month = (int(p) for p in rest.split("/"))
            self._send(link_page(path, [month_path(*calendar(year, month, s)) for s in (-1, 1)]))
        elif kind == "enc" and rest in ENCODINGS:
            content_type, body = ENCODINGS[rest]
            link = f'<a href="/after/{rest}">after</a>'
            self._send(body + link.encode("utf-16-le" if rest == "bom-conflict" else "ascii"),
                       content_type)
        elif kind in ("leaf", "after"):
            self._send(link_page(path, []))
        else:
            self.send_error(404)

    def _head(self, status: int, content_type: str, length: int | None,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def _send(self, body: bytes, content_type: str = "text/html") -> None:
        self._head(200, content_type, len(body))
        self.wfile.write(body)


class HostileSite(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, slow: bool = True) -> None:
        """Without *slow*, ``/`` does not link to ``/slow`` (served all the same)."""
        super().__init__(("127.0.0.1", 0), _Handler)
        self.traps = [path for path in TRAPS if slow or path != "/slow"]
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.bomb = b""
        self.bomb_ready = threading.Event()
        self._runners = [threading.Thread(target=self.serve_forever, daemon=True),
                         threading.Thread(target=self._pack, daemon=True)]

    def _pack(self) -> None:
        self.bomb = _bomb()
        self.bomb_ready.set()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> HostileSite:
        for thread in self._runners:
            thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
