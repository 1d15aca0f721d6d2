"""Scrapy's offsite filter, widened to the crawl's scope (:mod:`crawler.frontier.scope`).

Distributed mode puts it where Scrapy's ``OffsiteMiddleware`` was: a request passes if
Scrapy's own rule lets it (the spider's ``allowed_domains``, ``allow_offsite``,
``dont_filter``) or if its host is in the hosts ``scrapy seed`` added to the crawl.
"""

from __future__ import annotations

from scrapy import Request, Spider
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached

from crawler.frontier.scope import scope_of
from crawler.statusindex.signals import filtered


class ScopeOffsiteMiddleware(OffsiteMiddleware):
    def request_scheduled(self, request: Request, spider: Spider) -> None:
        """A link dropped before the frontier: the status index hears why."""
        try:
            super().request_scheduled(request, spider)
        except IgnoreRequest:
            filtered(self.crawler, request, "offsite")
            raise

    def should_follow(self, request: Request, spider: Spider) -> bool:
        if super().should_follow(request, spider):
            return True
        scope = scope_of(self.crawler)
        return scope is not None and scope.admits_host(urlparse_cached(request).hostname or "")
