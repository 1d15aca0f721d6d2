"""The politeness unit: what one host's limits count against (``POLITENESS_UNIT``).

- ``host`` (the default): the URL's host name, as Scrapy's downloader slots;
- ``domain``: its registered domain (``a.example.co.uk`` and ``b.example.co.uk`` share
  ``example.co.uk``), from the public suffix list bundled with ``tldextract`` (no download);
- ``ip``: the address it resolves to, so the virtual hosts of one server share its limits.
  An IP literal is its own unit; a name counts as itself until this worker's first lookup
  of it has answered (the guarded resolver's cache: :mod:`crawler.security.resolver`), then
  as its first address.

The cluster-wide concurrency and delay (``HOSTLIMIT_*``), the rate limiter (``RATELIMIT_*``,
robots.txt ``Crawl-delay``) and the host breaker (``HOSTBREAKER_*``) all count per unit. A
request's ``download_slot`` meta, as in Scrapy, wins over any of them. ``HOST_PAGE_BUDGET``
and robots.txt stay per host and origin.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from scrapy import Request
from scrapy.settings import BaseSettings
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.security import address_of

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


def by_ip(host: str) -> str:
    if address_of(host) is not None:
        return host.strip("[]")
    from twisted.internet import reactor

    resolver = getattr(reactor, "nameResolver", None)
    cached = getattr(resolver, "cached", None)
    addresses = cached(host) if callable(cached) else None
    return str(addresses[0]) if addresses else host


_UNITS: dict[str, Unit] = {"host": by_host, "domain": by_domain, "ip": by_ip}
