"""The per-host circuit breaker (pure logic), the latency gap and the politeness unit."""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.settings import Settings
from twisted.internet.error import ConnectionRefusedError

from crawler.config.readers import SettingError, register_defaults
from crawler.ledger import outcomes
from crawler.politeness.breaker import BreakerConfig, Breakers
from crawler.politeness.latency import LatencyDelays
from crawler.politeness.unit import by_domain, by_host, politeness_unit, request_unit

CFG = BreakerConfig(failures=3, pause=10.0, pause_max=25.0, give_up=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_host_opens_after_its_failures_in_a_row_then_one_request_probes_it() -> None:
    clock = Clock()
    breakers = Breakers(CFG, clock)
    assert not breakers.failed("a") and not breakers.failed("a")
    assert breakers.answered("a") is False  # two failures, then an answer: never opened
    assert [breakers.failed("a") for _ in range(3)] == [False, False, True]
    assert breakers.wait("a") == 10.0 and breakers.wait("b") == 0.0
    clock.now += 10.0
    assert breakers.wait("a") == 0.0  # the probe goes
    assert breakers.wait("a") == 10.0  # the others wait while it is out
    assert breakers.failed("a")  # the probe failed: open again, for twice the pause
    assert breakers.wait("a") == 20.0
    clock.now += 20.0
    assert breakers.wait("a") == 0.0
    assert breakers.failed("a") and breakers.wait("a") == 25.0  # capped
    clock.now += 25.0
    assert breakers.wait("a") == 0.0
    assert breakers.answered("a") is True  # the probe got an answer: closed
    assert breakers.wait("a") == 0.0 and not breakers.is_open("a")


def test_late_failures_of_requests_sent_before_it_opened_do_not_lengthen_the_pause() -> None:
    clock = Clock()
    breakers = Breakers(CFG, clock)
    for _ in range(3):
        breakers.failed("a")
    assert breakers.failed("a") is False and breakers.wait("a") == 10.0


def test_a_probe_never_answered_is_replaced_after_one_pause() -> None:
    clock = Clock()
    breakers = Breakers(CFG, clock)
    for _ in range(3):
        breakers.failed("a")
    clock.now += 10.0
    assert breakers.wait("a") == 0.0
    clock.now += 9.0
    assert breakers.wait("a") == pytest.approx(1.0)
    clock.now += 1.0
    assert breakers.wait("a") == 0.0  # a second probe


def test_a_host_open_for_the_give_up_time_is_gone_and_its_drops_are_counted() -> None:
    clock = Clock()
    breakers = Breakers(CFG, clock)
    for _ in range(3):
        breakers.failed("a")
    clock.now += 99.0
    assert not breakers.gone("a")
    clock.now += 1.0
    assert breakers.gone("a") and not breakers.gone("b")
    assert not Breakers(BreakerConfig(3, 10.0, 25.0, give_up=0.0)).gone("a")  # 0: never

    from crawler.middlewares.breaker import HostDown
    assert outcomes.of_exception(HostDown("a")) == "dropped/host_down"


def test_no_breaker_with_zero_failures() -> None:
    breakers = Breakers(BreakerConfig(0, 10.0, 10.0, 0.0))
    assert not any(breakers.failed("a") for _ in range(10)) and breakers.wait("a") == 0.0


def test_the_middleware_hears_network_errors_and_delays_an_open_hosts_requests() -> None:
    from scrapy.utils.test import get_crawler

    from crawler.frontier.delay import not_before
    from crawler.middlewares.breaker import HostBreakerMiddleware

    crawler = get_crawler(settings_dict={"HOSTBREAKER_FAILURES": 2,
                                         "SCHEDULER": "crawler.frontier.KafkaScheduler"})
    middleware = HostBreakerMiddleware.from_crawler(crawler)
    request = Request("http://down.test/p")
    for _ in range(2):
        assert middleware.process_exception(request, ConnectionRefusedError()) is None
    assert middleware.process_exception(request, ValueError("not a network error")) is None
    back = _run(middleware.process_request(Request("http://down.test/q")))
    assert back is not None and (not_before(back) or 0) > 0
    assert _run(middleware.process_request(Request("http://up.test/q"))) is None
    robots = Request("http://down.test/robots.txt", meta={"robotstxt_fetch": True})
    assert _run(middleware.process_request(robots)) is None  # robots.txt has its own rule
    assert crawler.stats.get_value("breaker/opened") == 1
    assert crawler.stats.get_value("breaker/delayed") == 1


def _run(coroutine: object) -> object:
    import asyncio

    return asyncio.new_event_loop().run_until_complete(coroutine)  # type: ignore[arg-type]


def test_the_latency_gap_follows_the_average_latency_up_to_its_cap() -> None:
    delays = LatencyDelays(factor=2.0, cap=3.0)
    assert delays.gap("a") == 0.0
    delays.observe("a", 0.5)
    assert delays.gap("a") == 1.0
    delays.observe("a", 1.5)  # 0.5 + 0.3 * (1.5 - 0.5) = 0.8
    assert delays.gap("a") == pytest.approx(1.6)
    delays.observe("a", 100.0)
    assert delays.gap("a") == 3.0
    delays.observe("b", "not a number")
    assert delays.gap("b") == 0.0
    off = LatencyDelays(factor=0.0, cap=3.0)
    off.observe("a", 1.0)
    assert off.gap("a") == 0.0


def _settings(**values: object) -> Settings:
    settings = Settings(values)
    register_defaults(settings)
    return settings


def test_the_politeness_unit_is_the_host_by_default_or_the_domain_or_the_address() -> None:
    assert politeness_unit(_settings()) is by_host
    domain = politeness_unit(_settings(POLITENESS_UNIT="domain"))
    assert domain("a.example.co.uk") == domain("b.example.co.uk") == "example.co.uk"
    assert by_domain("127.0.0.5") == "127.0.0.5"
    ip = politeness_unit(_settings(POLITENESS_UNIT="IP"))
    assert ip("10.1.2.3") == "10.1.2.3" and ip("[::1]") == "::1"
    key = request_unit(domain)
    assert key(Request("http://WWW.Example.com/x")) == "example.com"
    assert key(Request("http://a.example.com/", meta={"download_slot": "pool"})) == "pool"
    with pytest.raises(SettingError, match="POLITENESS_UNIT"):
        politeness_unit(_settings(POLITENESS_UNIT="tld"))
