"""A fault-injecting origin server for resilience tests: a generated site on loopback hosts.

Page 0 is ``/`` on the first host; page *n* lives on host ``n % H`` at ``/`` (for ``n < H``) or
``/p/<n>.html``, and links to its tree children ``3n+1 .. 3n+3`` (so ``/`` reaches every page),
to two seeded random pages and to its host's ``/``; links to another host are absolute. Each
host is its own loopback address (Linux routes all of 127.0.0.0/8 to ``lo``), all on one port.

Faults are a pure function of ``(seed, host, path, attempt)`` (see :func:`outcome`, in
:mod:`servers.faultmodel`): a connection reset (SO_LINGER 0), a 429 with ``Retry-After: 1|2``,
a 503 (half with ``Retry-After: 1``), or a 200 after a 1-3 s sleep. Attempt ``max_failures + 1``
of a page always succeeds at once, except on a *doomed* page (a seeded share ``doomed`` of the
pages other than a host's ``/``, see :func:`is_doomed`), which faults on every attempt. The
``hostile`` profile (``--faults hostile``) instead gives each page one fixed :func:`scenario`,
e.g. ``503x3``: three 503s, then a 200. Every request is
logged as one JSON line (:func:`read_log`) before its response (or reset) goes out, so a client
that saw the answer finds the line::

    python -m servers.faultorigin --pages 200 --log /tmp/o.jsonl --hosts 127.0.0.1,127.0.0.2
    # prints "URL http://127.0.0.1:P/", one more URL line per further host, then "READY"
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

# The model lives in its own module; its names stay importable from here.
from servers.faultmodel import HOSTILE, PROFILES, Faults, Outcome, is_doomed, outcome, scenario

__all__ = [
    "HOSTILE", "PROFILES", "Faults", "OriginProcess", "OriginServer", "Outcome", "Site", "bind",
    "is_doomed", "last_status", "main", "max_per_window", "outcome", "page_scenarios",
    "read_log", "scenario", "serve", "site_urls", "start_origin",
]

CHILDREN = 3
RANDOM_LINKS = 2
_PAGE = re.compile(r"^/p/(\d+)\.html$")
ROBOTS = b"User-agent: *\nAllow: /\n"


class Site:
    """The pages: which host and path each has, and its HTML."""

    def __init__(self, hosts: Sequence[str], port: int, pages: int, seed: int = 1) -> None:
        if pages < len(hosts):
            raise ValueError(f"need at least one page per host: {pages} < {len(hosts)}")
        self.hosts, self.port, self.pages, self.seed = list(hosts), port, pages, seed

    def base_urls(self) -> list[str]:
        return [f"http://{host}:{self.port}" for host in self.hosts]

    def url(self, n: int) -> str:
        return self.base_urls()[n % len(self.hosts)] + self.path(n)

    def path(self, n: int) -> str:
        return "/" if n < len(self.hosts) else f"/p/{n}.html"

    def page_of(self, host: str, path: str) -> int | None:
        """The page served at *path* on *host*, or None (a 404)."""
        if host not in self.hosts:
            return None
        index = self.hosts.index(host)
        if path == "/":
            return index
        match = _PAGE.match(path)
        n = int(match.group(1)) if match else -1
        ok = len(self.hosts) <= n < self.pages and n % len(self.hosts) == index
        return n if ok else None

    def render(self, n: int) -> bytes:
        rng = random.Random(f"{self.seed}:{n}")
        targets = [c for c in range(CHILDREN * n + 1, CHILDREN * (n + 1) + 1) if c < self.pages]
        targets += rng.sample(range(self.pages), min(RANDOM_LINKS, self.pages))
        own = n % len(self.hosts)
        links = "".join(f'<li><a href="{self._href(t, own)}">Page {t}</a></li>' for t in targets)
        filler = " ".join(rng.choice(("retry", "backoff", "proxy", "origin")) for _ in range(60))
        return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>Page {n}</title></head>'
                f'<body><h1>Page {n}</h1><nav><a href="/">Home</a></nav><ul>{links}</ul>'
                f"<p>{filler}</p></body></html>\n").encode()

    def _href(self, target: int, own: int) -> str:
        return self.path(target) if target % len(self.hosts) == own else self.url(target)


class _State:
    """Shared by every server thread: the site, the attempt counters and the log."""

    def __init__(self, site: Site, faults: Faults, log: TextIO) -> None:
        self.site, self.faults, self.log = site, faults, log
        self.lock = threading.Lock()
        self.attempts: dict[tuple[str, str], int] = {}

    def next_attempt(self, host: str, path: str) -> int:
        with self.lock:
            count = self.attempts[host, path] = self.attempts.get((host, path), 0) + 1
            return count

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self.lock:
            if not self.log.closed:  # a slow response may end after shutdown
                self.log.write(line)
                self.log.flush()


class OriginServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    state: _State


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response has a Content-Length
    disable_nagle_algorithm = True
    server: OriginServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        start, state = time.time(), self.server.state
        header = self.headers.get("Host", "")
        named = urlsplit(f"//{header}").hostname or ""
        host = named if named in state.site.hosts else str(self.server.server_address[0])
        page = state.site.page_of(host, self.path)
        attempt = state.next_attempt(host, self.path) if page is not None else 0
        if page is not None:
            result = outcome(state.faults, state.site.seed, host, self.path, attempt)
        else:
            result = Outcome(200 if self.path == "/robots.txt" else 404)
        if result.delay:
            time.sleep(result.delay)
        state.write(self._entry(start, host, attempt, result))  # logged before the client knows
        if result.status is None:
            reset(self)
        elif result.status == 200:
            self._respond(result, ROBOTS if page is None else state.site.render(page))
        else:
            self._respond(result, f"{result.status}\n".encode())

    def _entry(self, start: float, host: str, attempt: int, result: Outcome) -> dict[str, Any]:
        addr, port = self.server.server_address[:2]
        return {"ts": start, "host": self.headers.get("Host", ""), "site": host,
                "addr": f"{addr!s}:{port}", "path": self.path, "attempt": attempt,
                "status": "reset" if result.status is None else result.status,
                "fault": result.fault, "retry_after": result.retry_after,
                "via": self.headers.get("Via"), "proxy": self.headers.get("X-Test-Proxy"),
                "client": "{}:{}".format(*self.client_address[:2]),
                "latency": round(time.time() - start, 6)}

    def _respond(self, result: Outcome, body: bytes) -> None:
        assert result.status is not None
        self.send_response(result.status)
        kind = "text/html" if body.startswith(b"<!DOCTYPE") else "text/plain"
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if result.retry_after is not None:
            self.send_header("Retry-After", str(result.retry_after))
        if self.headers.get("Connection", "").lower() == "close":
            self.send_header("Connection", "close")  # proxies pass it on: clients see it
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)



def reset(handler: BaseHTTPRequestHandler) -> None:
    """Close *handler*'s connection abruptly: SO_LINGER 0 makes close() send a RST, and no
    response at all."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.rfile.close()  # the fd closes only once the makefile() reader is closed too
    handler.connection.close()
    handler.close_connection = True


