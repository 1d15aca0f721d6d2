"""Sitemaps: robots.txt's ``Sitemap:`` lines, indexes, gzip sitemaps, the size and count
bounds and the lastmod filter (crawler.middlewares.sitemaps)."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.http import Response, XmlResponse
from scrapy.utils.test import get_crawler

from crawler.config.readers import SettingError
from crawler.middlewares.sitemaps import SITEMAP_META, SitemapMiddleware, sitemap_requests

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


class _Spider(Spider):
    name = "maps"


def _middleware(**settings: Any) -> SitemapMiddleware:
    return SitemapMiddleware.from_crawler(get_crawler(_Spider, settings))


def _urlset(*entries: tuple[str, str]) -> bytes:
    urls = "".join(f"<url><loc>{loc}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>"
                   for loc, mod in entries)
    return f'<?xml version="1.0"?><urlset {NS}>{urls}</urlset>'.encode()


def _response(body: bytes, url: str = "http://a.test/sitemap.xml") -> Response:
    return XmlResponse(url, body=body, request=Request(url, meta={SITEMAP_META: True}))


def test_the_sitemap_lines_of_robots_txt_become_marked_requests() -> None:
    body = ("User-agent: *\nDisallow: /x\nSitemap: /a.xml\nsitemap: http://b.test/b.xml.gz\n"
            "Sitemap: /a.xml\nSitemap: ftp://c.test/c.xml\n")
    requests = sitemap_requests(body, "http://a.test:80")
    assert [r.url for r in requests] == ["http://a.test/a.xml", "http://b.test/b.xml.gz"]
    assert all(r.meta[SITEMAP_META] for r in requests)


def test_an_index_gives_its_sitemaps_and_a_gzip_urlset_its_pages() -> None:
    index = (f'<?xml version="1.0"?><sitemapindex {NS}><sitemap><loc>http://a.test/1.xml.gz'
             f'</loc></sitemap></sitemapindex>').encode()
    children = list(_middleware().read(_response(index)))
    assert [(r.url, r.meta.get(SITEMAP_META)) for r in children] == [
        ("http://a.test/1.xml.gz", True)]
    packed = gzip.compress(_urlset(("http://a.test/p/1", ""), ("http://a.test/p/2", "")))
    pages = list(_middleware().read(_response(packed, "http://a.test/1.xml.gz")))
    assert [(r.url, SITEMAP_META in r.meta) for r in pages] == [
        ("http://a.test/p/1", False), ("http://a.test/p/2", False)]


def test_the_spiders_output_for_a_sitemap_is_replaced_and_any_other_passes() -> None:
    mw = _middleware()
    sitemap = _response(_urlset(("http://a.test/p/1", "")))
    assert [r.url for r in mw.process_spider_output(sitemap, [{"item": 1}])] == [
        "http://a.test/p/1"]
    page = Response("http://a.test/", request=Request("http://a.test/"))
    assert list(mw.process_spider_output(page, [{"item": 1}])) == [{"item": 1}]


def test_older_pages_are_skipped_with_lastmod_after() -> None:
    body = _urlset(("http://a.test/old", "2020-05-01"), ("http://a.test/new", "2026-02-01"),
                   ("http://a.test/undated", ""))
    mw = _middleware(SITEMAP_LASTMOD_AFTER="2026-01-01")
    assert [r.url for r in mw.read(_response(body))] == ["http://a.test/new",
                                                         "http://a.test/undated"]
    assert mw.stats.get_value("sitemap/too_old") == 1
    assert len(list(_middleware().read(_response(body)))) == 3


def test_the_size_and_count_bounds() -> None:
    many = _urlset(*((f"http://a.test/p/{i}", "") for i in range(30)))
    assert len(list(_middleware(SITEMAP_MAX_URLS=10).read(_response(many)))) == 10
    bomb = gzip.compress(_urlset(("http://a.test/p", "")) + b" " * 200_000)
    mw = _middleware(SITEMAP_MAX_SIZE=100_000)
    assert list(mw.read(_response(bomb, "http://a.test/s.xml.gz"))) == []
    assert mw.stats.get_value("sitemap/too_big") == 1
    assert list(mw.read(_response(b"<html>not a sitemap", "http://a.test/s.xml"))) == []


def test_bad_settings_are_named() -> None:
    with pytest.raises(SettingError, match="SITEMAP_LASTMOD_AFTER"):
        _middleware(SITEMAP_LASTMOD_AFTER="last tuesday")
    with pytest.raises(SettingError, match="SITEMAP_MAX_URLS"):
        _middleware(SITEMAP_MAX_URLS=0)
