"""Scrapy project settings of the crawler (``scrapy.cfg`` points here).

The crawler's own settings and their defaults live in :mod:`crawler.config.defaults`
and are documented in ``docs/settings.md``.

It imports :mod:`crawler._scrapy` first, while the import stack is shallow (that module says
why: every ``scrapy`` process starts on about 0.13 CPU-seconds less).
"""

from crawler import _scrapy  # noqa: F401  (imported first: see crawler._scrapy)

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "crawler.commands"

ADDONS = {"crawler.addon.DistributedAddon": 0}

ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 16
CONCURRENT_ITEMS = 16
DOWNLOAD_TIMEOUT = 30
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"