def bind(hosts: Sequence[str], port: int = 0, tries: int = 20) -> list[OriginServer]:
    """One bound server per loopback address in *hosts*, all on one port (free if *port* is 0)."""
    for host in hosts:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"hosts must be loopback addresses, got {host!r}")
    for _ in range(tries if port == 0 else 1):
        servers: list[OriginServer] = []
        try:
            servers.append(OriginServer((hosts[0], port), _Handler))
            chosen = servers[0].server_address[1]
            servers += [OriginServer((host, chosen), _Handler) for host in hosts[1:]]
            return servers
        except OSError:
            for server in servers:
                server.server_close()
            if port:
                raise
    raise OSError(f"found no port free on all of {list(hosts)} in {tries} tries")


def serve(servers: Sequence[OriginServer], stop: threading.Event) -> None:
    """Serve every server from its own thread until *stop* is set, then close them."""
    for server in servers:
        threading.Thread(target=server.serve_forever, args=(0.1,), name="fault-origin",
                         daemon=True).start()
    try:
        while not stop.wait(0.1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servers.faultorigin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--log", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--hosts", default="127.0.0.1", help="comma-separated loopback IPs")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default=Faults().spec(),
                        help='"none", "hostile" or name=value,... of the Faults fields')
    args = parser.parse_args(argv)
    hosts = [host.strip() for host in args.hosts.split(",") if host.strip()]
    faults = Faults.parse(args.faults)
    servers = bind(hosts, args.port)
    site = Site(hosts, servers[0].server_address[1], args.pages, args.seed)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(args.log, "a", encoding="utf-8") as log:
        state = _State(site, faults, log)
        for server in servers:
            server.state = state
        for url in site.base_urls():
            print(f"URL {url}/", flush=True)
        print("READY", flush=True)
        serve(servers, stop)
    return 0


