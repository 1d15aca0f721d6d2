"""The line of a request that can never be sent names where it came from and its big meta."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from conftest import DEAD, REQUESTS, MakeWorker, settle
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


@pytest.mark.parametrize(("meta", "stat", "problem"), [
    ({"blob": "x" * unsendable.VALUE_LIMIT}, "frontier/refused",
     "bytes encoded, a record holds at most 1,048,064)"),
    ({"when": object()}, "frontier/unencodable", "not JSON-serialisable"),
])
def test_a_request_that_can_never_travel_is_reported_when_the_spider_yields_it(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture, meta: dict[str, object],
        stat: str, problem: str) -> None:
    async def scenario() -> None:
        w = make_worker()
        with caplog.at_level(logging.ERROR, "crawler.frontier.outbox"):
            accepted = w.scheduler.enqueue_request(Request("https://a.test/big", meta=meta))
            # reported before any dupefilter call or send: in the spider's yield
            assert not accepted and w.stats.get_value(stat) == 1
            assert "Request https://a.test/big yielded by spider 'mem' in callback parse " \
                   "can never be sent (" in caplog.text and problem in caplog.text
        assert w.scheduler.enqueue_request(Request("https://a.test/fine"))
        await settle()
        w.producer.acknowledge()  # the broker takes every send
        await settle()  # and the Bloom filter marks the fine one seen
        dead = [json.loads(v) for v in w.records(DEAD)]
        assert [d["source"] for d in dead] == [{"url": "https://a.test/big"}]
        assert [json.loads(v)["url"] for v in w.records(REQUESTS)] == ["https://a.test/fine"]
        assert not w.scheduler.outbox.busy

    asyncio.run(scenario())
