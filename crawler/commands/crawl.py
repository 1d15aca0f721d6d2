"""``scrapy crawl``: Scrapy's own command, plus a user's start-up mistake told in one line.

``COMMANDS_MODULE = "crawler.commands"`` makes this command replace Scrapy's ``crawl``
in the project, for scrapyd's jobs too (``scrapyd.runner`` runs ``scrapy crawl``).
:class:`~crawler.commands.checked.CheckedStart` checks the settings and reaches the
services before the reactor runs, and tells a mistake found later in one line.
"""

from __future__ import annotations

import argparse

from scrapy.commands.crawl import Command as ScrapyCrawl
from scrapy.exceptions import UsageError

from crawler.commands.checked import CheckedStart
from crawler.frontier import startup


class Command(ScrapyCrawl, CheckedStart):  # Scrapy's first: crawler.scrapy_commands
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        startup.mark("imports")
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage errors
            return
        try:
            crawler = self._create_crawler(args[0])
        except KeyError as exc:  # the spider loader's "Spider not found: NAME"
            raise UsageError(f"{exc.args[0]} ('scrapy list' lists the project's spiders)",
                             print_help=False) from None
        self._start(crawler, opts.spargs)