class OriginProcess:
    """A fault origin running in a child process; :meth:`stop` ends it by its PID."""

    def __init__(self, proc: subprocess.Popen[str], base_urls: list[str], log_path: Path) -> None:
        self.proc, self.base_urls, self.log_path = proc, base_urls, log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> OriginProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_origin(pages: int, log_path: str | Path, *, seed: int = 1,
                 hosts: Sequence[str] = ("127.0.0.1",), faults: Faults | None = None,
                 port: int = 0, timeout: float = 30.0) -> tuple[OriginProcess, str]:
    """Start ``python -m servers.faultorigin``; returns its handle and first base URL.

    Base URLs have no trailing slash; ``handle.base_urls`` has one per host.
    """
    argv = [sys.executable, "-m", "servers.faultorigin", "--pages", str(pages),
            "--log", str(log_path), "--seed", str(seed), "--port", str(port),
            "--hosts", ",".join(hosts), "--faults", (faults or Faults()).spec()]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                            env=env)
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "READY\n")),
                              daemon=True)
    reader.start()
    reader.join(timeout)
    urls = [line.split()[1].rstrip("/") for line in lines if line.startswith("URL ")]
    if reader.is_alive() or not urls:
        OriginProcess(proc, [], Path(log_path)).stop()
        raise RuntimeError(f"fault origin not ready within {timeout}s: {lines!r}")
    return OriginProcess(proc, urls, Path(log_path)), urls[0]


def site_urls(base_urls: Sequence[str], pages: int) -> list[str]:
    """The URL of every page (index first) of a site served on *base_urls* (one per host)."""
    bases = [base.rstrip("/") for base in base_urls]
    return [bases[n % len(bases)] + ("/" if n < len(bases) else f"/p/{n}.html")
            for n in range(pages)]


def page_scenarios(faults: Faults, seed: int, hosts: Sequence[str],
                   pages: int) -> list[str | None]:
    """The hostile :func:`scenario` of every page (index first) of a site on *hosts*."""
    site = Site(hosts, 0, pages, seed)
    return [scenario(faults, seed, site.hosts[n % len(site.hosts)], site.path(n))
            for n in range(pages)]


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """Every complete JSON line of an origin log, in order (a line being written is skipped).

    Fields: ``ts`` (arrival, ``time.time()``), ``host`` (Host header), ``site`` (the host it was
    served as), ``addr`` (the address:port it reached), ``path``, ``attempt`` (per site and path;
    0 when not a page), ``status`` (int or ``"reset"``), ``fault``, ``retry_after``, ``via``,
    ``proxy`` (``X-Test-Proxy``), ``client`` and ``latency`` (seconds until the answer).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    entries = []
    for line in text.splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def _matches(entry: dict[str, Any], host: str) -> bool:
    header = str(entry.get("host") or "")
    return host in (entry.get("site"), header, urlsplit(f"//{header}").hostname)


def max_per_window(entries: Iterable[dict[str, Any]], host: str, window: float = 1.0) -> int:
    """The most requests for *host* (site address, Host header or its hostname) whose
    timestamps fit in one half-open window ``[t, t + window)``."""
    times = sorted(float(entry["ts"]) for entry in entries if _matches(entry, host))
    best, low = 0, 0
    for high, stamp in enumerate(times):
        while stamp - times[low] >= window:
            low += 1
        best = max(best, high - low + 1)
    return best


def last_status(entries: Iterable[dict[str, Any]]) -> dict[str, int | str]:
    """The status (or ``"reset"``) of the last request for each ``http://<Host><path>``."""
    return {f"http://{entry['host']}{entry['path']}": entry["status"] for entry in entries}


if __name__ == "__main__":
    sys.exit(main())
