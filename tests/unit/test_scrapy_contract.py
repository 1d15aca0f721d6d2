"""What ``crawler/_scrapy.py`` relies on, checked against the installed Scrapy.

Each failure names the Scrapy version and what changed, so that an upgrade that breaks the
frontier's hook says where, before a crawl does.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import scrapy
from scrapy.core import engine as scrapy_engine
from scrapy.downloadermiddlewares import httpproxy

from crawler import _scrapy
from crawler.frontier.delay import scheduler_delays
from crawler.frontier.scheduler import KafkaScheduler

VERSION = f"Scrapy {scrapy.__version__}"
Engine = scrapy_engine.ExecutionEngine
CallLaterOnce: Any = getattr(scrapy_engine, "CallLaterOnce", None)  # the slot's nextcall


def _require(ok: bool, what: str) -> None:
    if not ok:
        pytest.fail(f"{VERSION} {what} (crawler/_scrapy.py relies on it; supported: "
                    f"{_scrapy.SUPPORTED})", pytrace=False)


def _params(func: Any) -> list[str]:
    return list(inspect.signature(func).parameters)


def test_the_engine_keeps_its_slot_in_a_private_attribute() -> None:
    source = inspect.getsource(Engine)
    _require("self._slot" in source, "no longer has ExecutionEngine._slot")
    _require(hasattr(scrapy_engine, "_Slot"), "no longer has scrapy.core.engine._Slot")


def test_the_slot_lets_go_of_each_request_through_remove_request() -> None:
    slot = scrapy_engine._Slot
    _require(callable(getattr(slot, "remove_request", None)),
             "no longer has ExecutionEngine._slot.remove_request")
    _require(_params(slot.remove_request) == ["self", "request"],
             f"changed _Slot.remove_request's signature to {_params(slot.remove_request)}")
    _require("remove_request" in inspect.getsource(Engine),
             "no longer calls _slot.remove_request when the engine lets go of a request")


def test_a_failed_download_reaches_the_scraper_through_enqueue_scrape() -> None:
    from scrapy.core import scraper as scrapy_scraper

    method = getattr(scrapy_scraper.Scraper, "enqueue_scrape", None)
    _require(callable(method), "no longer has Scraper.enqueue_scrape")
    _require(_params(method) == ["self", "result", "request"],
             f"changed Scraper.enqueue_scrape's signature to {_params(method)}")
    _require("self.scraper.enqueue_scrape(" in inspect.getsource(Engine),
             "no longer hands downloads (and their failures) to scraper.enqueue_scrape")
    _require(scrapy_scraper.logger.name == _scrapy.SCRAPER_LOGGER,
             f"logs its download errors on {scrapy_scraper.logger.name!r}")


def test_a_closing_engine_shows_what_it_still_holds() -> None:
    from scrapy.core.downloader import Downloader, Slot
    from scrapy.core.scraper import Scraper
    from scrapy.core.scraper import Slot as ScraperSlot

    wanted = [(scrapy_engine._Slot, ["closing", "inprogress"]),
              (Downloader, ["active", "slots"]), (Slot, ["queue", "active", "transferring"]),
              (Scraper, ["slot"]), (ScraperSlot, ["active", "queue"])]
    for cls, names in wanted:
        source = inspect.getsource(cls.__init__)
        for name in names:
            _require(f"self.{name}" in source, f"no longer sets {cls.__name__}.{name} "
                     "(read by _scrapy.engine_work, the close watch)")


def test_the_slot_wakes_the_engine_through_nextcall_schedule() -> None:
    _require("nextcall" in _params(scrapy_engine._Slot.__init__),
             "no longer gives ExecutionEngine._slot a nextcall")
    _require(callable(getattr(CallLaterOnce, "schedule", None)),
             "no longer has CallLaterOnce.schedule (the slot's nextcall.schedule())")


@pytest.mark.parametrize("name", ["pause", "unpause", "close_spider_async"])
def test_the_engine_can_be_paused_resumed_and_closed(name: str) -> None:
    _require(callable(getattr(Engine, name, None)), f"no longer has ExecutionEngine.{name}")


def test_close_spider_async_takes_a_reason() -> None:
    _require("reason" in _params(Engine.close_spider_async),
             "no longer takes ExecutionEngine.close_spider_async(reason=...)")


@pytest.mark.parametrize("name", ["paused", "running"])
def test_the_engine_says_whether_it_is_paused_and_running(name: str) -> None:
    _require(f"self.{name}" in inspect.getsource(Engine.__init__),
             f"no longer sets ExecutionEngine.{name}")


def test_the_base_scheduler_and_the_deferred_helper_are_where_they_were() -> None:
    from scrapy.core.scheduler import BaseScheduler

    _require(_scrapy.BaseScheduler is BaseScheduler,
             "moved scrapy.core.scheduler.BaseScheduler")
    for name in ("open", "close", "has_pending_requests", "enqueue_request", "next_request"):
        _require(hasattr(BaseScheduler, name), f"no longer has BaseScheduler.{name}")
    _require(callable(_scrapy.as_deferred), "no longer has scrapy.utils.defer.deferred_from_coro")


def test_the_tunnel_error_of_the_http11_handler_is_there() -> None:
    _require(issubclass(_scrapy.TunnelError, Exception),
             "no longer has scrapy.core.downloader.handlers.http11.TunnelError")


def test_the_proxy_middleware_keeps_its_credentials_owner_in_meta() -> None:
    source = inspect.getsource(httpproxy.HttpProxyMiddleware)
    _require(f'"{_scrapy.AUTH_PROXY_META}"' in source,
             f"no longer uses request.meta[{_scrapy.AUTH_PROXY_META!r}] in HttpProxyMiddleware "
             "(crawler/frontier/codec.py keeps it out of Kafka)")


class _Slot:
    def __init__(self) -> None:
        self.removed: list[Any] = []
        self.nextcall = CallLaterOnce(lambda: None) if CallLaterOnce else None

    def remove_request(self, request: Any) -> None:
        self.removed.append(request)


class _Crawler:
    def __init__(self, slot: Any) -> None:
        self.engine = type("E", (), {"_slot": slot})()


def test_the_hook_calls_scrapys_remove_request_first_then_the_callback() -> None:
    slot, left = _Slot(), []
    hook = _scrapy.on_request_left(_Crawler(slot), lambda r: left.append((r, list(slot.removed))))
    slot.remove_request("r")
    assert left == [("r", ["r"])]
    assert isinstance(hook, _scrapy.EngineHook)


def test_the_failure_hook_sees_each_failure_before_the_scraper() -> None:
    from twisted.python.failure import Failure

    seen: list[Any] = []
    scraper = type("S", (), {"enqueue_scrape": lambda self, result, request: seen.append(
        ("scraped", request))})()
    crawler = type("C", (), {"engine": type("E", (), {"scraper": scraper})()})()
    _scrapy.on_download_failed(crawler, lambda r, e: seen.append(("failed", r, type(e))))
    crawler.engine.scraper.enqueue_scrape(Failure(KeyError("x")), "r")
    crawler.engine.scraper.enqueue_scrape("a response", "s")
    assert seen == [("failed", "r", KeyError), ("scraped", "r"), ("scraped", "s")]


def test_the_hook_refuses_an_engine_without_a_slot() -> None:
    with pytest.raises(RuntimeError, match="engine slot not found"):
        _scrapy.on_request_left(_Crawler(None), lambda r: None)  # type: ignore[arg-type]


def test_delays_are_a_capability_of_the_scheduler_class() -> None:
    from scrapy.utils.test import get_crawler

    class Mine(KafkaScheduler):
        pass

    assert KafkaScheduler.supports_delays is True
    for scheduler, honours in [("crawler.frontier.scheduler.KafkaScheduler", True),
                               (Mine, True), ("scrapy.core.scheduler.Scheduler", False)]:
        crawler = get_crawler(settings_dict={"SCHEDULER": scheduler})
        assert scheduler_delays(crawler) is honours, scheduler


def test_nothing_else_in_the_package_uses_scrapys_private_api() -> None:
    """The engine, ``scrapy.core`` and the private meta keys are reached through
    ``crawler/_scrapy.py`` only, so that this contract covers every use of them."""
    import re
    from pathlib import Path

    package = Path(_scrapy.__file__).parent
    private = re.compile(r"\bscrapy\.core\b|\.engine\b|\._slot\b|downloader\.slots|"
                         rf"[\"']{_scrapy.AUTH_PROXY_META}[\"']")
    found = [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
             for path in sorted(package.rglob("*.py")) if path.name != "_scrapy.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if private.search(line)]
    assert not found, "private Scrapy API outside crawler/_scrapy.py:\n" + "\n".join(found)
