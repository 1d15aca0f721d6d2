"""BROWSER_ENABLED: the add-on sets scrapy-playwright's handlers, launch options and page limit;
a missing browser or extra, or a bad value, is a SettingError that names the setting."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.browser import config as browser
from crawler.config.readers import SettingError

# DOWNLOAD_HANDLERS: get_crawler names aiohttp's handler when no reactor is installed (a
# project's own handler, which the add-on keeps); these tests start no crawl
ADDON = {"ADDONS": {"crawler.addon.DistributedAddon": 0}, "DOWNLOAD_HANDLERS": {}}
OURS = "crawler.browser.handler.BrowserDownloadHandler"


@pytest.fixture
def chromium(tmp_path: Path) -> Path:
    """An executable file named chromium (no browser is started by these tests)."""
    path = tmp_path / "bin" / "chromium"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def settings_with(chromium: Path, **values: Any) -> Settings:
    return get_crawler(Spider, {**ADDON, "BROWSER_ENABLED": True,
                                "BROWSER_EXECUTABLE": str(chromium), **values}).settings


def test_off_by_default_nothing_of_scrapy_playwright_is_set() -> None:
    settings = get_crawler(Spider, ADDON).settings
    assert settings.getdict("DOWNLOAD_HANDLERS") == {}
    assert settings.get("PLAYWRIGHT_LAUNCH_OPTIONS") is None
    assert browser.apply(Settings(), "addon") is None


def test_the_switch_sets_the_handlers_the_launch_options_and_the_page_limit(
        chromium: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    settings = settings_with(chromium, BROWSER_CONCURRENCY=3)
    assert settings.getdict("DOWNLOAD_HANDLERS") == {"http": OURS, "https": OURS}
    # Scrapy's own handlers stay for every other scheme
    assert settings.getwithbase("DOWNLOAD_HANDLERS")["file"].startswith("scrapy.")
    assert settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS") == {
        "executable_path": str(chromium), "args": list(browser.QUIET_ARGS),
        "handle_sigint": False, "handle_sigterm": False, "handle_sighup": False}
    assert settings.getint("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT") == 3
    assert settings.get("PLAYWRIGHT_BROWSER_TYPE") == "chromium"


def test_as_root_chromium_runs_without_its_sandbox(
        chromium: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    args = settings_with(chromium).getdict("PLAYWRIGHT_LAUNCH_OPTIONS")["args"]
    assert args == ["--no-sandbox", *browser.QUIET_ARGS]


def test_a_name_is_looked_up_on_path(chromium: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(chromium.parent))
    options = settings_with(Path("chromium")).getdict("PLAYWRIGHT_LAUNCH_OPTIONS")
    assert options["executable_path"] == str(chromium)


@pytest.mark.parametrize("value", ["/nonexistent/chromium", "no-such-browser"])
def test_a_missing_browser_names_the_setting(value: str) -> None:
    with pytest.raises(SettingError, match=r"^Setting BROWSER_EXECUTABLE: .*not an executable"
                                           r".*apt-get install chromium") as error:
        get_crawler(Spider, {**ADDON, "BROWSER_ENABLED": True, "BROWSER_EXECUTABLE": value})
    assert error.value.setting == "BROWSER_EXECUTABLE"


def test_a_file_that_is_not_executable_is_no_browser(tmp_path: Path) -> None:
    plain = tmp_path / "chromium"
    plain.write_text("")
    with pytest.raises(SettingError, match="BROWSER_EXECUTABLE"):
        settings_with(plain)


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_the_concurrency_is_a_positive_integer(chromium: Path, value: object) -> None:
    with pytest.raises(SettingError, match=r"^Setting BROWSER_CONCURRENCY: "):
        settings_with(chromium, BROWSER_CONCURRENCY=value)


def test_without_the_extra_the_switch_names_it(
        chromium: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(SettingError, match=r"^Setting BROWSER_ENABLED: needs scrapy-playwright: "
                                           r"pip install 'scrapy-fleet\[browser\]'"):
        settings_with(chromium)


def test_the_projects_launch_options_win_and_add_their_args(
        chromium: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    options = settings_with(chromium, PLAYWRIGHT_LAUNCH_OPTIONS={
        "headless": False, "handle_sigterm": True, "args": ["--lang=fr"]},
    ).getdict("PLAYWRIGHT_LAUNCH_OPTIONS")
    assert options["headless"] is False and options["handle_sigterm"] is True
    assert options["args"] == [*browser.QUIET_ARGS, "--lang=fr"]
    assert options["executable_path"] == str(chromium)


@pytest.mark.parametrize("options", [{"executable_path": "/x"}, {"args": "--lang=fr"}])
def test_launch_options_that_cannot_be_merged_name_the_setting(
        chromium: Path, options: dict[str, Any]) -> None:
    with pytest.raises(SettingError, match=r"^Setting PLAYWRIGHT_LAUNCH_OPTIONS: "):
        settings_with(chromium, PLAYWRIGHT_LAUNCH_OPTIONS=options)


def test_a_projects_own_handler_stays_scrapy_playwrights_is_replaced(
        chromium: Path, caplog: pytest.LogCaptureFixture) -> None:
    own = "myproject.handlers.Mine"
    with caplog.at_level(logging.WARNING, logger="crawler.browser.config"):
        settings = settings_with(chromium, DOWNLOAD_HANDLERS={
            "http": browser.PLAYWRIGHT_HANDLER, "https": own})
    assert settings.getdict("DOWNLOAD_HANDLERS") == {"http": OURS, "https": own}
    assert f"DOWNLOAD_HANDLERS['https'] is {own}: pages of https URLs are not rendered" \
        in caplog.text


def test_values_the_project_set_win_over_the_addons(chromium: Path) -> None:
    settings = settings_with(chromium, PLAYWRIGHT_MAX_PAGES_PER_CONTEXT=2)
    assert settings.getint("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT") == 2
