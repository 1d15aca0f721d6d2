"""The broad-crawl benchmark's site: many hosts, one nginx, and what each host is like.

Host *i* is the loopback address ``127.20.<i // 250>.<i % 250 + 1>`` (Linux routes all of
127/8 to ``lo``); one nginx listens on each of them on one port and serves the folder named
after the address it was reached on (``root <site>/$server_addr``). Seeded, so the same
:class:`BroadSpec` always gives the same bytes:

- pages per host from a Pareto law (alpha 1.2), scaled to about ``pages`` in all: a few hosts
  with hundreds of pages, most with a handful; page *k* links to its tree children
  ``4k+1 .. 4k+4`` of its host (so ``/`` reaches every page), to ``/``, to two pages of its
  host and to two pages of other hosts (absolute URLs);
- robots.txt: most hosts ``Disallow: /private/`` (and some pages link there: a crawler that
  fetches one breaks the rules); the rest have none (404, everything allowed);
- ``Crawl-delay``: the host whose chain of delays ``(pages - 1) * delay`` comes closest to
  ``chain`` seconds gets 0.5 s, a share of the others 1 s or 0.5 s if their chain stays under
  80% of it; these hosts serve nothing else than their pages (no 404, no 500);
- slow hosts (small ones): nginx sends their pages at ``slow_rate`` bytes per second
  (``limit_rate``; 0-2 s a page at 2,048);
- failing hosts (small ones): some pages link to ``/fail/<n>.html``, always 500 (retried by
  every crawler; not 503, which our crawler answers by lowering the host's rate: that would
  be a politeness rule of its own, outside the bound);
- broken links: on hosts without a delay some pages link to ``/gone/<n>.html`` (404).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.nginx import Nginx, nginx_binary
from benchmarks.sitegen import _WORDS

ROBOTS = "User-agent: *\nDisallow: /private/\n"
EXTRA = 3  # distinct /fail/, /gone/ and /private/ URLs per host at most
PROBE = "/__ready"  # asked by the start-up check (a 404), left out of every figure


@dataclass(frozen=True)
class BroadSpec:
    hosts: int = 1000
    pages: int = 15_000  # about: host sizes are rounded
    chain: float = 30.0  # seconds: the longest chain of Crawl-delays (its host's)
    delayed: float = 0.08  # share of the hosts with a Crawl-delay
    no_robots: float = 0.15  # share of the hosts without robots.txt
    slow: float = 0.03  # share of the hosts served at slow_rate (of 20 pages or fewer)
    slow_rate: int = 2048  # bytes per second (nginx allows rate x (seconds + 1) bytes)
    failing: float = 0.03  # share of the hosts with /fail/ links (500)
    min_bytes: int = 2000
    max_bytes: int = 6000
    seed: int = 1


@dataclass(frozen=True)
class Host:
    index: int
    address: str
    pages: int
    delay: float = 0.0  # Crawl-delay, seconds; 0: none
    robots: bool = True
    slow: bool = False
    failing: bool = False

    @property
    def chain(self) -> float:
        """Seconds from its first page to its last at the Crawl-delay, at best."""
        return (self.pages - 1) * self.delay


def address(index: int) -> str:
    return f"127.20.{index // 250}.{index % 250 + 1}"


def sizes(spec: BroadSpec, rng: random.Random) -> list[int]:
    """Pages of each host: Pareto draws scaled to about *spec.pages* in all, at least 1."""
    cap = max(10.0, spec.pages * 0.025)
    raw = [min(cap, 4 * rng.paretovariate(1.2)) for _ in range(spec.hosts)]
    scale = spec.pages / sum(raw)
    return [max(1, round(x * scale)) for x in raw]


def delay_for(pages: int, chain: float, rng: random.Random) -> float:
    """A Crawl-delay for a host of *pages* whose chain stays under 80% of *chain*; 0: none."""
    for delay in (rng.choice((1.0, 0.5)), 0.5):
        if (pages - 1) * delay <= 0.8 * chain:
            return delay
    return 0.0


def plan(spec: BroadSpec) -> list[Host]:
    """Every host of the site, in index order."""
    rng = random.Random(spec.seed)
    counts = sizes(spec, rng)
    robots = [rng.random() >= spec.no_robots for _ in counts]
    longest = min((i for i in range(spec.hosts) if robots[i]),
                  key=lambda i: (abs((counts[i] - 1) * 0.5 - spec.chain), i))
    hosts = []
    for i, pages in enumerate(counts):
        delay = 0.5 if i == longest else 0.0
        if i != longest and robots[i] and rng.random() < spec.delayed:
            delay = delay_for(pages, spec.chain, rng)
        slow = not delay and pages <= 20 and rng.random() < spec.slow
        failing = not delay and not slow and pages <= 20 and rng.random() < spec.failing
        hosts.append(Host(i, address(i), pages, delay, robots[i], slow, failing))
    return hosts


def page_path(k: int) -> str:
    return "/" if k == 0 else f"/p/{k}.html"


def links(host: Host, k: int, hosts: list[Host], port: int, rng: random.Random) -> list[str]:
    """The links of page *k* of *host*, in order."""
    out = [page_path(c) for c in range(4 * k + 1, 4 * k + 5) if c < host.pages]
    out += [page_path(rng.randrange(host.pages)) for _ in range(2)] + ["/"]
    for _ in range(2):
        other = hosts[rng.randrange(len(hosts))]
        out.append(f"http://{other.address}:{port}{page_path(rng.randrange(other.pages))}")
    if host.failing and rng.random() < 0.3:
        out.append(f"/fail/{rng.randrange(EXTRA)}.html")
    if not host.delay and rng.random() < 0.1:
        out.append(f"/gone/{rng.randrange(EXTRA)}.html")
    if host.robots and rng.random() < 0.1:
        out.append(f"/private/{rng.randrange(EXTRA)}.html")
    return out


def render(host: Host, k: int, hosts: list[Host], spec: BroadSpec, port: int) -> bytes:
    """The HTML of page *k* of *host*."""
    rng = random.Random(spec.seed * 1_000_003 + host.index * 100_003 + k)
    items = "".join(f'<li><a href="{url}">{url}</a></li>\n'
                    for url in links(host, k, hosts, port, rng))
    head = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{host.address} "
            f"page {k}</title></head>\n<body><h1>Page {k}</h1>\n<ul>\n{items}</ul>\n")
    size = rng.randint(spec.min_bytes, spec.max_bytes)
    words: list[str] = []
    length = len(head) + 30
    while length < size:
        words.append(rng.choice(_WORDS))
        length += len(words[-1]) + 1
    return (head + "<p>" + " ".join(words) + "</p>\n</body></html>\n").encode()


def write_host(root: Path, host: Host, hosts: list[Host], spec: BroadSpec, port: int) -> None:
    folder = root / host.address
    (folder / "p").mkdir(parents=True)
    for k in range(host.pages):
        name = "index.html" if k == 0 else f"p/{k}.html"
        (folder / name).write_bytes(render(host, k, hosts, spec, port))
    if host.robots:
        delay = f"Crawl-delay: {host.delay:g}\n" if host.delay else ""
        (folder / "robots.txt").write_text(ROBOTS + delay)
        (folder / "private").mkdir()
        for n in range(EXTRA):
            (folder / "private" / f"{n}.html").write_text("<html><body>private</body></html>")


def generate(directory: Path, spec: BroadSpec, port: int) -> list[Host]:
    """Write the site for nginx on *port* into *directory* (replacing it), with a
    ``site.json`` describing it; its hosts."""
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    hosts = plan(spec)
    for host in hosts:
        write_host(directory, host, hosts, spec, port)
    meta = {"spec": asdict(spec), "port": port, "hosts": [asdict(h) for h in hosts]}
    (directory / "site.json").write_text(json.dumps(meta))
    return hosts


def ensure(directory: Path, spec: BroadSpec, port: int) -> list[Host]:
    """The hosts of the site of *spec* on *port* in *directory*, generated only if needed."""
    marker = Path(directory) / "site.json"
    if marker.exists():
        meta = json.loads(marker.read_text())
        if meta["spec"] == asdict(spec) and meta["port"] == port:
            return [Host(**h) for h in meta["hosts"]]
    return generate(directory, spec, port)


def seeds(hosts: list[Host], port: int, seed: int) -> list[str]:
    """Every host's ``/``, in a seeded order (the same for every crawler)."""
    urls = [f"http://{h.address}:{port}/" for h in hosts]
    random.Random(seed).shuffle(urls)
    return urls


