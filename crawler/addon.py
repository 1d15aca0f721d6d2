"""The add-on that picks single-node or distributed mode from the configuration.

With none of ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``MONGO_URI`` set
(in the settings or the environment) a crawl runs on one node: Scrapy's own
scheduler, a pybloom-live dupefilter and items in a JSON Lines file. With all
three it switches on the Kafka frontier, the Redis Bloom dupefilter and the
MongoDB pipeline. Anything in between is a configuration error. In either mode
``BROWSER_ENABLED`` renders requests with ``meta["playwright"]`` in Chromium
(:mod:`crawler.browser`).

Before either, it registers every default of :mod:`crawler.config.defaults` at
priority ``"default"`` (:meth:`DistributedAddon.register_defaults`), so that
``scrapy settings --get RATELIMIT_RATE`` shows it and a user's value wins.
"""

from __future__ import annotations

import logging

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawler import browser
from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections.kafka_logs import CLIENT_LEVELS, client_log_level
from crawler.operations.malloc import limit_arenas
from crawler.security import limits

logger = logging.getLogger(__name__)
PRIORITY = "addon"
OFFSITE = "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware"
DEPTH = "scrapy.spidermiddlewares.depth.DepthMiddleware"
ROBOTS = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
REMOTE_CONTROL = "scrapy.extensions.remote_control.RemoteControl"


def _replace(settings: BaseSettings, name: str, stock: str, ours: str, order: int) -> None:
    """Put component *ours* where Scrapy's *stock* one is, unless the project switched that
    one off (``None``) itself."""
    components = settings.getdict(name)
    if components.get(stock, order) is not None:
        components[stock] = None
        components.setdefault(ours, order)
        settings.set(name, components, PRIORITY)


def _remote_control_off(settings: BaseSettings) -> None:
    """Scrapy's remote control (2.19: on by default) stays off unless the project turns it on.

    It is an HTTP server on localhost that runs the Python code it is sent, inside a worker
    that holds the crawl's credentials; its token goes to a job file in the user's state
    directory, which a worker killed with ``kill -9`` never removes. Off, its module (and
    aiohttp, about 0.3 CPU-seconds) is not even imported: docs/security.md.
    """
    asked = (settings.getpriority("REMOTE_CONTROL_ENABLED") or 0) > SETTINGS_PRIORITIES["default"]
    if asked and settings.getbool("REMOTE_CONTROL_ENABLED"):
        return  # the project's (or -s) choice
    settings.set("REMOTE_CONTROL_ENABLED", False, PRIORITY)  # no-op under the project's False
    # out of the base list: a path named in EXTENSIONS, even as None, is imported to be read
    base = settings.getdict("EXTENSIONS_BASE")
    if base.pop(REMOTE_CONTROL, None) is not None:
        settings.set("EXTENSIONS_BASE", base, PRIORITY)


def enabled(settings: BaseSettings) -> bool:
    """Whether the project enables this add-on (in ``ADDONS``, by path or class, with a
    priority that is not None), or ``COMMANDS_MODULE`` names this package's commands.

    This package's commands reach every Scrapy project of an environment it is installed in
    (``scrapy.commands`` entry points); in a project without the add-on they behave as
    Scrapy's own.
    """
    if settings.get("COMMANDS_MODULE") == "crawler.commands":
        return True
    for addon, priority in settings.getdict("ADDONS").items():
        path = addon if isinstance(addon, str) else f"{addon.__module__}.{addon.__qualname__}"
        if priority is not None and path == f"{__name__}.DistributedAddon":
            return True
    return False


def distributed(settings: BaseSettings) -> bool:
    """Whether *settings* ask for distributed mode (all of ``SERVICE_SETTINGS`` set).

    Raises :class:`SettingError` for a partial configuration, naming what is missing.
    """
    services = config.configured_services(settings)
    if services and len(services) < len(config.SERVICE_SETTINGS):
        missing = [s for s in config.SERVICE_SETTINGS if s not in services]
        raise SettingError(
            missing[0],
            f"distributed mode needs all of {', '.join(config.SERVICE_SETTINGS)} "
            f"(single-node mode none of them); {', '.join(services)} set but "
            f"{', '.join(missing)} missing",
        )
    return bool(services)


