"""A generated static website to crawl in the demo and the tests, and a small server for it.

Page 0 is ``index.html`` (its one URL is ``<base>/``), page *n* is ``p/<n>.html``. Each page
links to its tree children ``4n+1 .. 4n+4`` (so the index reaches every page), to six seeded
pseudo-random pages in forms that normalise to the same URL (``../p/7.html``, ``/p/7.html``,
``7.html#top``), to the index as ``/``, and to one external URL that must not be crawled::

    python -m crawler.localstack.demo_site --pages 500 --dir /tmp/site    # prints "URL http://127.0.0.1:P/"
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

RANDOM_LINKS = 6
CHILDREN = 4
MAX_PAGE_BYTES = 8000
_WORDS = (
    "crawler frontier kafka redis mongo bloom filter spider request response item pipeline "
    "scheduler worker partition offset lease retry backoff politeness robots sitemap anchor "
    "document index shard replica cluster broker topic consumer producer latency throughput"
).split()


def page_path(n: int) -> str:
    """The file of page *n*, relative to the site directory."""
    return "index.html" if n == 0 else f"p/{n}.html"


def site_urls(base_url: str, pages: int) -> list[str]:
    """The one canonical URL of every page, index first (``<base>/``)."""
    base = base_url.rstrip("/")
    return [f"{base}/"] + [f"{base}/p/{n}.html" for n in range(1, pages)]


def _href(target: int, source: int, style: int) -> str:
    """A link from page *source* to page *target*; every *style* resolves to one URL."""
    if target == 0:
        return "/"
    name = f"{target}.html"
    if style == 1:
        return f"/p/{name}"
    if style == 2:
        return f"{name}#top" if source else f"p/{name}#top"
    return f"../p/{name}" if source else f"p/{name}"


def _link_list(css: str, links: list[tuple[int, str]]) -> str:
    items = "".join(f'<li><a href="{href}">Page {n}</a></li>\n' for n, href in links)
    return f'<ul class="{css}">\n{items}</ul>\n'


def _paragraph(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(40, 90))]
    return "<p>" + " ".join(words).capitalize() + ".</p>\n"


def render_page(n: int, pages: int, *, seed: int = 1,
                external_host: str = "example.invalid") -> str:
    """The HTML of page *n* of a *pages*-page site (5-8 KB, deterministic for a *seed*)."""
    rng = random.Random(f"{seed}:{n}")
    children = [(c, _href(c, n, 0)) for c in range(n * CHILDREN + 1, n * CHILDREN + 5) if c < pages]
    picks = rng.sample(range(pages), min(RANDOM_LINKS, pages))
    related = [(r, _href(r, n, i % 3)) for i, r in enumerate(picks)]
    head = (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f"<title>Page {n}</title></head>\n<body>\n"
            f'<h1 id="top">Page {n}</h1>\n<nav><a href="/">Home</a></nav>\n'
            + _link_list("children", children) + _link_list("related", related))
    tail = (f'<footer><a href="http://{external_host}/x">Elsewhere</a> '
            f'<a href="#top">Back to top</a></footer>\n</body>\n</html>\n')
    target, size = rng.randint(5400, 7900), len(head) + len(tail)
    body: list[str] = []
    while size < target:
        paragraph = _paragraph(rng)
        if size + len(paragraph) > MAX_PAGE_BYTES:
            break
        body.append(paragraph)
        size += len(paragraph)
    return head + "".join(body) + tail


def generate(directory: Path, pages: int, *, seed: int = 1,
             external_host: str = "example.invalid") -> None:
    """Write a *pages*-page site into *directory* (``index.html`` and ``p/<n>.html``)."""
    if pages < 1:
        raise ValueError(f"pages must be at least 1, got {pages}")
    directory = Path(directory)
    (directory / "p").mkdir(parents=True, exist_ok=True)
    for n in range(pages):
        html = render_page(n, pages, seed=seed, external_host=external_host)
        (directory / page_path(n)).write_text(html, encoding="utf-8")


class Fetch(NamedTuple):
    """One request the server received (``DemoServer.request_log``)."""

    at: float  # time.time() when the request line was read
    path: str
    user_agent: str


class _Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: files are sent with a Content-Length
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls

    def do_GET(self) -> None:
        log = getattr(self.server, "request_log", None)
        if log is not None:  # list.append is atomic: handler threads need no lock
            log.append(Fetch(time.time(), self.path, self.headers.get("User-Agent", "")))
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404, "No directory listings here")
        return None


class DemoServer(ThreadingHTTPServer):
    """A threaded static file server; ``base_url`` has no trailing slash."""

    daemon_threads = True
    request_queue_size = 128  # several workers open many connections at once
    _thread: threading.Thread | None = None
    #: every GET received, in arrival order, when :func:`serve` was asked to log them
    request_log: list[Fetch] | None = None

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (a worker killed with ``kill -9``) is no
        error of the site's: only other exceptions print their traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def close(self) -> None:
        """Stop serving (if :func:`serve` started a thread) and close the socket."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()


def make_server(directory: Path, host: str = "127.0.0.1", port: int = 0) -> DemoServer:
    """A bound server for *directory*; call ``serve_forever()`` on it."""
    return DemoServer((host, port), partial(_Handler, directory=str(directory)))


def serve(directory: Path, host: str = "127.0.0.1", port: int = 0, *,
          log_requests: bool = False) -> DemoServer:
    """Serve *directory* from a background thread; ``close()`` the returned server.

    With *log_requests*, ``server.request_log`` lists every GET it receives.
    """
    server = make_server(directory, host, port)
    if log_requests:
        server.request_log = []
    server._thread = threading.Thread(target=server.serve_forever, name="demo-site",
                                      daemon=True)
    server._thread.start()
    return server


def start_server_process(directory: Path, pages: int, *, port: int = 0,
                         timeout: float = 30.0) -> tuple[subprocess.Popen[str], str]:
    """Generate and serve a site in a child process; returns it and its base URL.

    The base URL has no trailing slash. Terminate the process when done.
    """
    argv = [sys.executable, "-m", "crawler.localstack.demo_site", "--pages", str(pages),
            "--dir", str(directory), "--port", str(port)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    first: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not first or not first[0].startswith("URL "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"demo site did not print its URL within {timeout}s: {first!r}")
    return proc, first[0].split()[1].rstrip("/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.localstack.demo_site",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args(argv)
    generate(args.dir, args.pages, seed=args.seed)
    if args.generate_only:
        return 0
    server = make_server(args.dir, args.host, args.port)
    print(f"URL {server.base_url}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
