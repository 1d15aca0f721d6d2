"""Optional item validation, per spider: a JSON Schema, or an item class itemadapter knows.

A spider opts in with one attribute:

- ``item_schema``: a JSON Schema (a dict), checked against each item's fields;
- ``item_class``: a dataclass, attrs or pydantic class; an item that is not one already is
  built from its fields (``item_class(**fields)``), so a missing or unexpected field fails.

An invalid item is dropped with the first error, which
:mod:`crawler.storage.rejected` keeps in ``<CRAWL_ID>.rejected`` with the page's URL. A
spider without either passes every item through untouched. A schema that is itself invalid
stops the crawl at start-up with one line naming the spider attribute.
"""

from __future__ import annotations

from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem

from crawler.config.readers import SettingError


class ValidationPipeline:
    """Drops the items that fail their spider's ``item_schema`` or ``item_class``."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._validator: Any = None
        self._class: type | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def open_spider(self, spider: Any = None) -> None:
        spider = self.crawler.spider
        schema = getattr(spider, "item_schema", None)
        if schema is not None:
            import jsonschema  # type: ignore[import-untyped]

            try:
                validator = jsonschema.validators.validator_for(schema)
                validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise SettingError("item_schema", f"spider {spider.name!r}: not a valid JSON "
                                   f"Schema: {exc.message}") from None
            self._validator = validator(schema)
        item_class = getattr(spider, "item_class", None)
        if item_class is not None:
            if not isinstance(item_class, type) or not ItemAdapter.is_item_class(item_class):
                raise SettingError("item_class", f"spider {spider.name!r}: {item_class!r} is "
                                   "not an item class (dataclass, attrs, pydantic, Item)")
            self._class = item_class

    def process_item(self, item: Any, spider: Any = None) -> Any:
        if self._validator is not None:
            error = next(iter(self._validator.iter_errors(ItemAdapter(item).asdict())), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "the item"
                raise DropItem(f"invalid item: {where}: {error.message}")
        if self._class is not None and not isinstance(item, self._class):
            try:
                item = self._class(**ItemAdapter(item).asdict())
            except Exception as exc:  # TypeError, pydantic's ValidationError, attrs' checks
                raise DropItem(f"invalid item for {self._class.__name__}: {exc}") from None
        return item
