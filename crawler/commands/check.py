"""``scrapy check``: Scrapy's own command, always on one node, and with ``@start_url``.

Contracts test what a spider's callbacks make of a page, not the frontier, so the check runs
in single-node mode even where ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``MONGO_URI``
are set (in the settings, on the command line or in the environment): Scrapy's own
scheduler fetches each contract's page, nothing reaches Kafka, Redis or MongoDB. In
distributed mode the contracts' requests could not travel at all: their callbacks are the
contracts' wrappers, not methods of the spider (``crawler.frontier.codec``).

``COMMANDS_MODULE = "crawler.commands"`` makes this the project's ``check``; it also adds
:class:`StartUrlContract` (``@start_url``) to ``SPIDER_CONTRACTS``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from scrapy.commands.check import Command as ScrapyCheck
from scrapy.contracts import Contract
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawler import addon
from crawler.config.readers import SERVICE_SETTINGS

logger = logging.getLogger(__name__)
START_URL_CONTRACT = f"{__name__}.StartUrlContract"


class StartUrlContract(Contract):
    """``@start_url``: the sample request fetches the spider's first start URL.

    For a spider whose start URLs are an argument, which ``@url`` cannot name: the
    bundled ``site`` spider is checked with ``scrapy check site -a start_urls=URL``.
    """

    name = "start_url"

    def __init__(self, method: Callable[..., Any], *args: Any) -> None:
        super().__init__(method, *args)
        self.spider = getattr(method, "__self__", None)

    def adjust_request_args(self, args: dict[str, Any]) -> dict[str, Any]:
        urls = list(getattr(self.spider, "start_urls", None) or [])
        if not urls:
            raise ValueError("@start_url: the spider has no start URL (-a start_urls=URL)")
        args["url"] = urls[0]
        return args


def single_node(settings: BaseSettings) -> list[str]:
    """Unset the connection settings in *settings* (above any project or ``-s`` value);
    the ones that were set. The environment is :func:`without_services`' part."""
    configured = [name for name in SERVICE_SETTINGS if settings.get(name)]
    for name in SERVICE_SETTINGS:
        settings.set(name, "", priority="cmdline")
    return configured


@contextmanager
def without_services() -> Iterator[list[str]]:
    """The connection settings' environment variables removed while inside; yields
    the ones that were set."""
    saved = {name: os.environ.pop(name) for name in SERVICE_SETTINGS if name in os.environ}
    try:
        yield [name for name in SERVICE_SETTINGS if saved.get(name)]
    finally:
        os.environ.update(saved)


def add_contract(settings: BaseSettings) -> None:
    """``@start_url`` in ``SPIDER_CONTRACTS``, unless the project switched it off."""
    contracts = settings.getdict("SPIDER_CONTRACTS")
    contracts.setdefault(START_URL_CONTRACT, 1)  # adjusts the request, as @url does
    priority = max(settings.getpriority("SPIDER_CONTRACTS") or 0,
                   SETTINGS_PRIORITIES["command"])
    settings.set("SPIDER_CONTRACTS", contracts, priority=priority)


class Command(ScrapyCheck):
    unset: tuple[str, ...] = ()  # the connection settings the project or -s had set

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        if addon.enabled(self.settings):  # else a project of Scrapy's own: its check
            add_contract(self.settings)
            self.unset = tuple(single_node(self.settings))

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if not addon.enabled(self.settings):
            super().run(args, opts)
            return
        with without_services() as from_env:
            if self.unset or from_env:
                logger.info("Contracts run on one node: %s not used",
                            ", ".join(sorted({*self.unset, *from_env})))
            super().run(args, opts)
