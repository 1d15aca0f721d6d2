"""The ``site`` spider with an item schema: a page titled "reject me" gives an invalid item,
which is dropped and kept in ``<CRAWL_ID>.rejected`` (tests/e2e/test_ledger.py)."""

from __future__ import annotations

from typing import Any

from crawler.spiders.site import SiteSpider


class LedgerSpider(SiteSpider):
    name = "ledger"
    item_schema: Any = {"type": "object", "required": ["url"],
                        "properties": {"title": {"not": {"const": "reject me"}}}}
