"""Typed ``meta`` and ``cb_kwargs`` values through the frontier codec (docs/requests.md):
each supported type comes back as itself, a user's dict with the tag key comes back
unchanged, Scrapy's meta keys travel, and a malformed tagged value is a CodecError."""

from __future__ import annotations

import json
import sys
from asyncio import run
from collections import OrderedDict, namedtuple
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import IntEnum
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import DEAD, REQUESTS, MakeWorker, MemSpider
from helpers import module_or_missing
from scrapy import Request, Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from support.proxies import PROXY_ON

from crawler.frontier import metatypes, requestfields
from crawler.frontier.codec import (
    CodecError,
    NotASpiderMethod,
    SeedRefused,
    UnsupportedValue,
    decode_request,
    decode_seed,
    decode_trusted_seed,
    encode_request,
)
from crawler.frontier.seedrule import SeedRule
from crawler.middlewares import proxies


class TypesSpider(Spider):
    name = "types"

    def parse_item(self, response: Any, **kwargs: Any) -> None:
        pass


SPIDER = TypesSpider()
URL = "https://a.test/p"


def record_of(meta: dict[Any, Any] | None = None,
              cb_kwargs: dict[str, Any] | None = None) -> bytes:
    return encode_request(Request(URL, callback=SPIDER.parse_item, meta=meta,
                                  cb_kwargs=cb_kwargs), SPIDER)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``1 == 1.0 == True``, ``[1] != (1,)``)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if type(a) is dict:
        return [(type(k), k) for k in a] == [(type(k), k) for k in b] and \
            all(same(a[k], b[k]) for k in a)
    if type(a) in (set, frozenset):
        return sorted(map(repr, a)) == sorted(map(repr, b))
    if type(a) is datetime:  # the same instant, offset and text (ZoneInfo: a fixed offset)
        return a == b and a.utcoffset() == b.utcoffset() and a.isoformat() == b.isoformat()
    if type(a) is Decimal:
        return str(a) == str(b)  # NaN, -0 and the exponent too
    return bool(a == b)


SAMPLES: dict[str, Any] = {
    "naive datetime": datetime(2024, 2, 29, 23, 59, 59, 999999),
    "UTC datetime": datetime(2024, 5, 1, 12, tzinfo=UTC),
    "offset datetime": datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=5,
                                                                              minutes=30))),
    "odd offset": datetime(1, 1, 1, tzinfo=timezone(-timedelta(hours=3, seconds=15,
                                                              microseconds=5))),
    "zoneinfo datetime": datetime(2024, 7, 1, 9, tzinfo=ZoneInfo("America/New_York")),
    "date": date(2024, 2, 29),
    "timedelta": timedelta(days=-3, seconds=5, microseconds=7),
    "largest timedelta": timedelta.max,
    "bytes": b"\x00\xff\r\n binary",
    "empty bytes": b"",
    "tuple": (1, "a", None, 2.5, True),
    "empty tuple": (),
    "set": {1, "a", (1, 2)},
    "empty set": set(),
    "frozenset": frozenset({1, frozenset({2})}),
    "Decimal": Decimal("1.10"),
    "negative zero Decimal": Decimal("-0.000"),
    "Decimal NaN": Decimal("NaN"),
    "Decimal exponent": Decimal("-1.5E+30"),
    "int keys": {1: "a", 2: "b"},
    "keys of every kind": {None: 1, True: 2, 1.5: 3, (1, "x"): 4, "s": 5,
                           frozenset({date(2024, 1, 1)}): 6},
    "user dict with the tag key": {"$t": "datetime", "v": "2024-01-01T00:00:00"},
    "tag key alone": {"$t": 1},
}


@pytest.mark.parametrize("value", SAMPLES.values(), ids=SAMPLES.keys())
def test_each_type_comes_back_as_itself_in_meta_and_cb_kwargs(value: Any) -> None:
    decoded = decode_request(record_of({"x": value, "depth": 1}, {"x": value}), SPIDER)
    assert same(decoded.meta, {"x": value, "depth": 1}), decoded.meta
    assert same(decoded.cb_kwargs, {"x": value}), decoded.cb_kwargs


