"""The generated demo site's files: sizes, determinism, links, what Scrapy extracts from them
(served over HTTP: tests/integration/test_demo_site.py)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urldefrag

from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from support.demo_site import PAGES

from crawler.localstack.demo_site import generate, page_path, site_urls


def test_files(site_dir: Path) -> None:
    for n in range(PAGES):
        html = (site_dir / page_path(n)).read_text()
        assert 5 * 1024 <= len(html.encode()) <= 8 * 1024, n
        assert f"<title>Page {n}</title>" in html
    assert not (site_dir / page_path(PAGES)).exists()


def test_deterministic(site_dir: Path, tmp_path: Path) -> None:
    generate(tmp_path / "same", PAGES)
    generate(tmp_path / "other", PAGES, seed=2)
    for n in (0, 1, 57, PAGES - 1):
        html = (site_dir / page_path(n)).read_text()
        assert (tmp_path / "same" / page_path(n)).read_text() == html
        assert (tmp_path / "other" / page_path(n)).read_text() != html


def test_tree_links_alone_reach_every_page(site_dir: Path) -> None:
    reached, stack = set(), [0]
    while stack:
        n = stack.pop()
        reached.add(n)
        html = (site_dir / page_path(n)).read_text()
        children = html.split('<ul class="children">')[1].split("</ul>")[0]
        stack.extend(int(c) for c in re.findall(r"Page (\d+)", children))
    assert reached == set(range(PAGES))


def test_scrapy_link_extractor_sees_one_url_per_page(site_dir: Path) -> None:
    base = "http://127.0.0.1:8000"
    urls = site_urls(base, PAGES)
    extractor = LinkExtractor(deny_domains=["example.invalid"])
    found: set[str] = set()
    for n, url in enumerate(urls):
        body = (site_dir / page_path(n)).read_bytes()
        response = HtmlResponse(url, body=body, encoding="utf-8")
        found.update(urldefrag(link.url).url for link in extractor.extract_links(response))
    assert found == set(urls)
