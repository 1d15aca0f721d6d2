"""``scrapy settings``: Scrapy's own command, with the add-ons' defaults registered first.

Scrapy's ``settings`` command starts no crawler, so no add-on runs: without this,
``scrapy settings --get RATELIMIT_RATE`` would print ``None`` for every setting of
:mod:`crawler.config.defaults` the project leaves alone. Each add-on of ``ADDONS`` gets
its ``update_pre_crawler_settings`` call, as before a crawl; the options are Scrapy's.
"""

from __future__ import annotations

import argparse

from scrapy.addons import AddonManager
from scrapy.commands.settings import Command as ScrapySettingsCommand


class Command(ScrapySettingsCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        AddonManager.load_pre_crawler_settings(self.settings)
        super().run(args, opts)
