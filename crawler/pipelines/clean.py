"""Tidy items before they are stored: trimmed strings, no empty fields, a url."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem

if TYPE_CHECKING:
    from scrapy import Spider

_WHITESPACE = re.compile(r"\s+")


class CleanPipeline:
    """Strip string fields, collapse whitespace in ``title``, drop ``None`` fields.

    Items without a ``url`` are dropped. Put it before ``MongoPipeline`` in
    ``ITEM_PIPELINES`` (a lower number).
    """

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        adapter = ItemAdapter(item)
        for name, value in list(adapter.items()):
            if value is None:
                del adapter[name]
            elif isinstance(value, str):
                adapter[name] = _WHITESPACE.sub(" ", value).strip() if name == "title" \
                    else value.strip()
        if not adapter.get("url"):
            raise DropItem("Item has no url")
        return item
