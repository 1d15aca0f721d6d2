"""The politeness unit: what one host's limits count against (``POLITENESS_UNIT``).

- ``host`` (the default): the URL's host name, as Scrapy's downloader slots;
- ``domain``: its registered domain (``a.example.co.uk`` and ``b.example.co.uk`` share
  ``example.co.uk``), from the public suffix list bundled with ``tldextract`` (no download);
- ``ip``: the address it resolves to, so the virtual hosts of one server share its limits.
  An IP literal is its own unit; a name counts as its first address once this worker's
  lookup of it has answered (the guarded resolver's cache: :mod:`crawler.security.resolver`).
  The rate limiter (delays, ``Crawl-delay``) waits for that first lookup
  (:func:`looked_up`): a name's first request counted as the name went out 0.07 s after
  the other name's (CI). The frontier's concurrency gate (``HOSTLIMIT_*``), which cannot
  wait, counts a name not yet looked up as itself.

The cluster-wide concurrency and delay (``HOSTLIMIT_*``), the rate limiter (``RATELIMIT_*``,
robots.txt ``Crawl-delay``) and the host breaker (``HOSTBREAKER_*``) all count per unit. A
request's ``download_slot`` meta, as in Scrapy, wins over any of them. ``HOST_PAGE_BUDGET``
and robots.txt stay per host and origin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache

from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.security import address_of

logger = logging.getLogger(__name__)
UNITS = ("host", "domain", "ip")
Unit = Callable[[str], str]


def politeness_unit(settings: BaseSettings) -> Unit:
    """Host name (lower case) -> its unit; :class:`SettingError` names a bad setting."""
    name = config.get_str(settings, "POLITENESS_UNIT").strip().lower() or "host"
    if name not in UNITS:
        raise SettingError("POLITENESS_UNIT", f"expected one of {', '.join(UNITS)}, got {name!r}")
    return _UNITS[name]


def request_unit(unit: Unit) -> Callable[[Request], str]:
    """A request's unit: its ``download_slot`` meta, else its host's *unit*."""
    def key(request: Request) -> str:
        slot = request.meta.get("download_slot")
        if isinstance(slot, str) and slot:
            return slot
        return unit((urlparse_cached(request).hostname or "").lower())
    return key


def by_host(host: str) -> str:
    return host


@cache
def _extract() -> Callable[[str], str]:
    import tldextract

    extract = tldextract.TLDExtract(suffix_list_urls=())  # the bundled list: no download

    def domain(host: str) -> str:
        return extract(host).top_domain_under_public_suffix or host

    return domain


def by_domain(host: str) -> str:
    return host if address_of(host) is not None else _extract()(host)


async def looked_up(unit: Unit, host: str) -> None:
    """With unit ``ip``: once this worker's lookup of *host* has answered (cached from then
    on), so that :func:`by_ip` gives its address. A failed lookup leaves *host* its own unit
    (its download fails the same way)."""
    if unit is not by_ip or address_of(host) is not None:
        return
    from twisted.internet import reactor

    resolver = getattr(reactor, "nameResolver", None)
    cached, addresses = getattr(resolver, "cached", None), getattr(resolver, "addresses", None)
    if not callable(cached) or not callable(addresses) or cached(host):
        return
    try:
        await maybe_deferred_to_future(addresses(host))
    except Exception as exc:  # DNS errors of every kind: the download says it
        logger.debug("Lookup of %s for its politeness unit failed: %s", host, exc)


def by_ip(host: str) -> str:
    if address_of(host) is not None:
        return host.strip("[]")
    from twisted.internet import reactor

    resolver = getattr(reactor, "nameResolver", None)
    cached = getattr(resolver, "cached", None)
    addresses = cached(host) if callable(cached) else None
    return str(addresses[0]) if addresses else host


_UNITS: dict[str, Unit] = {"host": by_host, "domain": by_domain, "ip": by_ip}
