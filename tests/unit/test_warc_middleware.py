"""WarcMiddleware without a crawl: off by default, bad settings named at start-up, a page's
records as sent and as received (credentials masked, headers made true of the stored body),
robots.txt and given-up responses left out, a recrawl of an unchanged page as a revisit,
and a rendered page's bare response stored whole."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from crawler.archive import verify_file
from crawler.config.readers import SettingError
from crawler.connections.retry import RetryStopped
from crawler.frontier.delay import NOT_BEFORE_KEY
from crawler.ledger import outcomes
from crawler.middlewares import warc
from crawler.middlewares.robots import ROBOTS_FETCH
from crawler.middlewares.warc import WarcMiddleware


class Site(Spider):
    name = "site"

    def parse(self, response: Response) -> Any:
        return None


def middleware(tmp_path: Path, **settings: Any) -> WarcMiddleware:
    crawler = get_crawler(Site, {"WARC_ENABLED": True, "WARC_DIR": str(tmp_path / "warc"),
                                 "WARC_FLUSH_INTERVAL": 0.0, **settings})
    return build_from_crawler(WarcMiddleware, crawler)


def run(mw: WarcMiddleware, body: Callable[[], Awaitable[None]]) -> None:
    async def scenario() -> None:
        await mw.spider_opened()
        try:
            await body()
        finally:
            await mw.spider_closed()

    asyncio.run(scenario())


def records(tmp_path: Path) -> list[tuple[str, dict[str, str], list[tuple[str, str]], bytes]]:
    found = []
    for path in sorted((tmp_path / "warc").glob("*.warc.gz")):
        assert not verify_file(path)[1]
        with open(path, "rb") as fh:
            for r in ArchiveIterator(fh):
                if r.rec_type != "warcinfo":
                    found.append((r.rec_type, dict(r.rec_headers.headers),
                                  r.http_headers.headers, r.content_stream().read()))
    return found


def page(url: str = "http://site.example/a?b=1", body: bytes = b"<p>hi</p>",
         **headers: Any) -> tuple[Request, Response]:
    request = Request(url, headers={"Authorization": "Basic c2VjcmV0",
                                    "Proxy-Authorization": "Basic cHJveHk=",
                                    "Accept-Encoding": "gzip"})
    response = HtmlResponse(url, status=200, body=body, request=request, headers=headers,
                            protocol="HTTP/1.1", ip_address=None)
    return request, response


def test_off_by_default(tmp_path: Path) -> None:
    with pytest.raises(NotConfigured):
        build_from_crawler(WarcMiddleware, get_crawler(Site, {}))


@pytest.mark.parametrize(("name", "value"), [
    ("WARC_MAX_SIZE", 0), ("WARC_MAX_SIZE", "big"), ("WARC_PREFIX", "a/b"), ("WARC_DIR", 5),
    ("WARC_FLUSH_INTERVAL", -1), ("WARC_ENABLED", "maybe"),
])
def test_bad_settings_are_named_at_start_up(tmp_path: Path, name: str, value: Any) -> None:
    with pytest.raises(SettingError, match=name):
        middleware(tmp_path, **{name: value})


def test_a_warc_dir_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SettingError, match="WARC_DIR"):
        middleware(tmp_path, WARC_DIR=str(tmp_path / "file"))


def test_a_page_is_stored_as_sent_and_as_received(tmp_path: Path) -> None:
    mw = middleware(tmp_path)
    request, response = page(**{"Content-Length": "12", "Transfer-Encoding": "chunked",
                                "Content-Type": "text/html"})

    async def body() -> None:
        assert await mw.process_response(request, response) is response

    run(mw, body)
    (kind, warc, http, payload), (req, sent_warc, sent, _) = records(tmp_path)
    assert (kind, req, payload) == ("response", "request", b"<p>hi</p>")
    assert warc["WARC-Target-URI"] == "http://site.example/a?b=1"
    assert ("Content-Length", "9") in http and ("X-Archive-Orig-Content-Length", "12") in http
    assert ("X-Archive-Orig-Transfer-Encoding", "chunked") in http
    assert not any(name.lower() == "transfer-encoding" for name, _ in http)
    assert sent[0] == ("Host", "site.example") and ("Authorization", "***") in sent
    assert not any(name == "Proxy-Authorization" for name, _ in sent)
    assert sent_warc["WARC-Concurrent-To"] == warc["WARC-Record-ID"]
    stats = mw.stats.get_stats()
    assert (stats["warc/records"], stats["warc/responses"], stats["warc/files"]) == (2, 1, 1)
    assert stats["warc/bytes"] == sum(p.stat().st_size for p in (tmp_path / "warc").iterdir())
    assert stats["warc/fsyncs"] >= 1


def test_robots_txt_and_given_up_responses_are_not_stored(tmp_path: Path) -> None:
    mw = middleware(tmp_path)
    robots = Request("http://site.example/robots.txt", meta={ROBOTS_FETCH: True})
    engine = Request("http://site.example/x", callback=NO_CALLBACK)
    given_up, _ = page("http://site.example/503")
    mw.crawler.signals.send_catch_log(outcomes.OUTCOME, request=given_up,
                                      outcome=outcomes.RETRIES_EXHAUSTED)
    kept, response = page()

    async def body() -> None:
        for request in (robots, engine, given_up):
            answer = Response(request.url, status=503, request=request)
            assert await mw.process_response(request, answer) is answer
        await mw.process_response(kept, response)

    run(mw, body)
    assert [(kind, warc["WARC-Target-URI"]) for kind, warc, _, _ in records(tmp_path)] == [
        ("response", kept.url), ("request", kept.url)]


def test_an_unchanged_recrawl_is_a_revisit_and_a_changed_one_a_response(tmp_path: Path) -> None:
    mw = middleware(tmp_path)

    async def body() -> None:
        for content in (b"one", b"one", b"two", b"two"):
            await mw.process_response(*page(body=content))

    run(mw, body)
    found = [(kind, warc) for kind, warc, _, _ in records(tmp_path) if kind != "request"]
    assert [kind for kind, _ in found] == ["response", "revisit", "response", "revisit"]
    assert found[1][1]["WARC-Refers-To-Date"] == found[0][1]["WARC-Date"]
    assert found[3][1]["WARC-Refers-To-Date"] == found[2][1]["WARC-Date"]
    stats = mw.stats.get_stats()
    assert (stats["warc/responses"], stats["warc/revisits"], stats["warc/records"]) == (2, 2, 8)


def test_a_rendered_pages_bare_response_is_stored(tmp_path: Path) -> None:
    """scrapy-playwright may hand back no headers at all, no protocol and no address."""
    mw = middleware(tmp_path)
    request = Request("http://site.example/js", meta={"playwright": True})
    response = HtmlResponse(request.url, body=b"<html>rendered</html>", request=request)

    async def body() -> None:
        assert await mw.process_response(request, response) is response

    run(mw, body)
    (kind, warc, http, payload), _ = records(tmp_path)
    assert (kind, payload, http) == ("response", b"<html>rendered</html>",
                                     [("Content-Length", "21")])
    assert "WARC-IP-Address" not in warc


def test_a_warc_dir_that_fails_at_start_stops_the_crawl_and_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: Any) -> Any:
        raise OSError(5, "Input/output error")

    closed: list[str] = []
    monkeypatch.setattr(warc, "prepare_directory", broken)
    monkeypatch.setattr(warc._scrapy, "close_spider", lambda _crawler, reason: closed.append(
        reason))
    mw = middleware(tmp_path)

    async def body() -> None:
        with pytest.raises(RetryStopped):  # single node
            await mw.process_response(*page())
        mw.delays = True  # the frontier: back to its buffer, unacknowledged
        again = await mw.process_response(*page())
        assert isinstance(again, Request) and again.meta.get(NOT_BEFORE_KEY)

    run(mw, body)
    assert closed == ["warc_unavailable"] and "WARC_DIR" in caplog.text
