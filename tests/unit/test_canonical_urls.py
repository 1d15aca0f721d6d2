"""The canonical form of a URL and the URL traps: pure rules (docs/urls.md). The
middlewares that apply them are tests/unit/test_canonical_middlewares.py."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.frontier.canonical import DEFAULT, CanonicalRules
from crawler.frontier.traps import PATH_REPEATS, URL_LENGTH, TrapRules


class _Spider(Spider):
    name = "canonical"


def _rules(**settings: Any) -> CanonicalRules:
    return CanonicalRules.from_settings(get_crawler(_Spider, settings).settings)


@pytest.mark.parametrize(("url", "canonical"), [
    ("HTTP://Example.COM:80/a/./b/../c#top", "http://example.com/a/c"),  # normal_url's part
    ("https://h.test:443", "https://h.test/"),
    ("https://h.test/p?utm_source=x&utm_medium=mail&id=3", "https://h.test/p?id=3"),
    ("https://h.test/p?UTM_Campaign=x", "https://h.test/p"),  # any case
    ("https://h.test/p?utm%5Fterm=x&b=2", "https://h.test/p?b=2"),  # percent-decoded name
    ("https://h.test/p?gclid=1&fbclid=2&q=a+b", "https://h.test/p?q=a+b"),
    ("https://h.test/p?sid=1&PHPSESSID=2&sessionid=3&jsessionid=4", "https://h.test/p"),
    ("https://h.test/cart;jsessionid=A1B2?x=1", "https://h.test/cart?x=1"),
    ("https://h.test/a;v=1;JSESSIONID=Z/b", "https://h.test/a;v=1/b"),  # other params stay
    ("https://h.test/p?b=2&a=1&&utm_id=", "https://h.test/p?b=2&a=1"),  # order kept
    ("https://h.test/p?side=1&sidebar=2", "https://h.test/p?side=1&sidebar=2"),  # whole names
    ("https://h.test/p?q=%C3%A9&utm_source=x", "https://h.test/p?q=%C3%A9"),  # as written
])
def test_the_default_rules(url: str, canonical: str) -> None:
    assert DEFAULT.url(url) == canonical
    assert DEFAULT.url(canonical) == canonical  # idempotent


@pytest.mark.parametrize("url", ["mailto:a@b.test", "data:text/html,<p>x</p>",
                                 "https://h.test:99999/x", "relative/path?utm_source=x"])
def test_what_is_no_absolute_http_url_is_left_alone(url: str) -> None:
    assert DEFAULT.url(url) == url


def test_the_settings_choose_the_parameters_and_the_query_order() -> None:
    assert _rules().url("https://h.test/p?b=2&a=1&utm_x=1") == "https://h.test/p?b=2&a=1"
    sorted_rules = _rules(CANONICAL_SORT_QUERY=True)
    assert sorted_rules.url("https://h.test/p?b=2&a=1&a=0") == "https://h.test/p?a=0&a=1&b=2"
    keep = _rules(CANONICAL_DROP_PARAMS=[])
    assert keep.url("https://H.test/p?sid=1#f") == "https://h.test/p?sid=1"
    custom = _rules(CANONICAL_DROP_PARAMS="ref,trk_*")
    assert custom.url("https://h.test/p?ref=a&trk_1=b&sid=c") == "https://h.test/p?sid=c"


@pytest.mark.parametrize("value", [["utm_*", ""], ["a=b"], [3], "x&y"])
def test_a_malformed_parameter_list_names_the_setting(value: Any) -> None:
    with pytest.raises(SettingError, match=r"^Setting CANONICAL_DROP_PARAMS: "):
        _rules(CANONICAL_DROP_PARAMS=value)


def test_a_malformed_sort_switch_names_the_setting() -> None:
    with pytest.raises(SettingError, match=r"^Setting CANONICAL_SORT_QUERY: "):
        _rules(CANONICAL_SORT_QUERY="maybe")


@pytest.mark.parametrize(("url", "reason"), [
    ("http://h.test/a/b/a/b/a/b", None),  # each segment 3 times: the bound
    ("http://h.test/a/b/a/b/a/b/a/", PATH_REPEATS),
    ("http://h.test/x/x/x/", None),
    ("http://h.test/x/x/x/x", PATH_REPEATS),
    ("http://h.test/x/y/x/z/x/w/x", PATH_REPEATS),  # not next to each other
    ("http://h.test/x////////x//x", None),  # empty segments do not count
    ("http://h.test/p?a=/x/x/x/x/x", None),  # the query is no path
    ("http://h.test/" + "y" * 100, URL_LENGTH),
])
def test_the_traps(url: str, reason: str | None) -> None:
    assert TrapRules(3, max_length=60).reason(url) == reason


def test_a_bound_of_zero_is_no_bound() -> None:
    assert TrapRules(0, max_length=0).reason("http://h.test/" + "x/" * 5000) is None
    assert TrapRules(1).reason("http://h.test/x/x") == PATH_REPEATS
    assert TrapRules().max_segment_repeats == 3  # the documented default
