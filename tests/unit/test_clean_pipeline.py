"""CleanPipeline: trimmed strings, a tidy title, no None fields, no item without a url."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import scrapy
from scrapy.exceptions import DropItem
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from crawler.pipelines.clean import CleanPipeline


class Page(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    price = scrapy.Field()


@dataclass
class PageData:
    url: str
    title: str | None = None


@pytest.fixture
def pipeline() -> CleanPipeline:
    pipeline: CleanPipeline = build_from_crawler(CleanPipeline, get_crawler())
    return pipeline


def test_cleans_a_dict_item(pipeline: CleanPipeline) -> None:
    item: dict[str, Any] = {
        "url": "  https://example.com/a \n", "title": "\n  A \t\n long   title ",
        "body": "  first line\n\nsecond line  ", "price": 3, "tags": [" a "], "empty": None,
    }
    assert pipeline.process_item(item) is item
    assert item == {"url": "https://example.com/a", "title": "A long title",
                    "body": "first line\n\nsecond line", "price": 3, "tags": [" a "]}


def test_cleans_scrapy_items_and_dataclasses(pipeline: CleanPipeline) -> None:
    page = Page(url=" https://example.com/b ", title="  B  ", price=None)
    pipeline.process_item(page)
    assert dict(page) == {"url": "https://example.com/b", "title": "B"}
    data = PageData(url="https://example.com/c ", title=" C\n c ")
    pipeline.process_item(data)
    assert (data.url, data.title) == ("https://example.com/c", "C c")


@pytest.mark.parametrize("item", [{"title": "x"}, {"url": None}, {"url": "   "}, {"url": ""}])
def test_an_item_without_url_is_dropped(pipeline: CleanPipeline, item: dict[str, Any]) -> None:
    with pytest.raises(DropItem, match="no url"):
        pipeline.process_item(item)
