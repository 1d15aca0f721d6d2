"""The line of a request that can never be sent names where it came from and its big meta."""

from __future__ import annotations

import pytest
from scrapy import Request, Spider

from crawler.frontier import unsendable


class _Shop(Spider):
    name = "shop"

    def parse_item(self, response: object) -> None:
        pass


def test_the_line_names_the_spider_the_callback_and_the_largest_meta_keys() -> None:
    request = Request("https://a.test/x", callback=_Shop().parse_item,
                      meta={"blob": "x" * 5000, "depth": 1, "tag": "t", "small": None})
    line = unsendable.describe(request, "1,234 bytes encoded: MessageSizeTooLargeError")
    assert line == ("Request https://a.test/x yielded by spider 'shop' in callback parse_item "
                    "can never be sent (1,234 bytes encoded: MessageSizeTooLargeError); "
                    "largest meta keys: blob (5,002 bytes), small (4 bytes), tag (3 bytes)")


def test_a_request_without_callback_takes_the_spider_it_is_told() -> None:
    line = unsendable.describe(Request("https://a.test/y", meta={"when": object()}),
                               "not JSON-serialisable", "poison")
    assert "yielded by spider 'poison' in callback parse" in line
    assert "largest meta keys: when (" in line  # an object is sized by its str()
    assert unsendable.largest_meta(Request("https://a.test/z")) == "no meta"


@pytest.mark.parametrize(("value", "text"), [("", "k (2 bytes)"), (1, "k (1 byte)")])
def test_sizes_are_plural_but_one(value: object, text: str) -> None:
    assert unsendable.largest_meta(Request("https://a.test/", meta={"k": value})) == \
        f"largest meta keys: {text}"