def test_nested_and_mixed_values_come_back() -> None:
    meta = {"depth": 2, "rows": [{"when": SAMPLES["offset datetime"], "tags": {"a", "b"},
                                  "price": Decimal("9.99")}, (date(2024, 1, 1), b"\x01")],
            "by_page": {3: [("a", 1)], 4: {"$t": {"$t": (1,)}}}, "plain": ["x", {"y": 1}]}
    cb_kwargs = {"item": {"seen": frozenset({timedelta(seconds=1)}), "raw": [b"a", (b"b",)]},
                 "page": 3}
    decoded = decode_request(record_of(meta, cb_kwargs), SPIDER)
    assert same(decoded.meta, meta) and same(decoded.cb_kwargs, cb_kwargs)


def test_a_record_is_version_1_unless_a_value_needs_a_tag() -> None:
    plain = json.loads(record_of({"depth": 1, "tags": ["a", {"b": None}]}, {"page": 2}))
    assert plain["v"] == 1 and "tags" not in plain  # what every worker reads
    assert plain["meta"] == {"depth": 1, "tags": ["a", {"b": None}]}
    typed = json.loads(record_of({"when": date(2024, 1, 1), "t": ((1,),)}, {"k": {1: b""}}))
    assert typed["v"] == 2 and typed["tags"] == ["bytes", "date", "dict", "tuple"]
    assert typed["meta"]["when"] == {"$t": "date", "v": "2024-01-01"}


class Kind(IntEnum):
    BOOK = 3


Point = namedtuple("Point", "x y")


class Stamp(datetime):
    pass


@pytest.mark.parametrize(("value", "expected"), [
    (Kind.BOOK, 3),  # written as json.dumps writes them: their base value, as before
    (OrderedDict(a=(1,)), {"a": (1,)}),
    (Point(1, 2), (1, 2)),
    (Stamp(2024, 1, 1), datetime(2024, 1, 1)),
])
def test_a_subclass_comes_back_as_its_base_type(value: Any, expected: Any) -> None:
    assert same(decode_request(record_of({"x": value}), SPIDER).meta["x"], expected)


def test_a_user_dict_with_the_tag_key_is_escaped_and_comes_back_unchanged() -> None:
    meta = {"$t": "tuple", "v": [1, 2]}  # the whole meta looks like a tag: still a dict
    record = record_of(meta, {"$t": "x"})
    assert json.loads(record)["meta"] == {"$t": "dict", "v": [["$t", "tuple"], ["v", [1, 2]]]}
    decoded = decode_request(record, SPIDER)
    assert same(decoded.meta, meta) and same(decoded.cb_kwargs, {"$t": "x"})


def test_a_version_1_record_is_read_as_plain_json() -> None:
    """An older worker wrote a user's dict with the tag key as it stood: no tag is read."""
    record = json.dumps({"v": 1, "url": URL, "meta": {"d": {"$t": "date", "v": "2024-01-01"}},
                         "cb_kwargs": {"k": {"$t": "nope"}}}).encode()
    decoded = decode_request(record, SPIDER)
    assert decoded.meta == {"d": {"$t": "date", "v": "2024-01-01"}}
    assert decoded.cb_kwargs == {"k": {"$t": "nope"}}


SCRAPY_META = {
    "depth": 4, "max_retry_times": 7, "handle_httpstatus_list": [404, 503],
    "dont_retry": True, "dont_redirect": True, "download_timeout": 12.5, "cookiejar": 3,
    "dont_merge_cookies": True, "download_slot": "my-slot", "proxy": "http://127.0.0.9:8080",
    "handle_httpstatus_all": False, "bindaddress": ("127.0.0.1", 0), "is_start_request": True,
}


def test_scrapys_meta_keys_travel() -> None:
    meta = decode_request(record_of(SCRAPY_META), SPIDER).meta
    assert same(meta, SCRAPY_META)
    for jar in (("session", 2), "account-7"):  # any hashable the spider keys its jars by
        assert same(decode_request(record_of({"cookiejar": jar}), SPIDER).meta["cookiejar"], jar)


