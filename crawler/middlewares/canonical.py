"""Canonical URLs and URL traps for every link and every redirect (``docs/urls.md``).

- :class:`CanonicalLinksMiddleware`, a spider middleware: each request a callback yields
  (and each start request) in canonical form (:mod:`crawler.frontier.canonical`) before
  the scheduler and its dupefilter see it, so ``/page?utm_source=x`` and ``/page`` are one
  URL, fetched and stored once. A link whose path repeats a segment past
  ``URLTRAP_MAX_SEGMENT_REPEATS`` is dropped: stat ``urltrap/path_repeats``, the ledger's
  ``discarded/path_repeats``. Order 850: after the depth limit (900), before Scrapy's
  ``URLLENGTH_LIMIT`` (800), which then measures the canonical URL.
- :class:`CanonicalRedirectMiddleware`, a downloader middleware: a redirect's target
  (``redirect_urls`` meta, set by Scrapy's redirect middlewares) is put in canonical form
  (the request comes back through the scheduler, keeping its lease) and held to both
  traps, ``URLLENGTH_LIMIT`` included, which Scrapy applies to links only. A dropped one
  raises :class:`UrlTrap`: the ledger's ``dropped/path_repeats`` or ``dropped/url_length``.
  Order 40: before the offsite filter (50) and robots.txt (100) look at the URL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Self

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.settings import BaseSettings
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.frontier.canonical import CanonicalRules
from crawler.frontier.traps import PATH_REPEATS, TrapRules
from crawler.statusindex.signals import filtered

logger = logging.getLogger(__name__)
LOG_FIRST, LOG_EVERY = 10, 1000  # drops logged: the first ones, then 1 in N
REDIRECT_META = "redirect_urls"  # Scrapy's redirect middlewares set it on a redirect
CANONICAL_META = "canonical_url"  # the URL this middleware gave a redirect (no second turn)


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """The canonical form and the traps, read once from the settings."""

    canonical: CanonicalRules
    traps: TrapRules

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> UrlPolicy:
        """``CANONICAL_*``, ``URLTRAP_MAX_SEGMENT_REPEATS`` and Scrapy's ``URLLENGTH_LIMIT``."""
        repeats = config.get_int(settings, "URLTRAP_MAX_SEGMENT_REPEATS", minimum=0)
        return cls(CanonicalRules.from_settings(settings),
                   TrapRules(repeats, max_length=_length_limit(settings)))


def _length_limit(settings: BaseSettings) -> int:
    value = settings.get("URLLENGTH_LIMIT") or 0
    if isinstance(value, bool) or not str(value).strip().isdigit():
        raise SettingError("URLLENGTH_LIMIT", f"expected an integer >= 0, got {value!r}")
    return int(value)


class UrlTrap(IgnoreRequest):
    """A redirect to a trap; the ledger counts it as ``dropped/<ledger_reason>``."""

    def __init__(self, reason: str, url: str) -> None:
        super().__init__(f"URL trap ({reason}): {url[:200]}")
        self.ledger_reason = reason


class _Counted:
    """Counts drops in the stats and logs the first ones, then one in :data:`LOG_EVERY`."""

    crawler: Crawler
    drops = 0

    def _dropped(self, stat: str, what: str, url: str, reason: str) -> None:
        self.drops += 1
        self._inc(stat)
        if self.drops <= LOG_FIRST or self.drops % LOG_EVERY == 0:
            logger.info("Ignoring %s (%s; %d so far, docs/urls.md): %s", what, reason,
                        self.drops, url[:300])

    def _inc(self, stat: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(stat)


class CanonicalLinksMiddleware(_Counted, BaseSpiderMiddleware):
    """Every link (and start request) in canonical form; links into a path trap dropped."""

    def __init__(self, crawler: Crawler, policy: UrlPolicy) -> None:
        super().__init__(crawler)
        self.policy = policy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, UrlPolicy.from_settings(crawler.settings))

    def get_processed_request(self, request: Request,
                              response: Response | None) -> Request | None:
        url = self.policy.canonical.url(request.url)
        if url != request.url:
            request = request.replace(url=url)
            self._inc("canonical/links_rewritten")
        if self.policy.traps.repeats(request.url):
            self._dropped(f"urltrap/{PATH_REPEATS}", "link", request.url, PATH_REPEATS)
            filtered(self.crawler, request, PATH_REPEATS)
            return None
        return request


class CanonicalRedirectMiddleware(_Counted):
    """Every redirect's target in canonical form, and held to the traps."""

    def __init__(self, crawler: Crawler, policy: UrlPolicy) -> None:
        self.crawler, self.policy = crawler, policy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, UrlPolicy.from_settings(crawler.settings))

    def process_request(self, request: Request) -> Request | None:
        if REDIRECT_META not in request.meta:
            return None  # a link or a seed: in canonical form already
        url = self.policy.canonical.url(request.url)
        if url != request.url and request.meta.get(CANONICAL_META) != request.url:
            self._inc("canonical/redirects_rewritten")
            canonical = request.replace(url=url)
            canonical.meta[CANONICAL_META] = canonical.url
            return canonical  # scheduled again: the same lease, no dupefilter
        reason = self.policy.traps.reason(request.url)
        if reason is None:
            return None
        self._dropped(f"urltrap/redirect/{reason}", "redirect", request.url, reason)
        raise UrlTrap(reason, request.url)
