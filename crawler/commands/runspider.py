"""``scrapy runspider``: Scrapy's own command; it marks where a worker's imports end.

``COMMANDS_MODULE = "crawler.commands"`` makes it the project's ``runspider``, as
:mod:`crawler.commands.crawl` is its ``crawl``: the worker's start-up line
(:mod:`crawler.frontier.startup`) then tells its imports apart from Scrapy's set-up.
"""

from __future__ import annotations

import argparse

from scrapy.commands.runspider import Command as ScrapyRunspider

from crawler.frontier import startup


class Command(ScrapyRunspider):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        startup.mark("imports")
        super().run(args, opts)
