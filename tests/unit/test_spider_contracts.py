"""The contracts of the bundled ``site`` spider and of the ``fleet`` template, run in-process
on a demo page as ``scrapy check`` runs them; they pass, and a broken callback fails them."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import unittest
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.contracts import ContractsManager
from scrapy.http import HtmlResponse, Response
from scrapy.settings import Settings
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object

from crawler.commands import check, genspider
from crawler.localstack.demo_site import render_page
from crawler.spiders.site import SiteSpider

URL = "http://127.0.0.1:8000/"
PAGE = render_page(0, 40).encode()


def manager() -> ContractsManager:
    settings = Settings()
    check.add_contract(settings)
    paths = build_component_list(settings.get_component_priority_dict_with_base(
        "SPIDER_CONTRACTS"))
    return ContractsManager(load_object(path) for path in paths)


def run_contracts(callback: Callable[..., Any], body: bytes = PAGE) -> unittest.TestResult:
    """What ``scrapy check`` reports for *callback*, its ``@url`` page answering *body*."""
    result = unittest.TestResult()
    request = manager().from_method(callback, result)
    assert request is not None and result.errors == [], result.errors
    assert request.callback is not None
    request.callback(HtmlResponse(request.url, body=body, encoding="utf-8", request=request))
    return result


def problems(result: unittest.TestResult) -> str:
    return "\n".join(text for _, text in result.failures + result.errors)


def broken_site(change: Callable[[list[Any]], Iterator[Any]]) -> SiteSpider:
    """A ``site`` spider whose ``parse``, with the same contracts, returns *change* of it."""

    class Broken(SiteSpider):
        def parse(self, response: Any, **kwargs: Any) -> Iterator[Any]:
            return change(list(super().parse(response, **kwargs)))

        parse.__doc__ = SiteSpider.parse.__doc__

    return Broken(start_urls=URL)


def test_the_site_spiders_contracts_pass_on_a_page_with_links() -> None:
    result = run_contracts(SiteSpider(start_urls=URL).parse)
    assert result.wasSuccessful(), problems(result)
    assert result.testsRun == 3  # @returns twice and @scrapes, after the callback ran


@pytest.mark.parametrize(("change", "expected"), [
    (lambda out: (x for x in out if not isinstance(x, Request)),
     "Returned 0 requests, expected 1..inf"),
    (lambda out: (x for x in out if isinstance(x, Request)), "Returned 0 items, expected 1"),
    (lambda out: ({k: v for k, v in x.items() if k != "title"} if isinstance(x, dict) else x
                  for x in out), "Missing fields: title"),
    (lambda out: iter([*out, *out]), "Returned 2 items, expected 1"),
    (lambda out: iter([1 / 0]), "ZeroDivisionError"),
], ids=["no-links", "no-item", "no-title", "two-items", "raises"])
def test_a_broken_site_callback_fails_its_contracts(
        change: Callable[[list[Any]], Iterator[Any]], expected: str) -> None:
    result = run_contracts(broken_site(change).parse)
    assert not result.wasSuccessful()
    assert expected in problems(result), problems(result)


def test_start_url_fetches_the_spiders_first_start_url() -> None:
    spider = SiteSpider(start_urls=f"{URL}p/3.html,{URL}p/4.html")
    request = manager().from_method(spider.parse, unittest.TestResult())
    assert request is not None and request.url == f"{URL}p/3.html"


def test_start_url_without_a_start_url_is_an_error_naming_the_argument() -> None:
    class NoStart(Spider):
        name = "nostart"

        def parse(self, response: Any, **kwargs: Any) -> Any:
            """@start_url"""

    result = unittest.TestResult()
    assert manager().from_spider(NoStart(), result) == []
    assert "-a start_urls=URL" in problems(result), problems(result)


def _generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The module ``scrapy genspider -t fleet pages URL`` writes, imported."""
    monkeypatch.chdir(tmp_path)
    command = genspider.Command()
    command.settings = Settings({"BOT_NAME": "tutorial"})  # no NEWSPIDER_MODULE: into cwd
    parser = argparse.ArgumentParser()
    command.add_options(parser)
    command.run(["pages", URL], parser.parse_args(["-t", "fleet"]))
    spec = importlib.util.spec_from_file_location("generated_pages", tmp_path / "pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_template_spiders_contracts_pass_and_fail_when_parse_breaks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spider = _generated(tmp_path, monkeypatch).PagesSpider()
    result = run_contracts(spider.parse)
    assert result.wasSuccessful() and result.testsRun == 3, problems(result)
    result = run_contracts(spider.parse, body=b"<html><title>No links</title></html>")
    assert "Returned 0 requests, expected 1..inf" in problems(result), problems(result)


def test_the_template_spider_follows_the_conventions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from itemadapter import ItemAdapter

    module = _generated(tmp_path, monkeypatch)
    spider = module.PagesSpider()
    assert (spider.name, spider.start_urls, spider.allowed_domains) == (
        "pages", [URL], ["127.0.0.1"])  # the host alone: the offsite filter ignores ports
    assert ItemAdapter.is_item_class(spider.item_class)
    request = Request(URL)
    output = list(spider.parse(HtmlResponse(URL, body=PAGE, encoding="utf-8",
                                            request=request)))
    items = [x for x in output if not isinstance(x, Request)]
    assert items == [module.Page(url=URL, title="Page 0")]
    follow = [x for x in output if isinstance(x, Request)]
    assert follow and all(r.callback == spider.parse and r.meta == {} for r in follow)
    assert all(r.to_dict(spider=spider)["callback"] == "parse" for r in follow)
    assert list(spider.parse(Response(URL, body=b"%PDF-1.7", request=request))) == []
