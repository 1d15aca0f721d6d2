"""Sitemaps (``SITEMAP_DISCOVERY``): the ``Sitemap:`` lines of each host's robots.txt, sitemap
indexes and gzip sitemaps, within size bounds and with an optional lastmod filter.

The worker that fetches a host's robots.txt for the cluster (:mod:`crawler.middlewares.robots`)
schedules a request for each ``Sitemap:`` URL, marked with :data:`SITEMAP_META`; such
requests go through the frontier like any other (deduplicated, leased, acknowledged). This
spider middleware (order 950, next to the spider) answers their responses in the spider's
place: an index gives a request per child sitemap, a ``urlset`` a request per page for the
spider's default callback. What the spider would have made of the XML is dropped.

Bounds: a sitemap of more than ``SITEMAP_MAX_SIZE`` bytes, unpacked, is skipped
(``sitemap/too_big``); at most ``SITEMAP_MAX_URLS`` entries of one sitemap are read (the
sitemaps protocol's limits are 50 MB and 50,000); with ``SITEMAP_LASTMOD_AFTER`` (an ISO
date), pages whose ``lastmod`` is older are skipped (``sitemap/too_old``, the ledger's
``discarded/sitemap_too_old``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any, Self

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.frontier.urls import normal_url

logger = logging.getLogger(__name__)
SITEMAP_META = "sitemap"  # request meta: its response is a sitemap, read here


@dataclass(frozen=True, slots=True)
class SitemapConfig:
    discovery: bool
    max_size: int
    max_urls: int
    lastmod_after: str  # "" or an ISO date: lastmods compare as text on their date part

    @classmethod
    def from_settings(cls, s: Any) -> SitemapConfig:
        after = config.get_str(s, "SITEMAP_LASTMOD_AFTER")
        if after:
            try:
                date.fromisoformat(after)
            except ValueError:
                raise SettingError("SITEMAP_LASTMOD_AFTER",
                                   f"expected an ISO date like 2026-01-31, got {after!r}") from None
        return cls(discovery=config.get_bool(s, "SITEMAP_DISCOVERY"),
                   max_size=config.get_int(s, "SITEMAP_MAX_SIZE", minimum=1024),
                   max_urls=config.get_int(s, "SITEMAP_MAX_URLS", minimum=1),
                   lastmod_after=after)


def sitemap_requests(robots_body: str, origin: str) -> list[Request]:
    """A request for each ``Sitemap:`` line of *robots_body* (*origin*'s robots.txt)."""
    found = sitemap_urls_from_robots(robots_body.encode("utf-8"), base_url=origin + "/")
    urls = [url for url in map(_normal, found) if url]
    return [Request(url, meta={SITEMAP_META: True}, priority=1) for url in dict.fromkeys(urls)]


def _normal(url: str) -> str:
    """*url* in normal form; "" unless it is an http(s) URL."""
    if not url.startswith(("http://", "https://")):
        return ""
    try:
        return normal_url(url)
    except ValueError:
        return ""


class SitemapMiddleware:
    def __init__(self, crawler: Crawler, cfg: SitemapConfig) -> None:
        self.crawler, self.cfg, self.stats = crawler, cfg, crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        cfg = SitemapConfig.from_settings(crawler.settings)
        if not cfg.discovery:
            raise NotConfigured("SITEMAP_DISCOVERY is off")
        return cls(crawler, cfg)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        if not response.meta.get(SITEMAP_META):
            yield from result
            return
        yield from self.read(response)

    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        if not response.meta.get(SITEMAP_META):
            async for item in result:
                yield item
            return
        for request in self.read(response):
            yield request

    def read(self, response: Response) -> Iterator[Request]:
        """The requests of sitemap *response*: child sitemaps, or pages."""
        body = self._body(response)
        if body is None:
            return
        try:
            sitemap = Sitemap(body)
        except Exception as exc:  # lxml: not XML at all
            self._skip(response, "unreadable", exc)
            return
        self.stats.inc_value(f"sitemap/{sitemap.type or 'unknown'}")
        for entry in itertools.islice(sitemap, self.cfg.max_urls):
            loc = str(entry.get("loc") or "")
            if not loc.startswith(("http://", "https://")):
                continue
            if sitemap.type == "sitemapindex":
                yield Request(loc, meta={SITEMAP_META: True}, priority=1)
            elif self._fresh(entry):
                self.stats.inc_value("sitemap/urls")
                yield Request(loc)

    def _body(self, response: Response) -> bytes | None:
        body = response.body
        if body[:3] == b"\x1f\x8b\x08":  # a .xml.gz (not a Content-Encoding: that is undone)
            try:
                body = gunzip(body, max_size=self.cfg.max_size)
            except Exception as exc:  # past the bound, or a broken archive
                self._skip(response, "too_big" if "max" in str(exc).lower() else "unreadable",
                           exc)
                return None
        if len(body) > self.cfg.max_size:
            self._skip(response, "too_big", None)
            return None
        return body

    def _fresh(self, entry: dict[str, Any]) -> bool:
        lastmod = str(entry.get("lastmod") or "")[:10]
        if self.cfg.lastmod_after and lastmod and lastmod < self.cfg.lastmod_after:
            self.stats.inc_value("sitemap/too_old")
            return False
        return True

    def _skip(self, response: Response, why: str, exc: BaseException | None) -> None:
        self.stats.inc_value(f"sitemap/{why}")
        logger.warning("Sitemap %s skipped (%s)%s", response.url, why,
                       f": {exc}" if exc is not None else "")