class DistributedAddon:
    """``ADDONS = {"crawler.addon.DistributedAddon": 0}``."""

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        """Before any crawler exists (``CrawlerProcess``, ``scrapy settings``): the defaults."""
        cls.register_defaults(settings)

    @staticmethod
    def register_defaults(settings: BaseSettings) -> None:
        """Every default at priority ``"default"``, where nothing is set yet."""
        config.register_defaults(settings)

    def update_settings(self, settings: BaseSettings) -> None:
        self.register_defaults(settings)
        _replace(settings, "DOWNLOADER_MIDDLEWARES", ROBOTS,  # once per host for the cluster
                 "crawler.middlewares.robots.ClusterRobotsTxtMiddleware", 100)
        middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")  # the SSRF guard, both modes
        middlewares.setdefault("crawler.middlewares.network.NetworkGuardMiddleware", 950)
        # redirects in canonical form and held to the URL traps, both modes (docs/urls.md)
        middlewares.setdefault("crawler.middlewares.canonical.CanonicalRedirectMiddleware", 40)
        middlewares.setdefault("crawler.middlewares.warc.WarcMiddleware", 30)  # WARC_ENABLED
        settings.set("DOWNLOADER_MIDDLEWARES", middlewares, PRIORITY)
        spider = settings.getdict("SPIDER_MIDDLEWARES")  # every link: after depth, before length
        spider.setdefault("crawler.middlewares.canonical.CanonicalLinksMiddleware", 850)
        spider.setdefault("crawler.middlewares.sitemaps.SitemapMiddleware", 950)  # next to it
        spider.setdefault("crawler.extensions.tracing.TracingMiddleware", 10)  # outermost: spans
        settings.set("SPIDER_MIDDLEWARES", spider, PRIORITY)
        extensions = settings.getdict("EXTENSIONS")  # a failed download in one line
        extensions.setdefault("crawler.extensions.downloadlog.DownloadErrorLog", 100)
        extensions.setdefault("crawler.extensions.tracing.Tracing", 110)  # OTEL_…: docs/tracing.md
        settings.set("EXTENSIONS", extensions, PRIORITY)
        _remote_control_off(settings)
        browser.apply(settings, PRIORITY)  # BROWSER_ENABLED: scrapy-playwright, both modes
        if distributed(settings):
            self._distributed(settings)
        else:
            self._single_node(settings)

    def _single_node(self, settings: BaseSettings) -> None:
        crawl = config.get_str(settings, "CRAWL_ID") or "%(name)s"
        path = config.get_str(settings, "LOCAL_ITEMS_PATH").replace("%(crawl_id)s", crawl)
        settings.set("DUPEFILTER_CLASS", "crawler.dedup.LocalBloomDupeFilter", PRIORITY)
        feeds = settings.getdict("FEEDS")
        feeds.setdefault(path, {"format": "jsonlines", "encoding": "utf8"})
        settings.set("FEEDS", feeds, PRIORITY)
        self._pipelines(settings, {"crawler.pipelines.clean.CleanPipeline": 200})
        logger.info(
            "Single-node mode: none of %s is set; Scrapy's scheduler, a local Bloom "
            "dupefilter, items to %s", ", ".join(config.SERVICE_SETTINGS), path,
        )

    def _distributed(self, settings: BaseSettings) -> None:
        limit_arenas(config.get_int(settings, "MALLOC_ARENA_MAX", minimum=0))  # before threads
        client_log_level(config.get_choice(settings, "CLIENT_LOG_LEVEL", CLIENT_LEVELS))
        settings.set("SCHEDULER", "crawler.frontier.scheduler.KafkaScheduler", PRIORITY)
        limits.apply(settings, PRIORITY)  # bounded downloads, redirects, depth; robots.txt
        self._pipelines(settings, {
            "crawler.pipelines.clean.CleanPipeline": 200,
            "crawler.pipelines.validate.ValidationPipeline": 300,
            "crawler.pipelines.mongo.MongoPipeline": 900,
        })
        _replace(settings, "DOWNLOADER_MIDDLEWARES", OFFSITE,  # the hosts scrapy seed added
                 "crawler.middlewares.scope.ScopeOffsiteMiddleware", 50)
        self._downloader(settings)
        self._host_delay(settings)
        _replace(settings, "SPIDER_MIDDLEWARES", DEPTH,  # a seed's own depth_limit meta too
                 "crawler.middlewares.depth.SeedDepthMiddleware", 900)
        settings.set("METRICS_ENABLED", True, PRIORITY)
        extensions = settings.getdict("EXTENSIONS")
        extensions.setdefault("crawler.extensions.metrics.MetricsExporter", 500)
        settings.set("ALERTS_ENABLED", True, PRIORITY)
        extensions.setdefault("crawler.extensions.alerts.AlertsExtension", 510)
        extensions.setdefault("crawler.storage.rejected.RejectedItems", 520)  # dropped items
        settings.set("EXTENSIONS", extensions, PRIORITY)
        logger.info(
            "Distributed mode: Kafka %s, Redis %s, MongoDB %s",
            config.mask_url(config.get_str(settings, "KAFKA_BOOTSTRAP_SERVERS")),
            config.mask_url(config.get_str(settings, "REDIS_URL")),
            config.mask_url(config.get_str(settings, "MONGO_URI")),
        )

    @staticmethod
    def _downloader(settings: BaseSettings) -> None:
        """Politeness and resilience: on by default, each with its own switch.

        A switch set in the project or on the command line wins (add-on settings
        have a lower priority). The rate limiter is on: it holds every host's rate
        (robots.txt ``Crawl-delay``, ``RATELIMIT_RATE``, ``RATELIMIT_DOMAINS``); the proxy pool and
        user-agent rotation once they have something to rotate.
        """
        settings.set("RETRY_BACKOFF_ENABLED", True, PRIORITY)
        settings.set("RATELIMIT_ENABLED", True, PRIORITY)  # robots.txt Crawl-delays at least
        has_proxies = bool(config.get_list(settings, "ROTATING_PROXY_LIST")
                           or config.get_str(settings, "ROTATING_PROXY_LIST_PATH"))
        settings.set("PROXY_ENABLED", has_proxies, PRIORITY)
        settings.set("USERAGENT_ROTATION_ENABLED",
                     bool(config.get_list(settings, "USERAGENT_LIST")), PRIORITY)
        middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
        wanted = {
            "RETRY_BACKOFF_ENABLED": ("crawler.middlewares.retry.BackoffRetryMiddleware", 550),
            "RATELIMIT_ENABLED": ("crawler.middlewares.ratelimit.RateLimitMiddleware", 560),
            "PROXY_ENABLED": ("crawler.middlewares.proxies.ProxyPoolMiddleware", 610),
            "USERAGENT_ROTATION_ENABLED": (
                "crawler.middlewares.useragent.UserAgentRotationMiddleware", 500),
        }
        for switch, (path, order) in wanted.items():
            if config.get_bool(settings, switch):
                middlewares.setdefault(path, order)
        # the crawl ledger hears why a download gave no response (innermost: first to hear)
        middlewares.setdefault("crawler.middlewares.ledger.LedgerMiddleware", 990)
        if config.get_int(settings, "HOST_PAGE_BUDGET", minimum=0):  # after robots.txt: a
            middlewares.setdefault(  # forbidden page costs no budget
                "crawler.middlewares.budget.HostBudgetMiddleware", 110)
        if config.get_int(settings, "HOSTBREAKER_FAILURES", minimum=0):  # hears a network
            middlewares.setdefault(  # error before the retry middleware (550) retries it
                "crawler.middlewares.breaker.HostBreakerMiddleware", 555)
        if config.get_bool(settings, "RETRY_BACKOFF_ENABLED"):
            middlewares["scrapy.downloadermiddlewares.retry.RetryMiddleware"] = None
        settings.set("DOWNLOADER_MIDDLEWARES", middlewares, PRIORITY)

    @staticmethod
    def _host_delay(settings: BaseSettings) -> None:
        """``DOWNLOAD_DELAY`` is the cluster's gap between two requests to a host (the default
        ``HOSTLIMIT_DELAY`` of -1), kept by the rate limiter's token, taken as the request goes
        out. Scrapy's own per-process slot delay is then 0: a request it held after its token
        came up to 12 ms late, and the next worker's, on time, 0.088 s after it (0.1 s delay)."""
        if not (config.get_bool(settings, "HOSTLIMIT_ENABLED")
                and config.get_bool(settings, "RATELIMIT_ENABLED")):
            return
        if config.get_float(settings, "HOSTLIMIT_DELAY") < 0:
            delay = config.get_float(settings, "DOWNLOAD_DELAY", minimum=0)
            settings.set("HOSTLIMIT_DELAY", delay, PRIORITY)
        settings.set("DOWNLOAD_DELAY", 0, "cmdline")

    @staticmethod
    def _pipelines(settings: BaseSettings, wanted: dict[str, int]) -> None:
        pipelines = settings.getdict("ITEM_PIPELINES")
        for path, order in wanted.items():
            pipelines.setdefault(path, order)
        settings.set("ITEM_PIPELINES", pipelines, PRIORITY)
