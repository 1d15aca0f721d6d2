"""The ``BROWSER_*`` settings, read once, and the scrapy-playwright settings made of them.

:func:`apply` is what the add-on calls: with ``BROWSER_ENABLED`` it checks that
scrapy-playwright is installed and that Chromium is there (a mistake is a
:class:`~crawler.config.readers.SettingError` naming the setting), then sets the download
handlers of ``http`` and ``https``, the browser's launch options and its page limit.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError

logger = logging.getLogger(__name__)

HANDLER = "crawler.browser.handler.BrowserDownloadHandler"
PLAYWRIGHT_HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
SCHEMES = ("http", "https")
#: what Chromium must not do on a closed network: it would try Google's hosts at every start
QUIET_ARGS = ("--disable-background-networking", "--disable-component-update",
              "--no-first-run", "--disable-sync")
#: the worker, not Playwright's driver, decides when the browser stops: a SIGINT or SIGTERM
#: lets Scrapy finish the pages in flight, then the handler closes the browser
OWNED_BY_THE_WORKER = {"handle_sigint": False, "handle_sigterm": False, "handle_sighup": False}


@dataclass(frozen=True)
class BrowserConfig:
    """What the add-on needs to switch browser rendering on."""

    executable: str  # Chromium's absolute path
    concurrency: int  # pages open at once in this worker

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BrowserConfig:
        return cls(executable=find_executable(settings),
                   concurrency=config.get_int(settings, "BROWSER_CONCURRENCY", minimum=1))

    def launch_options(self, *, root: bool) -> dict[str, Any]:
        """Playwright's ``launch()`` options: Chromium at :attr:`executable`, headless,
        quiet on a closed network, without its sandbox when run as root (Chromium refuses
        to start as root with it)."""
        args = ["--no-sandbox", *QUIET_ARGS] if root else list(QUIET_ARGS)
        return {"executable_path": self.executable, "args": args, **OWNED_BY_THE_WORKER}


def find_executable(settings: BaseSettings) -> str:
    """``BROWSER_EXECUTABLE`` as an absolute path: a path, or a name found on ``PATH``."""
    value = config.get_str(settings, "BROWSER_EXECUTABLE")
    found = shutil.which(value) if value else None
    if not found:
        raise SettingError(
            "BROWSER_EXECUTABLE",
            f"{value!r} is not an executable file{'' if '/' in value else ' on PATH'}; "
            "install Chromium (Debian: apt-get install chromium) or set BROWSER_EXECUTABLE "
            "to its path")
    return os.path.abspath(found)


def require_scrapy_playwright() -> None:
    if importlib.util.find_spec("scrapy_playwright") is None:
        raise SettingError("BROWSER_ENABLED",
                           "needs scrapy-playwright: pip install 'scrapy-fleet[browser]'")


def apply(settings: BaseSettings, priority: str) -> BrowserConfig | None:
    """With ``BROWSER_ENABLED``: check, then set scrapy-playwright's settings at *priority*
    (a value the project set itself wins); the config, or None when it is off."""
    if not config.get_bool(settings, "BROWSER_ENABLED"):
        return None
    require_scrapy_playwright()
    browser = BrowserConfig.from_settings(settings)
    settings.set("PLAYWRIGHT_LAUNCH_OPTIONS", _launch_options(settings, browser),
                 max(settings.getpriority("PLAYWRIGHT_LAUNCH_OPTIONS") or 0,
                     SETTINGS_PRIORITIES[priority]))
    settings.set("PLAYWRIGHT_BROWSER_TYPE", "chromium", priority)
    settings.set("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT", browser.concurrency, priority)
    _handlers(settings, priority)
    logger.info("Browser rendering: requests with meta['playwright'] in %s, at most %d pages "
                "at once", browser.executable, browser.concurrency)
    return browser


def _launch_options(settings: BaseSettings, browser: BrowserConfig) -> dict[str, Any]:
    """Ours, under the project's ``PLAYWRIGHT_LAUNCH_OPTIONS``: its keys win, its
    ``args`` come after ours."""
    own = config.get_dict(settings, "PLAYWRIGHT_LAUNCH_OPTIONS") \
        if settings.get("PLAYWRIGHT_LAUNCH_OPTIONS") else {}
    if "executable_path" in own:
        raise SettingError("PLAYWRIGHT_LAUNCH_OPTIONS",
                           "set the browser's path with BROWSER_EXECUTABLE, not executable_path")
    options = browser.launch_options(root=os.geteuid() == 0)
    extra = own.pop("args", [])
    if not isinstance(extra, (list, tuple)) or not all(isinstance(a, str) for a in extra):
        raise SettingError("PLAYWRIGHT_LAUNCH_OPTIONS", f"'args' must be a list of strings, "
                                                        f"got {extra!r}")
    return {**options, **own, "args": [*options["args"], *extra]}


def _handlers(settings: BaseSettings, priority: str) -> None:
    """Our handler for http and https, unless the project put another one there (a handler
    of its own is kept, scrapy-playwright's is replaced by ours, its subclass)."""
    handlers = settings.getdict("DOWNLOAD_HANDLERS")
    for scheme in SCHEMES:
        if handlers.get(scheme, HANDLER) in (HANDLER, PLAYWRIGHT_HANDLER):
            handlers[scheme] = HANDLER
        else:
            logger.warning("DOWNLOAD_HANDLERS[%r] is %s: pages of %s URLs are not rendered "
                           "in the browser", scheme, handlers[scheme], scheme)
    settings.set("DOWNLOAD_HANDLERS", handlers,
                 max(settings.getpriority("DOWNLOAD_HANDLERS") or 0, SETTINGS_PRIORITIES[priority]))
