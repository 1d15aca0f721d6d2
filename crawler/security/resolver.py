"""The reactor's name resolver, with the addresses of blocked networks taken out.

Twisted's ``HostnameEndpoint`` (every direct HTTP and HTTPS download) asks the reactor's
name resolver for a host's addresses and connects to those it gets, so the check sits at
the one point where an address becomes a connection: a name that resolved to a public
address when a link was followed and to ``169.254.169.254`` when it is fetched (DNS
rebinding) still cannot reach it. A host whose every address is refused gets none, the
connection fails with ``DNSLookupError`` and :class:`~crawler.middlewares.network.
NetworkGuardMiddleware` turns that into a refusal with its reason (:meth:`refusal`).

It resolves IPv4 and IPv6 (``getaddrinfo`` in the reactor's thread pool), caches the
addresses it got (``DNSCACHE_SIZE``; the check runs on every use, so a cached answer cannot
skip it) and bounds a lookup by ``DNS_TIMEOUT``. The reactor's simple resolver, which
``connectTCP`` uses to reach a proxy the operator configured, is left as it was.
"""

from __future__ import annotations

import logging
import socket
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IAddress, IHostnameResolver, IResolutionReceiver
from twisted.internet.threads import deferToThreadPool
from zope.interface import implementer

from crawler.security.networks import NetworkPolicy, address_of
from crawler.security.trusted import TRUSTED

logger = logging.getLogger(__name__)
REFUSALS_KEPT = 1000  # hosts whose last refusal is remembered for the middleware


@implementer(IHostnameResolver)
class GuardedResolver:
    """An ``IHostnameResolver`` that never hands out an address of a blocked network."""

    def __init__(self, reactor: Any, policy: NetworkPolicy, cache_size: int,
                 timeout: float) -> None:
        self.reactor, self.policy = reactor, policy
        self.cache_size, self.timeout = cache_size, timeout
        self._cache: OrderedDict[str, list[str]] = OrderedDict()
        self._refusals: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def resolveHostName(  # Twisted's interface
        self, resolutionReceiver: IResolutionReceiver, hostName: str, portNumber: int = 0,
        addressTypes: Sequence[type[IAddress]] | None = None, transportSemantics: str = "TCP",
    ) -> Any:
        receiver: Any = resolutionReceiver  # a zope interface: typed by hand below
        receiver.resolutionBegan(_Resolution(hostName))
        found = self.addresses(hostName)
        found.addCallback(self._deliver, receiver, hostName, portNumber, addressTypes)
        found.addErrback(lambda failure: logger.debug("Lookup of %s failed: %s", hostName,
                                                      failure.getErrorMessage()))
        found.addBoth(lambda _: receiver.resolutionComplete())
        return receiver

    def addresses(self, host: str) -> Deferred[list[str]]:
        """Every address *host* resolves to, blocked or not (cached)."""
        if address_of(host) is not None:
            return succeed([host.strip("[]")])
        cached = self._cache.get(host)
        if cached is not None:
            self._cache.move_to_end(host)
            return succeed(cached)
        found: Deferred[Any] = deferToThreadPool(
            self.reactor, self.reactor.getThreadPool(), socket.getaddrinfo, host, 0,
            type=socket.SOCK_STREAM)
        if self.timeout > 0:
            found.addTimeout(self.timeout, self.reactor)
        return found.addCallback(self._remember, host)

    def cached(self, host: str) -> list[str] | None:
        """*host*'s addresses from its last lookup, if it is still cached (no lookup)."""
        return self._cache.get(host)

    def allowed(self, addresses: list[str], host: str = ""
                ) -> tuple[list[str], tuple[str, str] | None]:
        """The allowed ones of *host*'s *addresses*, and ``(address, network)`` of one
        refused (a seed's host may reach private networks: :mod:`crawler.security.trusted`)."""
        allowed, refused = [], None
        trusted = TRUSTED.knows(host)
        for address in addresses:
            network = self.policy.refuses(address, trusted=trusted)
            if network is None:
                allowed.append(address)
            else:
                refused = (address, str(network))
        return allowed, refused

    def refusal(self, host: str) -> tuple[str, str] | None:
        """``(address, network)`` refused when *host*'s last lookup left no address."""
        return self._refusals.get(host.strip("[]"))

    def _refused_all(self, host: str, refused: tuple[str, str] | None) -> None:
        if refused is None:
            self._refusals.pop(host, None)
            return
        self._refusals[host] = refused
        self._refusals.move_to_end(host)
        if len(self._refusals) > REFUSALS_KEPT:
            self._refusals.popitem(last=False)

    def _remember(self, infos: list[Any], host: str) -> list[str]:
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if self.cache_size > 0:
            self._cache[host] = addresses
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return addresses

    def _deliver(self, addresses: list[str], receiver: Any, host: str,
                 port: int, types: Sequence[type[IAddress]] | None) -> None:
        allowed, refused = self.allowed(addresses, host)
        self._refused_all(host.strip("[]"), None if allowed else refused)
        for address in allowed:
            kind = IPv6Address if ":" in address else IPv4Address
            if types is None or kind in types:
                receiver.addressResolved(kind("TCP", address, port))


class _Resolution:
    def __init__(self, name: str) -> None:
        self.name = name

    def cancel(self) -> None:  # an IHostResolution; a lookup in a thread cannot be stopped
        pass


def install(reactor: Any, policy: NetworkPolicy, cache_size: int,
            timeout: float) -> GuardedResolver:
    """The reactor's :class:`GuardedResolver`, installed on the first call.

    A second crawler of the process gets the same one; a different policy of its own is
    still applied by its middleware to IP literals and proxied requests, with a warning.
    """
    current = reactor.nameResolver
    if isinstance(current, GuardedResolver):
        if current.policy != policy:
            logger.warning("A second crawler of this process has other BLOCKED_NETWORKS; "
                           "direct connections keep the first crawler's")
        return current
    simple = reactor.resolver  # connectTCP to a configured proxy
    guard = GuardedResolver(reactor, policy, cache_size, timeout)
    reactor.installNameResolver(guard)
    reactor.resolver = simple
    return guard
