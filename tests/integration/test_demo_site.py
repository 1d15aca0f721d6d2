"""The generated demo site: sizes, determinism, reachability, and what Scrapy extracts from it."""

from __future__ import annotations

import http.client
import re
import threading
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest
from support.demo_site import PAGES

from benchmarks.micro_demo_site import count_connections
from crawler.localstack.demo_site import page_path, serve, site_urls, start_server_process

HREF = re.compile(r'href="([^"]*)"')


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/html")
        body: bytes = response.read()
    return body.decode()


def _bfs(start: str) -> tuple[set[str], set[str]]:
    """Every same-host URL reached from *start* (fragments dropped), and every other link."""
    host = urlsplit(start).netloc
    seen, external = {start}, set()
    queue = deque([start])
    while queue:
        url = queue.popleft()
        for href in HREF.findall(_fetch(url)):
            link = urldefrag(urljoin(url, href)).url
            if urlsplit(link).netloc != host:
                external.add(link)
            elif link not in seen:
                seen.add(link)
                queue.append(link)
    return seen, external


def test_bfs_reaches_exactly_the_site(site_dir: Path) -> None:
    server = serve(site_dir)
    try:
        seen, external = _bfs(server.base_url + "/")
    finally:
        server.close()
    assert seen == set(site_urls(server.base_url, PAGES))
    assert external == {"http://example.invalid/x"}


def test_keep_alive_reuses_one_connection_per_client(site_dir: Path) -> None:
    """Keep-alive works: 4 clients x 150 requests are 4 connections at the server.
    (Its speed is a benchmark: ``python -m benchmarks.micro``, demo site section.)"""
    server = serve(site_dir)
    accepted = count_connections(server)
    host, port = server.server_address[:2]
    statuses: list[tuple[int, bool]] = []

    def client() -> None:
        conn = http.client.HTTPConnection(str(host), port, timeout=30)
        for i in range(150):
            conn.request("GET", "/" + page_path(i % PAGES))
            response = conn.getresponse()
            response.read()
            statuses.append((response.status, response.will_close))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        server.close()
    assert not any(thread.is_alive() for thread in threads)
    assert statuses == [(200, False)] * 600
    assert len(accepted) == 4, f"{len(accepted)} connections for 4 kept-alive clients"


def test_missing_page_and_directory_are_404(site_dir: Path) -> None:
    server = serve(site_dir)
    try:
        for path in ("/p/", f"/p/{PAGES}.html"):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(server.base_url + path, timeout=10)
            assert info.value.code == 404
    finally:
        server.close()


def test_server_process(tmp_path: Path) -> None:
    proc, base_url = start_server_process(tmp_path / "site", 30)
    try:
        assert not base_url.endswith("/")
        assert "<title>Page 0</title>" in _fetch(base_url + "/")
        assert "<title>Page 29</title>" in _fetch(site_urls(base_url, 30)[-1])
    finally:
        proc.terminate()
        proc.wait(10)


def test_demo_site_fixture(demo_site: str, demo_site_pages: int) -> None:
    seen, _ = _bfs(demo_site + "/")
    assert seen == set(site_urls(demo_site, demo_site_pages))
