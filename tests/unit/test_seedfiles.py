"""Seeds before they are published: one normal form of a URL, and the sources ``scrapy seed``
reads (lines, JSON lines, CSV; plain or gzip, by magic bytes)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from crawler.frontier import codec, seedfiles
from crawler.frontier.seedfiles import Bad, Seed
from crawler.frontier.urls import normal_url


@pytest.mark.parametrize(("url", "normal"), [
    ("HTTPS://Example.COM:443/a/../b#frag", "https://example.com/b"),
    ("http://a.test", "http://a.test/"),
    ("http://a.test:8080/./x/./y/../z?b=2&a=1#f", "http://a.test:8080/x/z?b=2&a=1"),
    ("http://u:p@A.test:80/a/b/../../c", "http://u:p@a.test/c"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("http://a.test/../../x", "http://a.test/x"),
    ("http://a.test/a/b/.", "http://a.test/a/b/"),
])
def test_a_url_has_one_normal_form(url: str, normal: str) -> None:
    assert normal_url(url) == normal
    assert normal_url(normal) == normal


def test_a_seed_record_is_normalised_by_the_worker_too() -> None:
    assert codec.decode_seed(b"HTTP://A.test:80/x/../y#z").url == "http://a.test/y"
    request = codec.decode_seed(b'{"url": "http://A.test/./p", "priority": 4}')
    assert (request.url, request.priority) == ("http://a.test/p", 4)
    with pytest.raises(codec.CodecError, match="invalid URL"):
        codec.decode_seed(b"http://a.test:99999/")


def _read(text: str, fmt: str) -> list[Seed | Bad]:
    return list(seedfiles.read(io.StringIO(text), "f", fmt))


def test_lines_are_urls_or_json_objects() -> None:
    got = _read('# comment\n\nHTTP://A.test/1\n{"url": "http://a.test/2", "priority": 3}\n'
                '{"url": "http://A.test/3"}\nnot a url\n{"url": 5}\n', "lines")
    assert got[:3] == [
        Seed(b"http://a.test/1", "http://a.test/1"),
        Seed(b'{"url": "http://a.test/2", "priority": 3}', "http://a.test/2"),
        Seed(b'{"url":"http://a.test/3"}', "http://a.test/3"),
    ]
    assert [(b.where, b.reason) for b in got[3:]] == [  # type: ignore[union-attr]
        ("f:6", "invalid URL 'not a url': expected an absolute http(s) URL"),
        ("f:7", "missing 'url'")]


def test_csv_rows_are_url_and_priority() -> None:
    got = _read("url,priority\nhttp://a.test/1,5\nhttp://a.test/2\n,\nhttp://a.test/3,high\n"
                "a,b,c\n", "csv")
    assert got[0] == Seed(json.dumps({"url": "http://a.test/1", "priority": 5}).encode(),
                          "http://a.test/1")
    assert got[1] == Seed(b"http://a.test/2", "http://a.test/2")
    assert [b.where for b in got[2:]] == ["f:5", "f:6"]  # type: ignore[union-attr]
    assert "priority 'high' is not an integer" in got[2].reason  # type: ignore[union-attr]


def test_gzip_is_known_by_its_bytes_and_csv_by_its_name(tmp_path: Path) -> None:
    packed = tmp_path / "seeds.bin"
    packed.write_bytes(gzip.compress(b"http://a.test/1\nhttp://a.test/2\n"))
    with seedfiles.open_text(str(packed)) as handle:
        assert [s.url for s in seedfiles.read(handle, "x", "lines")] == [  # type: ignore[union-attr]
            "http://a.test/1", "http://a.test/2"]
    assert seedfiles.format_of("a/seeds.CSV.gz") == "csv"
    assert seedfiles.format_of("seeds.jsonl") == "lines"
    assert seedfiles.format_of("seeds.jsonl", "csv") == "csv"


def test_a_seed_s_depth_limit_bounds_the_links_below_it() -> None:
    from scrapy import Request, Spider
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from crawler.middlewares.depth import SeedDepthMiddleware

    class Deep(Spider):
        name = "deep"

    crawler = get_crawler(Deep, {"DEPTH_LIMIT": 10})
    middleware = SeedDepthMiddleware.from_crawler(crawler)

    def child(depth: int, meta: dict[str, object]) -> Request | None:
        response = HtmlResponse("http://a.test/", request=Request(
            "http://a.test/", meta={"depth": depth, **meta}))
        return middleware.get_processed_request(Request("http://a.test/x"), response)

    kept = child(1, {"depth_limit": 2})
    assert kept is not None and kept.meta == {"depth": 2, "depth_limit": 2}
    assert child(2, {"depth_limit": 2}) is None  # depth 3 is past the seed's limit
    assert child(5, {}) is not None  # without one, DEPTH_LIMIT alone
    assert child(10, {}) is None
    assert crawler.stats.get_value("depth/request_ignored_count") == 2  # type: ignore[union-attr]


def test_a_json_seed_naming_a_callback_is_published_when_the_rule_allows_it() -> None:
    """scrapy seed has no spider: the callback's name is checked by the rule, resolved by the
    worker that takes the seed (before, building the request raised "callback must be a
    callable, got str" whatever SEED_REQUEST_FIELDS allowed)."""
    from scrapy import Spider

    from crawler.frontier.seedrule import SeedRule

    class Shop(Spider):
        name = "shop"

        def parse_item(self, response: object) -> None: ...

    rule = SeedRule(request_fields=frozenset({"callback"}))
    text = '{"url": "https://a.test/x", "callback": "parse_item"}'
    seed = seedfiles.seed_of(text, rule)
    assert json.loads(seed.value)["callback"] == "parse_item"
    taken = codec.decode_seed(seed.value, Shop(), rule=rule)  # as the worker takes it
    assert taken.callback is not None and taken.callback.__name__ == "parse_item"
    with pytest.raises(codec.SeedRefused):  # the default rule still refuses it
        seedfiles.seed_of(text)
    with pytest.raises(codec.SeedRefused):
        seedfiles.seed_of('{"url": "https://a.test/x", "callback": "_private"}', rule)
