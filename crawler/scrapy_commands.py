"""This package's commands as Scrapy finds them in every project: ``scrapy.commands`` entry
points (``pyproject.toml``), so that ``pip install`` and the add-on line are all a project
needs (``COMMANDS_MODULE = "crawler.commands"`` still works).

Scrapy makes an instance of every command of the environment at each ``scrapy`` run, to list
them. The commands of :mod:`crawler.commands` import the Kafka, Redis and MongoDB clients and
most of the package: about 0.8 s that every ``scrapy`` run of every project in the
environment would pay, stock Scrapy's included. Each class here stands in for one of them:
it gives the list its line, and imports its command's module only once that command is the
one run, then becomes it.

This module is not in :mod:`crawler.commands`: Scrapy would list each class of a module
there as a command named after the module. A stand-in can become a command whose first base
is Scrapy's command (Python refuses a ``__class__`` of another object layout): hence
``Command(ScrapyCrawl, CheckedStart)``, not the mixin first.
"""

from __future__ import annotations

import argparse
from importlib import import_module
from typing import ClassVar

from scrapy.commands import ScrapyCommand

SEED = "Publish seed URLs to a distributed crawl (<CRAWL_ID>.seeds)"
CLUSTER = "Show the state of a distributed crawl (nodes, progress, lag, dedup, proxies)"


class Standin(ScrapyCommand):
    """A command of :mod:`crawler.commands` (:attr:`module`) until it is the one run."""

    module: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # the list's line; Scrapy's own command's when empty

    def short_desc(self) -> str:
        if self.summary:
            return self.summary
        scrapys: type[ScrapyCommand] = import_module(f"scrapy.commands.{self.module}").Command
        return scrapys.short_desc(self)

    def become(self) -> ScrapyCommand:
        """Turn into the command itself, keeping what Scrapy has set on this one."""
        command: type[ScrapyCommand] = import_module(f"crawler.commands.{self.module}").Command
        kept = dict(vars(self))
        self.__class__ = command  # type: ignore[assignment]
        command.__init__(self)
        vars(self).update(kept)
        return self

    # What Scrapy calls on the command it runs, the first of them (syntax) before any other.
    def syntax(self) -> str:
        return self.become().syntax()

    def long_desc(self) -> str:
        return self.become().long_desc()

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        self.become().add_options(parser)

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        self.become().process_options(args, opts)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        self.become().run(args, opts)


class Seed(Standin):
    module, summary = "seed", SEED


class Cluster(Standin):
    module, summary = "cluster", CLUSTER


class Crawl(Standin):
    module = "crawl"


class Runspider(Standin):
    module = "runspider"


class Check(Standin):
    module = "check"


class Genspider(Standin):
    module = "genspider"


class Settings(Standin):
    module = "settings"
