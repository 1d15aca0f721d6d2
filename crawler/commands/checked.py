"""The start of ``scrapy crawl`` and ``scrapy runspider``: a user's mistake told in one line.

Before the reactor runs, :func:`crawler.commands.preflight.preflight` checks the settings and
reaches the services; a mistake found later (a spider argument, the add-on's check of the
configuration) ends the crawl's task, and is told instead of its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from scrapy.crawler import Crawler
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler import addon
from crawler.commands import preflight
from crawler.frontier import startup

logger = logging.getLogger(__name__)


class CheckedStart:
    """Runs a crawler once :func:`~crawler.commands.preflight.preflight` passed: a mixin
    of Scrapy commands (not one itself: Scrapy would list every command class of this
    package as a command)."""

    crawler_process: Any  # ScrapyCommand's
    exitcode: int

    def _start(self, crawler: Crawler, spargs: dict[str, Any]) -> None:
        """Check *crawler*'s settings and services, then crawl with *spargs*."""
        assert self.crawler_process is not None and crawler.spidercls is not None
        try:
            if addon.enabled(crawler.settings):  # else a project of Scrapy's own
                preflight.preflight(crawler.settings, crawler.spidercls.name)
        except preflight.MISTAKES as exc:
            self._tell(exc)
            return
        startup.mark("preflight")
        self._watch(self.crawler_process.crawl(crawler, **spargs))
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1

    def _watch(self, crawling: Any) -> None:
        """Tell a mistake that ends *crawling*: an asyncio task or a Twisted Deferred."""
        if isinstance(crawling, asyncio.Future):
            crawling.add_done_callback(self._task_done)
        elif isinstance(crawling, Deferred):
            crawling.addErrback(self._crawl_failed)

    def _tell(self, mistake: Exception) -> None:
        logger.error("%s", preflight.one_line(mistake))
        self.exitcode = 1

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        """The crawl's task (``AsyncCrawlerProcess``) ended: tell a mistake that ended it.

        Reading the exception keeps asyncio from printing "Task exception was never
        retrieved" with a traceback; any other error is logged with its own.
        """
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if (mistake := preflight.mistake_in(exc)) is not None:
            self._tell(mistake)
        else:
            logger.error("The crawl failed", exc_info=exc)

    def _crawl_failed(self, failure: Failure) -> Failure | None:
        """The crawl's Deferred (``CrawlerProcess``) failed: tell a mistake, pass the rest."""
        mistake = preflight.mistake_in(failure.value) if failure.value else None
        if mistake is None:
            return failure
        self._tell(mistake)
        return None
