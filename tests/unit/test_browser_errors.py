"""Playwright's errors in the retry middleware's network error categories
(:mod:`crawler.browser.errors`), with Playwright's own error classes."""

from __future__ import annotations

import pytest
from helpers import module_or_missing

from crawler.browser.errors import network_category
from crawler.middlewares.retry import classify

errors = module_or_missing("playwright._impl._errors", "playwright (the browser extra)")


@pytest.mark.parametrize(("message", "category"), [
    ("Page.goto: net::ERR_CONNECTION_RESET at http://127.0.0.1:8000/", "connection_lost"),
    ("Page.goto: net::ERR_EMPTY_RESPONSE at http://127.0.0.1:8000/", "connection_lost"),
    ("Page.goto: net::ERR_CONNECTION_REFUSED at http://127.0.0.1:8000/", "connection_refused"),
    ("Page.goto: net::ERR_NAME_NOT_RESOLVED at http://example.invalid/", "dns"),
    ("Page.goto: net::ERR_TIMED_OUT at http://127.0.0.1:8000/", "timeout"),
    ("Page.goto: net::ERR_PROXY_CONNECTION_FAILED at http://127.0.0.1:8000/", "connect_error"),
    # what another attempt would repeat
    ("Page.goto: net::ERR_CERT_AUTHORITY_INVALID at https://127.0.0.1:8443/", None),
    ("Page.goto: net::ERR_UNSAFE_PORT at http://127.0.0.1:1/", None),
    ("Page.goto: net::ERR_ABORTED at http://127.0.0.1:8000/", None),
    ("Page.click: Element is not attached to the DOM", None),
])
def test_a_chromium_error_has_the_category_of_its_net_code(
        message: str, category: str | None) -> None:
    assert network_category(errors.Error(message)) == category
    assert classify(errors.Error(message)) == category


def test_a_timeout_and_a_closed_browser_are_network_errors() -> None:
    assert classify(errors.TimeoutError("Page.goto: Timeout 30000ms exceeded.")) == "timeout"
    assert classify(errors.TargetClosedError()) == "connection_lost"


def test_only_playwright_errors_are_read_for_a_net_code() -> None:
    assert network_category(ValueError("net::ERR_CONNECTION_RESET")) is None
    assert network_category(TimeoutError("Timeout 30000ms exceeded.")) is None
    assert classify(TimeoutError()) == "timeout"  # Python's own, as before
