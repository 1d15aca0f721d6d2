"""The line of a request that can never be sent names where it came from and its big meta."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from conftest import DEAD, REQUESTS, MakeWorker, settle
from scrapy import Request, Spider

from crawler.frontier import codec, unsendable


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


class Session:
    pass


SUPPORTED = ("(supported: str, int, float, bool, None, list, dict, tuple, set, frozenset, "
             "bytes, datetime, date, timedelta, Decimal, PageMethod)")


def test_the_line_of_a_value_that_cannot_travel_names_its_key_and_type() -> None:
    request = Request("https://a.test/x", callback=_Shop().parse_item,
                      meta={"depth": 1, "session": Session()})
    with pytest.raises(codec.CodecError) as caught:
        codec.encode_request(request, _Shop())
    assert unsendable.unencodable(request, caught.value, "shop") == (
        "Request https://a.test/x yielded by spider 'shop' in callback parse_item can never be "
        f"sent: meta key 'session' holds a {__name__}.Session, which cannot travel through "
        f"the frontier {SUPPORTED}")


def test_the_line_of_a_callback_that_is_not_a_spider_method_names_it() -> None:
    request = Request("https://a.test/x", callback=lambda response: None)
    with pytest.raises(codec.CodecError) as caught:
        codec.encode_request(request, _Shop())
    assert unsendable.unencodable(request, caught.value, "shop") == (
        f"Request https://a.test/x yielded by spider 'shop' can never be sent: callback "
        f"{__name__}.test_the_line_of_a_callback_that_is_not_a_spider_method_names_it."
        "<locals>.<lambda> is not a method of the spider: only the spider's own methods can "
        "travel through the frontier, by name")


def _errback(failure: object) -> None:
    pass


CANNOT = "which cannot travel through the frontier"


@pytest.mark.parametrize(("kwargs", "stat", "problem"), [
    ({"meta": {"blob": "x" * unsendable.VALUE_LIMIT}}, "frontier/refused",
     " (1,048,277 bytes encoded, a record holds at most 1,048,064); largest meta keys: blob "
     "(1,048,066 bytes)"),
    ({"meta": {"when": object()}}, "frontier/unencodable",
     f": meta key 'when' holds an object, {CANNOT} {SUPPORTED}"),
    ({"cb_kwargs": {"page": 2, "client": Session()}}, "frontier/unencodable",
     f": cb_kwargs key 'client' holds a {__name__}.Session, {CANNOT} {SUPPORTED}"),
    ({"errback": _errback}, "frontier/unencodable",
     f": errback {__name__}._errback is not a method of the spider: only the spider's own "
     "methods can travel through the frontier, by name"),
])
def test_a_request_that_can_never_travel_is_reported_when_the_spider_yields_it(
        make_worker: MakeWorker, caplog: pytest.LogCaptureFixture, kwargs: dict[str, object],
        stat: str, problem: str) -> None:
    async def scenario() -> None:
        w = make_worker()
        with caplog.at_level(logging.ERROR, "crawler.frontier.outbox"):
            accepted = w.scheduler.enqueue_request(Request("https://a.test/big", **kwargs))
            # reported before any dupefilter call or send: in the spider's yield
            assert not accepted and w.stats.get_value(stat) == 1
            assert [r.getMessage() for r in caplog.records] == [
                "Request https://a.test/big yielded by spider 'mem' in callback parse can "
                f"never be sent{problem}"]
            assert caplog.records[0].exc_info is None  # no traceback
        assert w.scheduler.enqueue_request(Request("https://a.test/fine"))
        await settle()
        w.producer.acknowledge()  # the broker takes every send
        await settle()  # and the Bloom filter marks the fine one seen
        dead = [json.loads(v) for v in w.records(DEAD)]
        assert [d["source"] for d in dead] == [{"url": "https://a.test/big"}]
        assert [json.loads(v)["url"] for v in w.records(REQUESTS)] == ["https://a.test/fine"]
        assert not w.scheduler.outbox.busy

    asyncio.run(scenario())
