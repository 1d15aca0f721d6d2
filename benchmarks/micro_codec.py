"""Serialisation microbenchmark: :func:`crawler.frontier.codec.encode_request` and
:func:`crawler.frontier.codec.decode_request` of a plain request, one with the meta a crawl
typically carries, one with a large meta, and one with typed values (a version 2 record,
docs/requests.md); microseconds a call and bytes a record.

    .venv/bin/python -m benchmarks.micro_codec [--quick]     # this section alone, no services
"""

from __future__ import annotations

import json
import sys
import timeit
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from scrapy import Request

from benchmarks.micro_frontier import MicroSpider
from benchmarks.micro_result import FULL, QUICK, Measurement, Sizes, fmt, median_of
from crawler.frontier.codec import decode_request, encode_request

CODEC = "Serialisation cost per request"
URL = "https://www.example.com/articles/48213/a-title-of-some-length.html?ref=listing&page=3"


def typical_meta() -> dict[str, Any]:
    """What Scrapy's middlewares and the crawler put in a follow-up request's meta."""
    return {
        "depth": 3, "download_slot": "www.example.com", "download_timeout": 180.0,
        "download_latency": 0.412, "retry_times": 1, "redirect_times": 1, "redirect_ttl": 19,
        "redirect_urls": ["http://www.example.com/articles/48213"],
        "redirect_reasons": [301], "crawler_lease": 8812,
    }


def large_meta(size: int = 5_000) -> dict[str, Any]:
    """Nested data of about *size* bytes of JSON, e.g. an item carried to the next page."""
    items: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"depth": 2, "listing": {"page": 3, "items": items}}
    while len(json.dumps(meta, separators=(",", ":"))) < size:
        i = len(items)
        items.append({"id": i, "title": f"Product title number {i}", "price": 9.5 + i,
                      "tags": ["sale", f"cat-{i % 7}"], "seller": {"name": f"s{i}"}})
    return meta


def typed_meta() -> dict[str, Any]:
    """The typical meta with values JSON cannot hold as they stand, as spiders carry them."""
    return {**typical_meta(), "seen_at": datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
            "published": date(2024, 4, 30), "max_age": timedelta(days=7),
            "price": Decimal("19.99"), "position": (3, 12), "tags": {"sale", "new"},
            "digest": b"\x8f\x1a\x00\xfe"}


def samples(spider: MicroSpider) -> dict[str, Request]:
    return {
        "plain request": Request(URL, callback=spider.parse),
        "typical meta": Request(URL, callback=spider.parse, meta=typical_meta(), priority=-3,
                                headers={"Referer": "https://www.example.com/articles"}),
        "large meta": Request(URL, callback=spider.parse, meta=large_meta()),
        "typed meta": Request(URL, callback=spider.parse, meta=typed_meta(), priority=-3,
                              headers={"Referer": "https://www.example.com/articles"}),
    }


def per_call_us(call: Any, calls: int, repeats: int) -> list[float]:
    return [t / calls * 1e6 for t in timeit.repeat(call, number=calls, repeat=repeats)]


def run(sizes: Sizes) -> list[Measurement]:
    spider, out = MicroSpider(), []
    repeats = max(sizes.repeats, 3)
    for label, request in samples(spider).items():
        record = encode_request(request, spider)
        decode_request(record, spider)  # warm up
        note = f"{sizes.codec_calls:,} calls a run"
        out += [
            median_of(CODEC, f"encode, {label}", per_call_us(
                lambda r=request: encode_request(r, spider), sizes.codec_calls, repeats),
                "us", None, note),
            median_of(CODEC, f"decode, {label}", per_call_us(
                lambda b=record: decode_request(b, spider), sizes.codec_calls, repeats),
                "us", None, note),
            median_of(CODEC, f"record size, {label}", [float(len(record))], "bytes", None,
                      f"JSON version {json.loads(record)['v']}, local meta keys left out"),
        ]
    return out


if __name__ == "__main__":
    for m in run(QUICK if "--quick" in sys.argv else FULL):
        print(f"{m.name:28s} {fmt(m.value):>8s} {m.unit:6s} {m.detail}")