def test_the_proxy_pools_slot_and_pick_stay_the_spiders_own_travel() -> None:
    assert (requestfields.POOL_ID, requestfields.POOL_OWN_SLOT) == (proxies.ID_KEY,
                                                                    proxies._OWN_SLOT)
    crawler = get_crawler(TypesSpider, {**PROXY_ON, "ROTATING_PROXY_LIST": ["127.0.0.1:3128"]})
    crawler.spider = SPIDER
    pool = build_from_crawler(proxies.ProxyPoolMiddleware, crawler)
    run(pool.spider_opened())
    own = Request(URL, meta={"download_slot": "my-slot", "depth": 1})
    none = Request(URL, meta={"depth": 1})
    mine = Request(URL, meta={"proxy": "http://127.0.0.9:8080"})  # the spider's own choice
    for request in (own, none, mine):
        run(pool.process_request(request))
    assert own.meta["download_slot"].startswith("proxy:") and own.meta["proxy"]
    sent = [decode_request(encode_request(r, SPIDER), SPIDER).meta for r in (own, none, mine)]
    assert sent[0]["download_slot"] == "my-slot" and "proxy" not in sent[0]
    assert "download_slot" not in sent[1] and "proxy" not in sent[1]
    assert sent[2] == {"proxy": "http://127.0.0.9:8080"}
    run(pool.spider_closed())


def _typed(meta: Any, tags: Any = ("date",), **fields: Any) -> bytes:
    return json.dumps({"v": 2, "url": URL, "tags": list(tags) if isinstance(tags, tuple)
                       else tags, "meta": meta, **fields}).encode()


@pytest.mark.parametrize(("record", "reason"), [
    (_typed({"x": {"$t": "nope", "v": 1}}), "unknown type tag 'nope'"),
    (_typed({"x": {"$t": 5, "v": 1}}), "unknown type tag"),
    (_typed({"x": {"$t": "date"}}), "must hold exactly"),
    (_typed({"x": {"$t": "date", "v": "2024-01-01", "w": 1}}), "must hold exactly"),
    (_typed({"x": {"$t": "date", "v": "yesterday"}}), "malformed date"),
    (_typed({"x": {"$t": "date", "v": 20240101}}), "a string was expected"),
    (_typed({"x": {"$t": "datetime", "v": "2024-13-01T00:00"}}), "malformed datetime"),
    (_typed({"x": {"$t": "timedelta", "v": [1, 2]}}), "days, seconds, microseconds"),
    (_typed({"x": {"$t": "timedelta", "v": [1, 2.5, 3]}}), "days, seconds, microseconds"),
    (_typed({"x": {"$t": "timedelta", "v": [10**10, 0, 0]}}), "malformed timedelta"),
    (_typed({"x": {"$t": "bytes", "v": "***"}}), "malformed bytes"),
    (_typed({"x": {"$t": "Decimal", "v": "one"}}), "malformed Decimal"),
    (_typed({"x": {"$t": "tuple", "v": {"a": 1}}}), "a list was expected"),
    (_typed({"x": {"$t": "set", "v": [[1]]}}), "malformed set"),  # unhashable
    (_typed({"x": {"$t": "frozenset", "v": [{"$t": "set", "v": []}]}}), "malformed frozenset"),
    (_typed({"x": {"$t": "dict", "v": [[1, 2, 3]]}}), "pairs"),
    (_typed({"x": {"$t": "dict", "v": [[[1], 2]]}}), "malformed dict"),  # a list as a key
    (_typed({"x": {"$t": "PageMethod", "v": ["click", {}, {}]}}), r"\[method, \[args\]"),
    (_typed({"x": {"$t": "PageMethod", "v": ["click", [{"$t": "x", "v": 1}], {}]}}),
     "unknown type tag 'x'"),
    (_typed({"x": {"$t": "PageMethod", "v": [1, [], {}]}}), r"\[method, \[args\], \{kwargs\}\]"),
    (_typed({"x": 1}, tags=None), "field 'tags'"),
    (_typed({"x": 1}, tags=["date", 3]), "field 'tags'"),
    (_typed({"x": 1}, tags=("date", "uuid")), "does not know: 'uuid'"),
    (_typed({"x": 1}, cb_kwargs={"k": {"$t": "set"}}), "field 'cb_kwargs'"),
    (_typed({"$t": "tuple", "v": [1]}), "'meta' must be an object"),
    (_typed({}, cb_kwargs={"k": [{"$t": "tuple", "v": [1]}], "j": {"$t": "x", "v": 0}}),
     "field 'cb_kwargs': unknown type tag 'x'"),
    (_typed({"x": json.loads("[" * 700 + "]" * 700)}), "field 'meta' is nested too deeply"),
    (b'{"v": 3, "url": "https://a.test/"}', "this worker reads 1 and 2"),
])
def test_a_malformed_tagged_value_is_a_codec_error(record: bytes, reason: str) -> None:
    with pytest.raises(CodecError, match=reason):
        decode_request(record, SPIDER)


