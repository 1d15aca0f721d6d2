"""Scrapy project settings of the crawler (``scrapy.cfg`` points here).

The crawler's own settings and their defaults live in :mod:`crawler.config.defaults`
and are documented in ``docs/settings.md``.

It imports Scrapy's TLS context factory first, while the import stack is shallow: that module
and :mod:`scrapy.core.downloader.tls` define deprecated aliases through
``create_deprecated_class``, which calls ``inspect.stack()``, whose cost is the stack's depth
times the modules loaded (CPython issue 92041). Imported where a worker first needed it
(about 60 frames deep, 670 modules loaded), the three calls took 0.32 CPU-s; from here
(20 frames, 617 modules), 0.10. Every ``scrapy`` process of this project imports it anyway.
"""

import scrapy.core.downloader.contextfactory  # noqa: F401  (see above)

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
