"""crawler.migrate: scrapy-redis's fingerprint, the import's checks and its pure logic (the
import against a real Redis and broker: tests/integration/test_from_scrapy_redis.py)."""

from __future__ import annotations

import asyncio
import gzip
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from scrapy import Request
from scrapy.http import FormRequest, JsonRequest
from scrapy.settings import Settings
from scrapy.utils.request import fingerprint as scrapy_fingerprint
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter

from crawler.config.readers import SettingError
from crawler.migrate import ScrapyRedisFingerprinter, scrapy_redis_fingerprint, seen
from crawler.migrate import scrapy_redis as tool

DOC = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "from-scrapy-redis.md"
REQUESTS = [
    Request("https://shop.example/p/1.html"),
    Request("HTTP://Shop.Example:80/a/../p/1.html?b=2&a=1#frag"),
    Request("https://shop.example/caf\u00e9?q=\u00fc"),
    Request("https://shop.example/x", method="HEAD"),
    FormRequest("https://shop.example/search", formdata={"q": "lamp"}),
    JsonRequest("https://shop.example/api", data={"page": 2}),
    Request("https://shop.example/p/1.html", headers={"X-A": "1"}, cookies={"s": "1"}),
]
GOOD = {"REQUEST_FINGERPRINTER_CLASS": "crawler.migrate.ScrapyRedisFingerprinter",
        "REDIS_URL": "redis://127.0.0.1:1/0"}


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.method} {r.url}")
def test_the_fingerprint_is_the_one_scrapy_redis_stores(request_: Request) -> None:
    stored = RFPDupeFilter(server=None, key="shop:dupefilter").request_fingerprint(request_)
    assert scrapy_redis_fingerprint(request_).hex() == stored
    assert scrapy_fingerprint(request_).hex() != stored  # Scrapy's hashes "headers" too


def test_the_pages_fingerprint_table_is_right() -> None:
    table = dict(re.findall(r"^\| (.+?) \| `([0-9a-f]{40})` \|$", DOC.read_text(), re.M))
    request = Request("https://shop.example/p/1.html")
    assert list(table.values()) == [scrapy_redis_fingerprint(request).hex(),
                                    scrapy_fingerprint(request).hex(),
                                    scrapy_redis_fingerprint(request).hex()]


def test_the_setting_gives_the_crawler_this_fingerprinter() -> None:
    crawler = get_crawler(settings_dict={"REQUEST_FINGERPRINTER_CLASS":
                                         "crawler.migrate.ScrapyRedisFingerprinter"})
    assert isinstance(crawler.request_fingerprinter, ScrapyRedisFingerprinter)
    request = Request("https://shop.example/p/2.html")
    assert crawler.request_fingerprinter.fingerprint(request) == \
        scrapy_redis_fingerprint(request) == scrapy_redis_fingerprint(request.replace())


def test_the_settings_that_make_an_import_useful_pass() -> None:
    tool.check_settings(Settings(GOOD))  # no service is asked


@pytest.mark.parametrize(("values", "setting"), [
    ({"REQUEST_FINGERPRINTER_CLASS": "scrapy.utils.request.RequestFingerprinter"},
     "REQUEST_FINGERPRINTER_CLASS"),
    ({"RECRAWL_AFTER": 3600}, "RECRAWL_AFTER"),
    ({"FRONTIER_DEDUP_CLASS": "crawler.migrate.ScrapyRedisFingerprinter"},
     "FRONTIER_DEDUP_CLASS"),
    ({"REDIS_URL": ""}, "REDIS_URL"),
])
def test_settings_that_would_waste_the_import_are_refused(
        values: dict[str, object], setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with pytest.raises(SettingError, match=f"^Setting {setting}: "):
        tool.check_settings(Settings({**GOOD, **values}))


def test_minus_s_takes_name_equals_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "crawler.settings")
    settings = tool.project_settings(["BLOOM_CAPACITY=5", "X=a=b"], crawl_id="moved")
    assert (settings["BLOOM_CAPACITY"], settings["X"], settings["CRAWL_ID"]) == ("5", "a=b",
                                                                                 "moved")
    with pytest.raises(SettingError, match="-s takes NAME=VALUE"):
        tool.project_settings(["BLOOM_CAPACITY"])


def test_the_pending_file_is_required() -> None:
    with pytest.raises(SystemExit):
        tool.parser().parse_args(["shop"])
    args = tool.parser().parse_args(["shop", "--pending", "a.jsonl", "--pending", "b.csv"])
    assert (args.pending, args.verify, args.key) == (["a.jsonl", "b.csv"], True, None)


def test_pending_fingerprints_are_those_of_the_seeds_the_workers_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = tmp_path / "pending.jsonl"
    lines.write_text('{"url": "https://shop.example/p/1.html", "priority": 2}\n'
                     "HTTPS://Shop.Example:443/p/2.html#top\n"
                     '{"url": "https://shop.example/p/3.html", "callback": "parse_item"}\n'
                     "not a url\n# a comment\n")
    table = tmp_path / "more.csv.gz"
    table.write_bytes(gzip.compress(b"url,priority\nhttps://shop.example/p/4.html,1\n"))

    found = tool.pending_fingerprints([str(lines), str(table)])

    urls = [f"https://shop.example/p/{n}.html" for n in range(1, 5)]
    assert found == {scrapy_redis_fingerprint(Request(u)) for u in urls}
    assert capsys.readouterr().err == f"{lines}:4: skipped: invalid URL 'not a url': " \
                                      "expected an absolute http(s) URL\n"


@pytest.mark.parametrize(("member", "expected"), [
    (b"89f9ce19108397c99c66c399dd59fb987ea6898b",
     bytes.fromhex("89f9ce19108397c99c66c399dd59fb987ea6898b")),
    ("89F9CE19108397C99C66C399DD59FB987EA6898B",
     bytes.fromhex("89f9ce19108397c99c66c399dd59fb987ea6898b")),
    (b"89f9ce19", None), (b"zz" * 20, None), (b"\xff" * 40, None), ("", None),
])
def test_a_member_is_a_fingerprint_only_if_it_is_40_hex_digits(
        member: bytes | str, expected: bytes | None) -> None:
    assert seen.unhex(member) == expected


class FakeSet:
    """What :func:`seen.import_set` asks of Redis: ``SSCAN`` (a member may come twice)."""

    def __init__(self, members: list[bytes]) -> None:
        self.members = members

    async def sscan_iter(self, key: str, count: int) -> AsyncIterator[bytes]:
        for member in self.members:
            yield member


class FakeBloom:
    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.known: set[bytes] = set()

    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]:
        self.batches.append(list(fingerprints))
        new = [fp not in self.known for fp in fingerprints]
        self.known.update(fingerprints)
        return new


def test_the_import_adds_in_batches_and_leaves_out_the_pending(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seen, "BATCH", 3)
    fps = [bytes([n]) * 20 for n in range(7)]
    members = [fp.hex().encode() for fp in fps] + [fps[0].hex().encode(), b"not-one"]
    bloom, reports = FakeBloom(), []

    result = asyncio.run(seen.import_set(FakeSet(members), "shop:dupefilter", bloom,
                                         {fps[5]}, seen.Imported(members=8),
                                         progress=lambda r: reports.append(r.added)))

    assert [len(b) for b in bloom.batches] == [3, 3, 1]
    assert bloom.known == set(fps) - {fps[5]}
    assert (result.scanned, result.added, result.present, result.invalid) == (9, 6, 1, 1)
    assert reports == [3, 6]
