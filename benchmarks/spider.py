"""The benchmark spider and a probe extension; every crawler under test runs both.

The spider follows every link with ``LinkExtractor`` and yields one small item per page.
:class:`Probe` writes what the runner cannot see from outside to ``BENCH_PROBE_PATH``
(JSON): pages, items, the wall-clock time of the first and last response, and the parts of
a worker's start-up (``startup/*`` stats).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.httpobj import urlparse_cached


class BenchSpider(Spider):
    """``-a start_url=URL``: the whole site behind *start_url*."""

    name = "bench"

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not start_url:
            raise ValueError("the bench spider needs -a start_url=URL")
        self.start_url = start_url
        self.link_extractor = LinkExtractor()

    async def start(self) -> AsyncIterator[Any]:
        yield Request(self.start_url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, TextResponse):
            return
        yield {"url": response.url, "title": response.css("title::text").get()}
        for link in self.link_extractor.extract_links(response):
            yield Request(link.url, callback=self.parse)


class Probe:
    """``EXTENSIONS = {"benchmarks.spider.Probe": 0}`` with ``BENCH_PROBE_PATH``."""

    def __init__(self, path: Path, stats: Any = None) -> None:
        self.path = path
        self.stats = stats  # the crawler's: its startup/* parts (crawler.frontier.startup)
        self.pages = 0
        self.items = 0
        self.first: float | None = None
        self.last: float | None = None
        self.last_item: float | None = None
        self.threads: dict[str, float] = {}  # sampled while crawling: threads may end early
        self.every = 1000  # pages between two points of the series
        self.series: list[tuple[int, float, float]] = []  # (pages, RSS MiB, CPU-s) so far

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Probe:
        probe = cls(Path(crawler.settings.get("BENCH_PROBE_PATH", "probe.json")), crawler.stats)
        probe.every = crawler.settings.getint("BENCH_SERIES_EVERY", probe.every)
        crawler.signals.connect(probe.response, signals.response_received)
        crawler.signals.connect(probe.item, signals.item_scraped)
        crawler.signals.connect(probe.closed, signals.spider_closed)
        return probe

    def response(self, response: Response) -> None:
        if urlparse_cached(response).path == "/robots.txt":  # not a page of the site
            return
        now = time.time()
        self.pages += 1
        if self.pages % 500 == 0:
            self.threads = thread_cpu()
        if self.pages % self.every == 0:
            self.series.append((self.pages, (rss_kib() or 0) / 1024,
                                stat_cpu_seconds("/proc/self/stat") or 0))
        if self.first is None:
            self.first = now
        self.last = now

    def item(self) -> None:
        self.items += 1
        self.last_item = time.time()

    def closed(self, reason: str) -> None:
        data = {"pages": self.pages, "items": self.items, "first": self.first,
                "last": self.last, "last_item": self.last_item,
                "closed": time.time(), "reason": reason,
                "threads": self.threads or thread_cpu(), "startup": self.startup(),
                "series": self.series}
        self.path.write_text(json.dumps(data))


    def startup(self) -> dict[str, float]:
        """Seconds of each part of the worker's start-up (none for Scrapy alone)."""
        stats = self.stats.get_stats() if self.stats is not None else {}
        return {k.removeprefix("startup/"): v for k, v in stats.items()
                if k.startswith("startup/")}


def stat_cpu_seconds(path: str) -> float | None:
    """User + system CPU seconds in a ``/proc/.../stat`` file; None if it is gone."""
    try:
        with open(path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:  # the process or thread ended meanwhile
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def rss_kib(pid: int | str = "self") -> int | None:
    """The resident set size of process *pid* now (``VmRSS``), KiB; None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next(row for row in status if row.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1])


def thread_cpu() -> dict[str, float]:
    """CPU seconds used so far by each thread of this process, by thread name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    result: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        cpu = stat_cpu_seconds(f"/proc/self/task/{task}/stat")
        if cpu is not None:
            name = names.get(int(task), "other")
            result[name] = result.get(name, 0.0) + cpu
    return result