#: the fields an older worker's decode_seed knew (its whole set), for the mixed-version rule
OLDER_SEED_FIELDS = {"url", "priority", "meta", "callback", "errback", "method", "headers",
                     "body", "cookies", "cb_kwargs", "dont_filter", "flags", "encoding", "v"}


def test_an_older_worker_dead_letters_a_typed_record() -> None:
    """An older worker reads version 1 only: a typed record is a CodecError for its
    decode_request (its version) and for its seed reader, which takes a record of another
    version for a seed's own JSON and refuses a field it does not know ('tags')."""
    record = json.loads(record_of({"when": date(2024, 1, 1)}))
    assert record["v"] == 2
    assert set(record) - OLDER_SEED_FIELDS - {"_class"} == {"tags"}


def test_a_typed_start_request_is_read_whole_and_an_external_one_by_the_rule() -> None:
    record = record_of({"when": date(2024, 1, 1), "depth_limit": 2}, {"k": (1,)})
    trusted = decode_trusted_seed(record, SPIDER)
    assert same(trusted.meta, {"when": date(2024, 1, 1), "depth_limit": 2})
    assert same(trusted.cb_kwargs, {"k": (1,)})
    anything = SeedRule(meta_keys=None, request_fields=frozenset({"callback", "cb_kwargs"}))
    assert same(decode_seed(record, SPIDER, rule=anything).meta["when"], date(2024, 1, 1))
    with pytest.raises(SeedRefused, match="'when' not allowed"):
        decode_seed(record, SPIDER, rule=SeedRule(request_fields=anything.request_fields))
    with pytest.raises(CodecError, match="unknown seed fields: tags"):  # only with "v": 2
        decode_seed(json.dumps({"url": URL, "tags": []}).encode(), SPIDER)


def test_plain_values_are_plain_and_the_rest_are_not() -> None:
    assert metatypes.is_plain({"a": [1, 2.5, None, True, "s", {"b": []}]})
    for value in ({1: "a"}, {"$t": 1}, [(1,)], {"a": {b"k"}}, [[datetime(2024, 1, 1)]]):
        assert not metatypes.is_plain(value), value


SUPPORTED = ("supported: str, int, float, bool, None, list, dict, tuple, set, frozenset, bytes, "
             "datetime, date, timedelta, Decimal, PageMethod")


class Session:
    pass


SESSION = f"{__name__}.Session"


@pytest.mark.parametrize(("meta", "cb_kwargs", "message"), [
    ({"depth": 1, "session": Session()}, {},
     f"meta key 'session' holds a {SESSION}, which cannot travel through the frontier "
     f"({SUPPORTED})"),
    ({}, {"page": 1, "client": Session()},
     f"cb_kwargs key 'client' holds a {SESSION}, which cannot travel through the frontier"),
    ({"item": {"rows": [1, 2, 3, (4, Session())]}}, {},
     f"meta key 'item' holds a {SESSION} at ['rows'][3][1], which cannot travel"),
    ({"seen": {"ok", Session()}}, {}, f"meta key 'seen' holds a {SESSION} in a set, which"),
    ({"by": {Session(): 1}}, {}, f"meta key 'by' holds a {SESSION} as a dict key, which"),
    ({Session(): 1}, {}, f"meta holds a {SESSION} as a dict key, which cannot travel"),
    ({"f": lambda: None}, {}, "meta key 'f' holds a function, which cannot travel"),
    ({"score": float("nan")}, {},
     "meta key 'score' holds the float nan, which cannot travel through the frontier (only "
     "finite floats can)"),
    ({"x": [1, float("-inf")]}, {}, "meta key 'x' holds the float -inf at [1], which"),
])
def test_a_value_that_cannot_travel_is_named_with_its_key_and_type(
        meta: dict[Any, Any], cb_kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedValue) as caught:
        record_of(meta, cb_kwargs)
    assert message in str(caught.value)
    assert caught.value.field == ("cb_kwargs" if cb_kwargs else "meta")


