"""Refuses every request that would connect to a blocked network (:mod:`crawler.security`).

Three checks, one reason (``blocked_network``, in the stats as ``network_guard/refused`` and
in the crawl ledger as ``dropped/blocked_network``):

- a URL whose host is an IP literal of a blocked network is refused before it is sent;
- a direct download connects only to the addresses :class:`~crawler.security.
  GuardedResolver` allows; a host left with none fails with ``DNSLookupError``, which
  :meth:`process_exception` turns into the refusal before any retry is tried;
- a request sent through a proxy (``meta["proxy"]``, which the proxy pool sets at an
  earlier order) is checked on every address of its host, since the proxy, not this
  worker, connects to it. The proxy resolves the name again: a proxy that can reach
  internal networks needs its own rule against them (``docs/security.md``).

Seeds, links and redirects are all requests that pass here, at order 950: after the proxy
pool (610) has chosen, before the retry middleware (550) would retry a refusal.
"""

from __future__ import annotations

import logging
from typing import Any, Self

from redis.exceptions import RedisError
from scrapy import Request, exceptions, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.error import DNSLookupError

from crawler.frontier.delay import delayed
from crawler.ledger import outcomes
from crawler.security import GuardedResolver, NetworkPolicy, address_of, install
from crawler.security.trusted import TRUSTED

logger = logging.getLogger(__name__)
REASON = "blocked_network"
RETRY = 2.0  # seconds a request waits in the buffer while Redis cannot say if it is seeded
LOG_FIRST, LOG_EVERY = 10, 1000  # refusals logged: the first ones, then 1 in N
#: a lookup that gave no address: Twisted's error, which Scrapy 2.19 re-raises as its own
NO_ADDRESS: tuple[type[Exception], ...] = (
    DNSLookupError, *filter(None, [getattr(exceptions, "CannotResolveHostError", None)]))


class BlockedNetwork(IgnoreRequest):
    """A request refused by the SSRF guard (the ledger counts its ``ledger_reason``)."""

    ledger_reason = REASON


class NetworkGuardMiddleware:
    def __init__(self, crawler: Crawler, policy: NetworkPolicy,
                 resolver: GuardedResolver) -> None:
        self.crawler, self.policy, self.resolver = crawler, policy, resolver
        self.refusals = 0
        crawler.signals.connect(self._scheduled, signals.request_scheduled)

    def _scheduled(self, request: Request, spider: Any = None) -> None:
        """A start request's host is trusted as soon as it is scheduled: before robots.txt
        (order 100, ahead of this middleware) fetches that host's rules. Single-node mode
        (distributed mode trusts a seed's host when a worker claims it)."""
        if request.meta.get("is_start_request"):
            TRUSTED.trust_local(urlparse_cached(request).hostname or "")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from twisted.internet import reactor

        settings = crawler.settings
        policy = NetworkPolicy.from_settings(settings)
        cache = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        return cls(crawler, policy, install(reactor, policy, cache,
                                            settings.getfloat("DNS_TIMEOUT")))

    async def process_request(self, request: Request) -> Request | None:
        host = (urlparse_cached(request).hostname or "").strip("[]")
        if request.meta.get("is_start_request"):
            await TRUSTED.add(host)  # single-node mode: a start request is a seed
        proxy = request.meta.get("proxy")
        if isinstance(proxy, str) and proxy:
            TRUSTED.trust_proxy(proxy)  # connected to through the guarded resolver too
        if address_of(host) is not None:
            network = self.policy.refuses(host, trusted=TRUSTED.knows(host))
            if network is None:
                return None
            seeded = await self._seeded(host)
            if seeded is None:
                return delayed(request, RETRY, dont_filter=True)
            if not seeded:
                raise self._refuse(request, host, str(network))
            return None
        if request.meta.get("proxy"):
            return await self._check_proxied(request, host)
        return None

    async def process_exception(self, request: Request, exception: Exception) -> Any:
        if not isinstance(exception, NO_ADDRESS):
            return None
        host = (urlparse_cached(request).hostname or "").strip("[]")
        refusal = self.resolver.refusal(host)
        if refusal is None:
            return None
        seeded = await self._seeded(host, refusal[0])  # a seed's host another worker took?
        if seeded is None:
            return delayed(request, RETRY, dont_filter=True)
        if seeded:
            return request.replace(dont_filter=True)  # again: the resolver now trusts it
        refused = self._refuse(request, refusal[0], refusal[1])
        outcomes.tell(self.crawler, request, outcomes.DROPPED + REASON)  # the last word
        raise refused

    async def _seeded(self, host: str, address: str = "") -> bool | None:
        """Whether *address* (of *host*) is closed only as a private one and *host* is a
        seed's, as Redis says (this worker may not have taken that seed itself); None when
        Redis cannot say (the request waits in the buffer, neither sent nor dropped)."""
        if not self.policy.private_only(address or host) or TRUSTED.knows(host):
            return False
        try:
            return await TRUSTED.check(host)
        except (RedisError, OSError, TimeoutError) as exc:
            logger.warning("Cannot ask Redis whether %s is a seed's host (its request waits): "
                           "%s", host, exc)
            return None

    async def _check_proxied(self, request: Request, host: str) -> Request | None:
        try:
            addresses = await maybe_deferred_to_future(self.resolver.addresses(host))
        except Exception:  # the proxy fails it with its own error
            return None
        _allowed, refused = self.resolver.allowed(addresses, host)
        if refused is None:
            return None
        seeded = await self._seeded(host, refused[0])
        if seeded is None:
            return delayed(request, RETRY, dont_filter=True)
        if not seeded:
            raise self._refuse(request, *refused)
        return None

    def _refuse(self, request: Request, address: str, network: str) -> BlockedNetwork:
        self.refusals += 1
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value("network_guard/refused")
        if self.refusals <= LOG_FIRST or self.refusals % LOG_EVERY == 0:
            logger.warning("Refused %s (%d so far): %s is in the blocked network %s "
                           "(BLOCKED_NETWORKS, BLOCK_PRIVATE_NETWORKS)", request.url,
                           self.refusals, address, network)
        return BlockedNetwork(f"Blocked network: {address} is in {network}")
