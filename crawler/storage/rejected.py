"""Items that were dropped are kept: ``MONGO_DATABASE``.``<CRAWL_ID>.rejected``.

Whatever dropped the item (MongoDB cannot store it: too large, not encodable, a write it
refuses; the validation of :mod:`crawler.pipelines.validate`; any pipeline's ``DropItem``),
:class:`RejectedItems` writes one document with the reason, the URL of the page it came
from and as much of the item as can be shown, before Scrapy goes on (it awaits the
``item_dropped`` handlers): the page's lease is not acknowledged before its rejected items
are kept. A document's ``_id`` is a digest of its page and of the item's ``MONGO_KEY_FIELDS``
(the fields its stored document would be keyed by), so a page processed again after a
redelivery replaces its documents instead of adding more, even when the item carries a field
that changes from one fetch to the next (a timestamp). An item without those fields is keyed
by its reason and whole preview instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawler.config.readers import get_list, get_str
from crawler.middlewares.retry import strip_userinfo
from crawler.storage.failures import FailureStore

logger = logging.getLogger(__name__)
COLLECTION_SUFFIX = ".rejected"
PREVIEW_BYTES = 16 * 1024  # of the item, as JSON text


def preview(item: Any) -> tuple[str, bool]:
    """*item* as JSON text (``repr`` for what JSON cannot show), cut at ``PREVIEW_BYTES``."""
    try:
        fields = ItemAdapter(item).asdict() if ItemAdapter.is_item(item) else {"item": item}
    except Exception:  # an item class that cannot even be read
        fields = {"item": repr(item)}
    text = json.dumps(fields, default=repr, ensure_ascii=False)
    if len(text.encode()) <= PREVIEW_BYTES:
        return text, False
    return text.encode()[:PREVIEW_BYTES].decode("utf-8", "ignore"), True


def identity(item: Any, key_fields: list[str]) -> str | None:
    """The canonical JSON of *item*'s *key_fields*, or ``None`` when one is missing."""
    try:
        adapter = ItemAdapter(item)
        values = {name: adapter.get(name) for name in key_fields}
    except Exception:  # not an item, or one that cannot be read
        return None
    if any(value in (None, "") for value in values.values()):
        return None
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)


@dataclass(frozen=True)
class Rejected:
    url: str  # of the page the item came from; no credentials
    reason: str
    item: str
    truncated: bool
    spider: str
    key: str | None = None  # :func:`identity` of the item

    def document(self) -> dict[str, Any]:
        which = f"key\0{self.key}" if self.key is not None else f"{self.reason}\0{self.item}"
        digest = hashlib.sha1(f"{self.url}\0{which}".encode()).hexdigest()
        return {"_id": digest, "url": self.url, "reason": self.reason, "item": self.item,
                "truncated": self.truncated, "spider": self.spider,
                "rejected_at": datetime.now(UTC).isoformat()}


class RejectedItems:
    """Keeps every dropped item in ``<CRAWL_ID>.rejected`` (distributed mode)."""

    def __init__(self, crawler: Crawler, key_fields: list[str]) -> None:
        self.crawler = crawler
        self.key_fields = key_fields
        self.store: FailureStore | None = None  # built for the spider, when it opens

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not get_str(crawler.settings, "MONGO_URI"):
            raise NotConfigured("RejectedItems needs MONGO_URI (setting or environment)")
        extension = cls(crawler, get_list(crawler.settings, "MONGO_KEY_FIELDS"))
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_opened(self) -> None:
        self.store = FailureStore.from_crawler(self.crawler, suffix=COLLECTION_SUFFIX,
                                               what="item")

    async def item_dropped(self, item: Any, response: Any, exception: BaseException,
                           spider: Any = None) -> None:
        if self.store is None:
            return
        text, cut = preview(item)
        url = strip_userinfo(getattr(response, "url", "") or "")
        name = getattr(self.crawler.spider, "name", "")
        reason = str(exception) or type(exception).__name__
        await self.store.record(Rejected(url, reason, text, cut, name,
                                         identity(item, self.key_fields)))

    async def spider_closed(self) -> None:
        if self.store is not None:
            await self.store.close()
