"""``scrapy crawl``: Scrapy's own command, plus a user's start-up mistake told in one line.

``COMMANDS_MODULE = "crawler.commands"`` makes this command replace Scrapy's ``crawl``
in the project, for scrapyd's jobs too (``scrapyd.runner`` runs ``scrapy crawl``).
Before the reactor runs, :func:`crawler.commands.preflight.preflight` checks the settings and
reaches the services; a mistake found later (a spider argument, the add-on's check of
the configuration) ends the crawl's task, and is told instead of its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from scrapy.commands.crawl import Command as ScrapyCrawl
from scrapy.exceptions import UsageError
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler.commands import preflight
from crawler.frontier import startup

logger = logging.getLogger(__name__)


class Command(ScrapyCrawl):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        startup.mark("imports")
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage errors
            return
        assert self.crawler_process is not None
        try:
            crawler = self._create_crawler(args[0])
        except KeyError as exc:  # the spider loader's "Spider not found: NAME"
            raise UsageError(f"{exc.args[0]} ('scrapy list' lists the project's spiders)",
                             print_help=False) from None
        assert crawler.spidercls is not None
        try:
            preflight.preflight(crawler.settings, crawler.spidercls.name)
        except preflight.MISTAKES as exc:
            self._tell(exc)
            return
        startup.mark("preflight")
        self._watch(self.crawler_process.crawl(crawler, **opts.spargs))
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
