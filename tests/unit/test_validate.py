"""Item validation per spider: a JSON Schema or an item class; invalid items are dropped with
the first error, valid ones pass; a broken schema is named at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from scrapy import Spider
from scrapy.exceptions import DropItem
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.pipelines.validate import ValidationPipeline


@dataclass
class Page:
    url: str
    title: str = ""


class SchemaSpider(Spider):
    name = "schema"
    item_schema: Any = {"type": "object", "required": ["url"],
                        "properties": {"url": {"type": "string"},
                                       "status": {"type": "integer"}}}


class ClassSpider(Spider):
    name = "classy"
    item_class = Page


def _pipeline(spider: type[Spider]) -> ValidationPipeline:
    crawler = get_crawler(spider)
    crawler.spider = crawler._create_spider()
    pipeline = ValidationPipeline.from_crawler(crawler)
    pipeline.open_spider()
    return pipeline


def test_a_json_schema_drops_the_items_it_refuses() -> None:
    pipeline = _pipeline(SchemaSpider)
    item = {"url": "http://a.test/", "status": 200}
    assert pipeline.process_item(item) is item
    with pytest.raises(DropItem, match="invalid item: status: 'ok' is not of type 'integer'"):
        pipeline.process_item({"url": "http://a.test/", "status": "ok"})
    with pytest.raises(DropItem, match="'url' is a required property"):
        pipeline.process_item({"status": 1})


def test_an_item_class_builds_the_item_or_drops_it() -> None:
    pipeline = _pipeline(ClassSpider)
    assert pipeline.process_item({"url": "http://a.test/"}) == Page("http://a.test/")
    with pytest.raises(DropItem, match=r"invalid item for Page: .*colour"):
        pipeline.process_item({"url": "http://a.test/", "colour": "red"})


def test_a_broken_schema_is_named_at_start_up() -> None:
    class Broken(SchemaSpider):
        item_schema = {"type": "no such type"}

    with pytest.raises(SettingError, match="item_schema"):
        _pipeline(Broken)


def test_a_spider_without_either_passes_everything() -> None:
    class Plain(Spider):
        name = "plain"

    item = {"anything": object()}
    assert _pipeline(Plain).process_item(item) is item
