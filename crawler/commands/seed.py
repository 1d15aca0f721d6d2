"""``scrapy seed SPIDER [URL ...] [-f FILE|- ...]``: publish seeds to a crawl's seed topic.

Seeds come from the arguments and from files or standard input (:mod:`crawler.frontier.
seedfiles`: lines, JSON lines or CSV, plain or gzip), each checked and in normal form.
A seed whose host is outside the crawl's scope (its spiders' allowed domains and the hosts
added so far, :mod:`crawler.frontier.scope`) is added to it (``SEED_SCOPE=add``, the
default) or refused here with its line (``reject``). Every line ends in the summary and in
the crawl ledger (``submitted/...``); none is dropped in silence.

What it publishes is not signed: the workers take it as an external seed, so a JSON seed is
checked here against the same rule (``SEED_META_KEYS``, ``SEED_REQUEST_FIELDS``, read from
this command's settings) and a line that sets more is skipped with its reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.settings import BaseSettings

from crawler import scrapy_commands
from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.frontier import seedfiles
from crawler.frontier.seedfiles import Bad, Seed
from crawler.frontier.seedpublish import Publisher, SeedScope
from crawler.frontier.seedrule import SeedRule

HELD = 1000  # seeds held while their new hosts go into the scope set in one call


class Command(ScrapyCommand):
    requires_project = True
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "INFO"}

    def syntax(self) -> str:
        return "<spider> [url ...] [-f FILE|- ...] [--format lines|csv] [--scope add|reject]"

    def short_desc(self) -> str:
        return scrapy_commands.SEED

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-f", "--file", dest="files", action="append", default=[],
                            help="read seeds from FILE (plain or gzip), - for stdin; repeatable")
        parser.add_argument("--crawl-id", dest="crawl_id", help="CRAWL_ID (default: the spider)")
        parser.add_argument("--format", dest="format", choices=seedfiles.FORMATS,
                            default="auto", help="lines (URLs or JSON objects) or csv "
                            "(url,priority); auto: csv for *.csv[.gz]")
        parser.add_argument("--scope", dest="scope", choices=("add", "reject"),
                            help="a seed outside the crawl's scope: add its host (default) "
                                 "or refuse it (setting SEED_SCOPE)")
        parser.add_argument("--progress", dest="progress", action="store_true",
                            help="show progress even when stderr is not a terminal")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args:
            raise UsageError("name the spider whose crawl gets the seeds")
        settings = self.settings
        assert settings is not None
        if opts.crawl_id:
            settings.set("CRAWL_ID", opts.crawl_id, "cmdline")
        if opts.scope:
            settings.set("SEED_SCOPE", opts.scope, "cmdline")
        try:
            crawl = config.crawl_id(settings, args[0])
            if not args[1:] and not opts.files:
                raise UsageError("no seeds given: pass URLs or -f FILE")
            self.exitcode = _publish(settings, crawl, args[1:], opts)
        except (SettingError, connection.ServiceUnavailable, OSError) as exc:
            print(f"scrapy seed: {exc}", file=sys.stderr)  # one line, no traceback
            self.exitcode = 1


def _entries(urls: list[str], files: list[str], fmt: str,
             rule: SeedRule) -> Iterator[Seed | Bad]:
    for number, url in enumerate(urls, 1):
        yield from seedfiles.read(iter([url]), f"argument {number}", "lines", rule)  # type: ignore[arg-type]
    for path in files:
        with seedfiles.open_text(path) as handle:
            yield from seedfiles.read(handle, "stdin" if path == "-" else path,
                                      seedfiles.format_of(path, fmt), rule)


def _publish(settings: BaseSettings, crawl: str, urls: list[str],
             opts: argparse.Namespace) -> int:
    mode = config.get_choice(settings, "SEED_SCOPE", ("add", "reject"))
    rule = SeedRule.from_settings(settings)  # what the workers take from an unsigned seed
    publisher = Publisher.open(settings, crawl)
    try:
        scope = SeedScope.connect(settings, crawl, mode)
    except BaseException:
        publisher.close()
        raise
    progress = Progress(opts.progress or sys.stderr.isatty())
    held: list[Seed] = []  # admitted, sent once the scope has their hosts (SeedScope.save)
    try:
        for entry in _entries(urls, opts.files, opts.format, rule):
            if isinstance(entry, Bad):
                print(f"{entry.where}: skipped: {entry.reason}", file=sys.stderr)
                publisher.counts["invalid"] += 1
            elif scope.admits(entry.url, entry.host):
                held.append(entry)
                if len(held) >= HELD:
                    _release(held, scope, publisher)
            else:
                print(f"{entry.url}: refused: its host is outside the crawl's scope "
                      f"(SEED_SCOPE=reject)", file=sys.stderr)
                publisher.counts["out_of_scope"] += 1
            progress.tick(publisher.counts)
        _release(held, scope, publisher)
    finally:
        publisher.close()
        scope.close(publisher.counts)
    progress.done()
    print(publisher.summary(scope.added))
    counts = publisher.counts
    return 0 if counts["published"] or not (counts["invalid"] or counts["out_of_scope"]) else 1


def _release(held: list[Seed], scope: SeedScope, publisher: Publisher) -> None:
    scope.save()
    for seed in held:
        publisher.send(seed)
    held.clear()


class Progress:
    """A one-line progress count on stderr, refreshed twice a second."""

    def __init__(self, shown: bool) -> None:
        self.shown, self.started, self.last = shown, time.monotonic(), 0.0

    def tick(self, counts: dict[str, int]) -> None:
        now = time.monotonic()
        if self.shown and now - self.last >= 0.5:
            self.last = now
            rate = counts["published"] / max(now - self.started, 1e-9)
            print(f"\r{counts['published']:,} published, {counts['invalid']:,} invalid, "
                  f"{counts['out_of_scope']:,} out of scope ({rate:,.0f} seeds/s)",
                  end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.shown and self.last:
            print(file=sys.stderr)
