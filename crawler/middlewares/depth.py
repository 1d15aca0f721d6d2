"""Scrapy's depth limit, and a seed's own: a request's ``depth_limit`` meta (a seed's, set
in its JSON: ``{"url": ..., "meta": {"depth_limit": 2}}``) bounds the depth of the links found
below it, which inherit it. A link past it is dropped and counted as Scrapy counts its own
(``depth/request_ignored_count``: the ledger's ``discarded/depth``)."""

from __future__ import annotations

from typing import Any

from scrapy import Request
from scrapy.http import Response
from scrapy.spidermiddlewares.depth import DepthMiddleware

from crawler.statusindex.signals import filtered

DEPTH_LIMIT_META = "depth_limit"


def _limit(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class SeedDepthMiddleware(DepthMiddleware):
    """``DEPTH_LIMIT`` for the crawl, ``depth_limit`` meta below one request."""

    def get_processed_request(self, request: Request,
                              response: Response | None) -> Request | None:
        inherited = response.meta.get(DEPTH_LIMIT_META) if response is not None else None
        if inherited is not None:
            request.meta.setdefault(DEPTH_LIMIT_META, inherited)
        processed = super().get_processed_request(request, response)
        if processed is None or response is None:
            if processed is None:  # past DEPTH_LIMIT
                filtered(self.crawler, request, "depth")
            return processed
        limit = _limit(processed.meta.get(DEPTH_LIMIT_META))
        if limit is not None and int(processed.meta.get("depth", 0)) > limit:
            self.stats.inc_value("depth/request_ignored_count")
            filtered(self.crawler, request, "depth")
            return None
        return processed
