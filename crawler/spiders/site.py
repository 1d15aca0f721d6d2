"""``site``: a whole-site crawl that stores one item per page."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor

from crawler.config.readers import SpiderArgumentError


def _split(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    return [v.strip() for v in value if v.strip()]


def _host(url: str) -> str:
    """The host of start URL *url*; :class:`SpiderArgumentError` unless it is absolute."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # an unparsable URL, e.g. an unclosed IPv6 bracket
        host = None
    if not (host and parts.scheme):
        raise SpiderArgumentError(
            "start_urls", f"{url!r} is not an absolute URL (like https://example.com/)")
    return host


class SiteSpider(Spider):
    """Follow every link of the start URLs' sites; one item per page.

    ``scrapy crawl site -a start_urls=URL[,URL...] [-a allowed_domains=HOST[,HOST...]]``
    """

    name = "site"

    def __init__(self, start_urls: str | list[str] | None = None,
                 allowed_domains: str | list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = _split(start_urls)
        if not self.start_urls:
            raise SpiderArgumentError(
                "start_urls", "missing; the site spider needs -a start_urls=URL[,URL...]")
        hosts = [_host(u) for u in self.start_urls]
        domains = _split(allowed_domains) or sorted(set(hosts))
        self.allowed_domains = [d.lower().lstrip(".") for d in domains]
        self.link_extractor = LinkExtractor()

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """One item for the page, a request for each link on it.

        ``scrapy check site -a start_urls=URL`` fetches URL, a page with links, and checks
        what this returns (``@start_url``: crawler.commands.check):

        @start_url
        @returns items 1 1
        @returns requests 1
        @scrapes url status title fetched_at content_hash depth
        """
        yield {
            "url": response.url,
            "status": response.status,
            "title": self._title(response),
            "fetched_at": datetime.now(UTC).isoformat(timespec="microseconds"),
            "content_hash": hashlib.sha256(response.body).hexdigest(),  # docs/recrawl.md
            "depth": response.meta.get("depth", 0),
        }
        if isinstance(response, TextResponse):
            # off-site links go too: Scrapy's offsite filter drops and counts them, and it
            # reads allowed_domains, which the crawl's scope extends (crawler.frontier.scope)
            for link in self.link_extractor.extract_links(response):
                yield Request(link.url, callback=self.parse)

    @staticmethod
    def _title(response: Response) -> str:
        """The page title, whitespace collapsed; empty when there is none."""
        if not isinstance(response, TextResponse):
            return ""
        try:
            title = response.xpath("//title/text()").get()
        except ValueError:  # a text response that is not HTML or XML
            return ""
        return " ".join(title.split()) if title else ""
