"""What a seed from outside the crawl may set (``crawler.frontier.seedrule``), as the codec,
the settings and ``scrapy seed``'s reader apply it."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings

from crawler.config.readers import SettingError
from crawler.frontier import codec, seedfiles
from crawler.frontier.codec import CodecError, SeedRefused, decode_seed, decode_trusted_seed
from crawler.frontier.config import FrontierConfig
from crawler.frontier.seedrule import DEFAULT, REQUEST_FIELDS, SeedRule


class RuleSpider(Spider):
    name = "rule"

    def parse(self, response: Any) -> None:
        return None

    def parse_item(self, response: Any) -> None:
        return None


def _seed(**fields: Any) -> bytes:
    return json.dumps({"url": "http://a.test/", **fields}).encode()


def _refusal(**fields: Any) -> str:
    with pytest.raises(SeedRefused) as caught:
        decode_seed(_seed(**fields), RuleSpider())
    return str(caught.value)


def test_url_priority_and_the_documented_meta_keys_are_allowed() -> None:
    request = decode_seed(_seed(priority=3, meta={"depth_limit": 2, "recrawl_after": 60}))
    assert (request.url, request.priority) == ("http://a.test/", 3)
    assert request.meta == {"depth_limit": 2, "recrawl_after": 60}
    assert decode_seed(b"http://a.test/plain").url == "http://a.test/plain"


@pytest.mark.parametrize("field, value", [
    ("headers", {"Cookie": ["a=1"]}), ("body", "x=1"), ("method", "POST"),
    ("cookies", {"session": "1"}), ("callback", "parse"), ("errback", "parse"),
    ("cb_kwargs", {"a": 1}), ("dont_filter", True), ("flags", ["x"]), ("encoding", "latin-1"),
])
def test_every_other_request_field_is_refused_naming_it_and_the_setting(
        field: str, value: Any) -> None:
    reason = _refusal(**{field: value})
    assert f"'{field}'" in reason and "SEED_REQUEST_FIELDS lists none" in reason


def test_several_refused_fields_are_named_together() -> None:
    reason = _refusal(headers={"X": ["1"]}, body="b")
    assert reason.startswith("seed fields 'headers', 'body' not allowed from outside the crawl")


@pytest.mark.parametrize("key", ["proxy", "download_maxsize", "dont_obey_robotstxt", "depth",
                                 "crawler_not_before", "k"])
def test_a_meta_key_outside_seed_meta_keys_is_refused(key: str) -> None:
    reason = _refusal(meta={"depth_limit": 1, key: 1})
    assert reason == (f"seed meta key '{key}' not allowed from outside the crawl "
                      "(SEED_META_KEYS lists depth_limit, recrawl_after)")


def test_a_hostile_meta_key_is_quoted_and_cut_in_the_reason() -> None:
    reason = _refusal(meta={"a\nFAKE LOG LINE": 1, **{f"k{n}{'x' * 100}": n for n in range(12)}})
    assert "\n" not in reason and "'a\\nFAKE LOG LINE'" in reason
    assert "x" * 61 not in reason and reason.endswith("and 3 more not allowed from outside the "
                                                      "crawl (SEED_META_KEYS lists depth_limit, "
                                                      "recrawl_after)")


def test_fields_left_at_their_defaults_set_nothing() -> None:
    request = decode_seed(_seed(method="get", headers={}, body="", cookies=[], callback=None,
                                errback=None, cb_kwargs={}, dont_filter=False, flags=[],
                                encoding="utf-8"))
    assert request.method == "GET" and request.callback is None


def test_a_false_looking_value_of_another_type_is_not_a_default() -> None:
    assert "'dont_filter'" in _refusal(dont_filter=0)


def test_the_version_field_grants_nothing() -> None:
    """A full request record written by any Kafka client is still an external seed."""
    spider = RuleSpider()
    forged = codec.encode_request(
        Request("http://a.test/", callback=spider.parse_item, method="POST", body=b"x",
                headers={"X-Admin": "1"}, meta={"proxy": "http://evil.test:3128"}), spider)
    with pytest.raises(SeedRefused, match="'method', 'headers', 'body', 'callback'"):
        decode_seed(forged, spider)
    plain = codec.encode_request(Request("http://a.test/", priority=2), spider)
    assert decode_seed(plain, spider).priority == 2  # only defaults: nothing set
    with pytest.raises(CodecError, match="unknown seed fields: _class"):
        decode_seed(_seed(v=1, _class="scrapy.http.JsonRequest"), spider)


def test_allowed_fields_are_taken_and_encoded_records_keep_base64() -> None:
    rule = SeedRule(request_fields=frozenset({"method", "headers", "body", "callback"}))
    spider = RuleSpider()
    request = decode_seed(_seed(method="POST", headers={"X-Token": "t"}, body="a=1",
                                callback="parse_item"), spider, rule=rule)
    assert (request.method, request.body, request.headers[b"X-Token"]) == ("POST", b"a=1", b"t")
    assert request.callback == spider.parse_item
    encoded = _seed(v=1, body=base64.b64encode(b"raw").decode())
    assert decode_seed(encoded, rule=rule).body == b"raw"


@pytest.mark.parametrize("callback", ["_private", "__init__", 3])
def test_an_allowed_callback_must_name_a_public_method(callback: Any) -> None:
    rule = SeedRule(request_fields=frozenset({"callback"}))
    with pytest.raises(SeedRefused, match="public method of the spider"):
        decode_seed(_seed(callback=callback), RuleSpider(), rule=rule)
    with pytest.raises(CodecError, match="cannot build a request"):
        decode_seed(_seed(callback="nope"), RuleSpider(), rule=rule)


def test_a_signed_seed_is_a_full_request_record() -> None:
    spider = RuleSpider()
    start = Request("http://a.test/s", callback=spider.parse_item, cb_kwargs={"n": 1},
                    headers={"Accept": "text/html"}, meta={"tag": {"deep": [1]},
                                                           "is_start_request": True})
    request = decode_trusted_seed(codec.encode_request(start, spider), spider)
    assert request.callback == spider.parse_item and request.cb_kwargs == {"n": 1}
    assert request.meta == {"tag": {"deep": [1]}, "is_start_request": True}
    assert request.headers[b"Accept"] == b"text/html"
    from scrapy.http import JsonRequest

    subclass = decode_trusted_seed(codec.encode_request(JsonRequest("http://a.test/j",
                                                                    data={"q": 1})), spider)
    assert isinstance(subclass, JsonRequest) and subclass.method == "POST"
    assert decode_trusted_seed(b"http://a.test/bare").url == "http://a.test/bare"


def _settings(**values: Any) -> Settings:
    return Settings(values)


def test_the_rule_is_read_from_its_settings() -> None:
    assert SeedRule.from_settings(_settings()) == DEFAULT
    rule = SeedRule.from_settings(_settings(SEED_META_KEYS="depth_limit,download_timeout",
                                            SEED_REQUEST_FIELDS=["headers", "body"]))
    assert rule.meta_keys == {"depth_limit", "download_timeout"}
    assert rule.request_fields == {"headers", "body"}
    anything = SeedRule.from_settings(_settings(SEED_META_KEYS=["*"], SEED_REQUEST_FIELDS="*"))
    assert anything.meta_keys is None and anything.request_fields == set(REQUEST_FIELDS)
    assert decode_seed(_seed(meta={"proxy": "x"}, body="b"), rule=anything).body == b"b"


@pytest.mark.parametrize("name, value, says", [
    ("SEED_REQUEST_FIELDS", ["header"], "unknown request field 'header'"),
    ("SEED_REQUEST_FIELDS", ["_class"], "unknown request field '_class'"),
    ("SEED_REQUEST_FIELDS", 5, "expected a list of strings"),
    ("SEED_META_KEYS", {"depth_limit": 1}, "expected a list of strings"),
])
def test_a_bad_value_fails_at_start_up_naming_the_setting(name: str, value: Any,
                                                          says: str) -> None:
    settings = _settings(**{name: value, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                            "REDIS_URL": "redis://127.0.0.1:1"})
    with pytest.raises(SettingError, match=f"^Setting {name}: .*{says}"):
        FrontierConfig.from_settings(settings, "rule")


def test_scrapy_seed_skips_a_line_the_workers_would_dead_letter() -> None:
    text = ('{"url": "http://a.test/1", "meta": {"depth_limit": 1}}\n'
            '{"url": "http://a.test/2", "headers": {"X-Admin": ["1"]}}\n'
            '{"url": "http://a.test/3", "meta": {"proxy": "http://evil.test/"}}\n')
    entries = list(seedfiles.read(io.StringIO(text), "f", "lines"))
    assert [getattr(e, "url", None) for e in entries] == ["http://a.test/1", None, None]
    assert [getattr(e, "where", None) for e in entries] == [None, "f:2", "f:3"]
    assert "'headers' not allowed" in entries[1].reason  # type: ignore[union-attr]
    allowing = SeedRule(meta_keys=None, request_fields=frozenset({"headers"}))
    assert all(isinstance(e, seedfiles.Seed)
               for e in seedfiles.read(io.StringIO(text), "f", "lines", allowing))
