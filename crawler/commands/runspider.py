"""``scrapy runspider``: Scrapy's own command, with ``scrapy crawl``'s start.

``COMMANDS_MODULE = "crawler.commands"`` makes it the project's ``runspider``, as
:mod:`crawler.commands.crawl` is its ``crawl``: a bad setting or an unreachable service ends
it in one line, not a traceback (:class:`~crawler.commands.checked.CheckedStart`), and the
worker's start-up line (:mod:`crawler.frontier.startup`) tells its imports apart from
Scrapy's set-up.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scrapy import Spider
from scrapy.commands.runspider import Command as ScrapyRunspider
from scrapy.commands.runspider import _import_file
from scrapy.exceptions import UsageError
from scrapy.utils.spider import iter_spider_classes

from crawler.commands.checked import CheckedStart
from crawler.frontier import startup


class Command(ScrapyRunspider, CheckedStart):  # Scrapy's first: crawler.scrapy_commands
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        startup.mark("imports")
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage error
            return
        self._start(self._create_crawler(spider_class(Path(args[0]))), opts.spargs)


def spider_class(filename: Path) -> type[Spider]:
    """The spider class Scrapy's ``runspider`` runs from *filename*: its last one."""
    if not filename.exists():
        raise UsageError(f"File not found: {filename}\n")
    try:
        module = _import_file(filename)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"Unable to load {str(filename)!r}: {exc}\n") from exc
    classes = list(iter_spider_classes(module))
    if not classes:
        raise UsageError(f"No spider found in file: {filename}\n")
    return classes.pop()