CONFIG = """daemon off;{user}
worker_processes 1;
worker_rlimit_nofile 16384;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  log_format broad '$msec $server_addr $request_uri $status $request_time $connection '
                   '$connection_requests $body_bytes_sent';
  access_log {log} broad;
  sendfile on;
  keepalive_requests 100000;
  default_type text/html;
  client_body_temp_path {prefix}/tmp;
  proxy_temp_path {prefix}/tmp;
  fastcgi_temp_path {prefix}/tmp;
  uwsgi_temp_path {prefix}/tmp;
  scgi_temp_path {prefix}/tmp;
  map $server_addr $broad_rate {{
    default 0;
{rates}
  }}
  server {{
{listens}
    root {root}/$server_addr;
    index index.html;
    limit_rate $broad_rate;
    location /fail/ {{ return 500; }}
  }}
}}
"""


class BroadNginx(Nginx):
    """One nginx for every host of the site, on *port*, its access log at *log*
    (``$msec $server_addr $request_uri $status $request_time $connection
    $connection_requests $body_bytes_sent``); stopped by its PID (:meth:`Nginx.stop`)."""

    def __init__(self, root: Path, workdir: Path, hosts: list[Host], port: int,
                 log: Path, rate: int) -> None:
        super().__init__(root, workdir)
        self.hosts, self.port, self.log, self.rate = hosts, port, Path(log).absolute(), rate

    @property
    def base_url(self) -> str:
        return f"http://{self.hosts[0].address}:{self.port}"

    def config(self) -> str:
        user = "\nuser root;" if os.geteuid() == 0 else ""  # the site may sit in a private folder
        rates = "".join(f"    {h.address} {self.rate};\n" for h in self.hosts if h.slow)
        listens = "".join(f"    listen {h.address}:{self.port};\n" for h in self.hosts)
        return CONFIG.format(user=user, prefix=self.prefix, log=self.log, rates=rates,
                             listens=listens, root=self.root)

    def start(self, timeout: float = 10.0) -> None:
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config())
        self.process = subprocess.Popen(
            [nginx_binary(), "-c", str(conf), "-p", str(self.prefix), "-e", "stderr"],
            stdout=subprocess.DEVNULL, stderr=open(self.prefix / "stderr.log", "ab"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(self.prefix / 'stderr.log').read_text()}")
            if _answers(self.base_url + PROBE):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nginx did not answer on {self.base_url} within {timeout}s")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            reply.read()
    except urllib.error.HTTPError:
        return True  # a 404 is an answer
    except OSError:
        return False
    return True