def test_a_value_that_holds_itself_or_is_nested_too_deeply_is_named() -> None:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    for value in (loop, deep):
        with pytest.raises(UnsupportedValue, match="meta key 'bad' holds a value nested too "
                                                   "deeply, or that holds itself"):
            record_of({"depth": 1, "bad": value})


def helper(response: Any) -> None:
    pass


class Other:
    def parse(self, response: Any) -> None:
        pass


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"callback": lambda r: None}, f"callback {__name__}.<lambda> is not a method of the "
     "spider: only the spider's own methods can travel through the frontier, by name"),
    ({"callback": helper}, f"callback {__name__}.helper is not a method of the spider"),
    ({"callback": Other().parse}, f"callback {__name__}.Other.parse is not a method"),
    ({"callback": SPIDER.parse_item, "errback": helper},
     f"errback {__name__}.helper is not a method of the spider"),
])
def test_a_callback_that_is_not_a_spider_method_is_named(kwargs: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(NotASpiderMethod) as caught:
        encode_request(Request(URL, **kwargs), SPIDER)
    assert str(caught.value) == message if message.endswith("by name") else \
        message in str(caught.value)


def _page_method() -> Any:
    page = module_or_missing(
        "scrapy_playwright.page", "scrapy-playwright is not installed (pip install "
        "scrapy-playwright, the browser extra): the PageMethod tests need it")
    return page.PageMethod


def test_a_page_method_comes_back_with_its_typed_arguments() -> None:
    page_method = _page_method()
    methods = [page_method("wait_for_selector", "div.price", timeout=Decimal("1.5")),
               page_method("evaluate", "window.scrollBy(0, 1)", (1, {2}), arg={"$t": b"x"}),
               page_method("screenshot", path="/tmp/x.png", full_page=True)]
    record = record_of({"playwright": True, "playwright_page_methods": methods},
                       {"first": methods[0]})
    assert json.loads(record)["meta"]["playwright_page_methods"][0] == {
        "$t": "PageMethod", "v": ["wait_for_selector", ["div.price"],
                                  {"timeout": {"$t": "Decimal", "v": "1.5"}}]}
    decoded = decode_request(record, SPIDER)
    back = [*decoded.meta["playwright_page_methods"], decoded.cb_kwargs["first"]]
    for sent, got in zip([*methods, methods[0]], back, strict=True):
        assert type(got) is page_method
        assert (got.method, got.result) == (sent.method, None)
        assert same(got.args, sent.args) and same(got.kwargs, sent.kwargs)


def test_a_page_method_with_a_callable_cannot_travel() -> None:
    page_method = _page_method()
    with pytest.raises(UnsupportedValue, match=r"meta key 'playwright_page_methods' holds a "
                       rf"PageMethod of the callable {__name__}.helper at \[1\], "
                       r"which cannot travel through the frontier \(only a Page method named by "
                       r"a string can\)"):
        record_of({"playwright_page_methods": [page_method("click", "a"), page_method(helper)]})
    with pytest.raises(UnsupportedValue, match=r"holds a .*Session at \[0\]\.kwargs\['s'\]"):
        record_of({"playwright_page_methods": [page_method("click", s=Session())]})


def test_a_page_method_without_scrapy_playwright_is_a_codec_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    page_method = _page_method()
    record = record_of({"playwright_page_methods": [page_method("click", "a")]})
    monkeypatch.setitem(sys.modules, "scrapy_playwright.page", None)
    with pytest.raises(CodecError, match="a PageMethod needs scrapy-playwright, which this "
                                         "worker lacks"):
        decode_request(record, SPIDER)


def test_a_worker_dead_letters_a_malformed_typed_record_and_takes_the_next(
        make_worker: MakeWorker) -> None:
    async def scenario() -> None:
        w = make_worker()
        bad = _typed({"x": {"$t": "datetime", "v": "not a time"}}, tags=("datetime",))
        good = encode_request(Request(URL, meta={"when": date(2024, 1, 1)}), MemSpider())
        w.log.records[(REQUESTS, 0)] += [bad, good]
        w.consumer.poll()
        assert [r.meta["when"] for r in w.take()] == [date(2024, 1, 1)]
        w.producer.acknowledge()
        [dead] = [json.loads(v) for v in w.records(DEAD)]
        assert dead["reason"].startswith("field 'meta': malformed datetime: Invalid isoformat")
        assert dead["source"] == {"topic": REQUESTS, "partition": 0, "offset": 0}

    run(scenario())
