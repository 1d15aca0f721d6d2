"""The SSRF guard's pure logic: the policy, the resolver's filtering and the middleware's
refusals (a crawl that never reaches a blocked listener is tests/e2e/test_ssrf_guard.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import CannotResolveHostError
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import DNSLookupError

from crawler.addon import DistributedAddon
from crawler.config.readers import SettingError
from crawler.ledger import outcomes
from crawler.middlewares.network import BlockedNetwork, NetworkGuardMiddleware
from crawler.security import GuardedResolver, NetworkPolicy, address_of, install
from crawler.security.limits import DISTRIBUTED_LIMITS
from crawler.security.trusted import TRUSTED


class _Spider(Spider):
    name = "guard"


def _policy(**settings: Any) -> NetworkPolicy:
    return NetworkPolicy.from_settings(get_crawler(_Spider, settings).settings)


@pytest.mark.parametrize(("address", "blocked"), [
    ("169.254.169.254", True), ("[fe80::1%eth0]", True), ("100.100.100.200", True),
    ("fd00:ec2::254", True), ("::ffff:169.254.169.254", True),
    ("127.0.0.1", True), ("10.0.0.5", True), ("::1", True), ("224.0.0.251", True),
    ("93.184.216.34", False), ("example.com", False),
])
def test_the_default_closes_private_networks_and_the_metadata_endpoints(
        address: str, blocked: bool) -> None:
    assert (_policy().refuses(address) is not None) is blocked


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "0.0.0.0", "10.0.0.5",
                                     "172.31.255.255", "192.168.1.1", "100.64.0.1",
                                     "fd12::1", "::ffff:127.0.0.1", "169.254.169.254",
                                     "fe80::2", "239.255.255.250", "ff02::1"])
def test_block_private_networks_closes_loopback_private_cgnat_link_local_ula_multicast(
        address: str) -> None:
    assert _policy(BLOCK_PRIVATE_NETWORKS=True).refuses(address) is not None
    assert _policy(BLOCK_PRIVATE_NETWORKS=True).refuses("93.184.216.34") is None


def test_a_seeds_host_and_allowed_networks_open_private_ones_but_never_blocked_ones() -> None:
    policy = _policy()
    assert policy.refuses("10.1.2.3", trusted=True) is None
    assert str(policy.refuses("169.254.169.254", trusted=True)) == "169.254.0.0/16"
    assert policy.private_only("10.1.2.3") and not policy.private_only("169.254.169.254")
    allowed = _policy(ALLOWED_NETWORKS=["10.1.0.0/16", "169.254.169.254/32"])
    assert allowed.refuses("10.1.2.3") is None
    assert allowed.refuses("10.2.0.1") is not None
    assert allowed.refuses("169.254.169.254") is not None  # BLOCKED_NETWORKS wins
    opened = _policy(BLOCK_PRIVATE_NETWORKS=False)
    assert opened.refuses("127.0.0.1") is None and opened.refuses("169.254.169.254")
    with pytest.raises(SettingError, match="ALLOWED_NETWORKS"):
        _policy(ALLOWED_NETWORKS=["10.0.0.0/99"])


def test_a_network_that_does_not_parse_names_the_setting() -> None:
    with pytest.raises(SettingError, match="BLOCKED_NETWORKS"):
        _policy(BLOCKED_NETWORKS=["10.0.0.0/33"])
    assert _policy(BLOCKED_NETWORKS="127.0.0.0/8,::1").refuses("::1") is not None


def test_address_of_reads_brackets_zones_and_mapped_addresses() -> None:
    assert str(address_of("[::1]")) == "::1"
    assert str(address_of("fe80::1%eth0")) == "fe80::1"
    assert str(address_of("::ffff:10.1.2.3")) == "10.1.2.3"
    assert address_of("localhost") is None


class _Receiver:
    def __init__(self) -> None:
        self.addresses: list[Any] = []
        self.began = self.complete = False

    def resolutionBegan(self, resolution: Any) -> None:
        self.began = True

    def addressResolved(self, address: Any) -> None:
        self.addresses.append(address)

    def resolutionComplete(self) -> None:
        self.complete = True


def _resolver(**settings: Any) -> GuardedResolver:
    """Private networks open: the tests below close 127.0.0.0/8 as a blocked network."""
    policy = _policy(BLOCKED_NETWORKS=["127.0.0.0/8", "169.254.0.0/16"],
                     **{"BLOCK_PRIVATE_NETWORKS": False, **settings})
    resolver = GuardedResolver(reactor=None, policy=policy, cache_size=10, timeout=1.0)
    resolver._cache["rebound.test"] = ["127.0.0.1", "169.254.169.254"]
    resolver._cache["mixed.test"] = ["127.0.0.2", "::1", "192.0.2.1"]
    return resolver


def test_the_resolver_hands_out_only_allowed_addresses() -> None:
    resolver, receiver = _resolver(), _Receiver()
    resolver.resolveHostName(receiver, "mixed.test", 80)
    assert receiver.began and receiver.complete
    assert receiver.addresses == [IPv6Address("TCP", "::1", 80),
                                  IPv4Address("TCP", "192.0.2.1", 80)]
    assert resolver.refusal("mixed.test") is None
    only_v4 = _Receiver()
    resolver.resolveHostName(only_v4, "mixed.test", 80, addressTypes=[IPv4Address])
    assert only_v4.addresses == [IPv4Address("TCP", "192.0.2.1", 80)]


def test_a_host_left_with_no_address_is_remembered_as_refused() -> None:
    resolver, receiver = _resolver(), _Receiver()
    resolver.resolveHostName(receiver, "rebound.test", 80)
    assert receiver.addresses == [] and receiver.complete  # the connection gets DNSLookupError
    assert resolver.refusal("rebound.test") == ("169.254.169.254", "169.254.0.0/16")
    literal = _Receiver()
    resolver.resolveHostName(literal, "[127.0.0.9]", 80)
    assert literal.addresses == [] and resolver.refusal("127.0.0.9") is not None


class _Reactor:
    def __init__(self) -> None:
        self.nameResolver: Any = object()
        self.resolver: Any = "simple"

    def installNameResolver(self, resolver: Any) -> None:
        self.nameResolver, self.resolver = resolver, "wrapped"


def test_install_guards_the_name_resolver_once_and_leaves_the_proxy_resolver() -> None:
    reactor = _Reactor()
    first = install(reactor, _policy(), 10, 1.0)
    assert reactor.nameResolver is first and reactor.resolver == "simple"
    assert install(reactor, _policy(BLOCK_PRIVATE_NETWORKS=True), 10, 1.0) is first


def _middleware(**settings: Any) -> tuple[NetworkGuardMiddleware, list[str], Any]:
    crawler = get_crawler(_Spider, settings)
    crawler.stats.open_spider()
    told: list[str] = []
    crawler.signals.connect(lambda request, outcome: told.append(outcome),
                            signal=outcomes.OUTCOME, weak=False)
    resolver = _resolver()
    return NetworkGuardMiddleware(crawler, resolver.policy, resolver), told, crawler


def _request(middleware: NetworkGuardMiddleware, request: Request) -> Any:
    return asyncio.run(middleware.process_request(request))


def _exception(middleware: NetworkGuardMiddleware, request: Request, exc: Exception) -> Any:
    return asyncio.run(middleware.process_exception(request, exc))


def test_an_ip_literal_of_a_blocked_network_is_refused_before_it_is_sent() -> None:
    middleware, _told, crawler = _middleware()
    with pytest.raises(BlockedNetwork, match=r"127\.0\.0\.1 is in 127\.0\.0\.0/8") as refused:
        _request(middleware, Request("http://127.0.0.1:6379/"))
    assert outcomes.of_exception(refused.value) == "dropped/blocked_network"
    with pytest.raises(BlockedNetwork):
        _request(middleware, Request("http://[::ffff:169.254.169.254]/latest"))
    assert _request(middleware, Request("http://[::1]:8080/")) is None
    assert _request(middleware, Request("http://mixed.test/")) is None
    assert crawler.stats.get_value("network_guard/refused") == 2


def test_a_private_address_is_refused_but_to_a_seeds_host() -> None:
    crawler = get_crawler(_Spider, {})
    crawler.stats.open_spider()
    policy = _policy()  # the defaults: private networks closed
    resolver = GuardedResolver(reactor=None, policy=policy, cache_size=10, timeout=1.0)
    middleware = NetworkGuardMiddleware(crawler, policy, resolver)
    with pytest.raises(BlockedNetwork, match=r"10\.9\.9\.9"):
        _request(middleware, Request("http://10.9.9.9/admin"))
    seed = Request("http://10.9.9.8/", meta={"is_start_request": True})
    assert _request(middleware, seed) is None  # a seed: its host is trusted from now on
    assert _request(middleware, Request("http://10.9.9.8/page")) is None
    resolver._cache["intranet.test"] = ["10.9.9.7"]
    receiver = _Receiver()
    resolver.resolveHostName(receiver, "intranet.test", 80)
    assert receiver.addresses == []
    asyncio.run(TRUSTED.add("intranet.test"))
    resolver.resolveHostName(trusted := _Receiver(), "intranet.test", 80)
    assert trusted.addresses == [IPv4Address("TCP", "10.9.9.7", 80)]


def test_a_proxied_request_is_refused_when_any_address_of_its_host_is_blocked() -> None:
    middleware, _told, _crawler = _middleware()
    proxied = Request("http://mixed.test/", meta={"proxy": "http://[::1]:3128"})
    with pytest.raises(BlockedNetwork, match=r"127\.0\.0\.2"):
        _request(middleware, proxied)
    middleware.resolver._cache["public.test"] = ["192.0.2.7"]
    fine = Request("http://public.test/", meta={"proxy": "http://[::1]:3128"})
    assert _request(middleware, fine) is None


def test_a_lookup_the_guard_emptied_becomes_a_refusal_with_the_ledger_reason() -> None:
    middleware, told, _crawler = _middleware()
    middleware.resolver.resolveHostName(_Receiver(), "rebound.test", 80)
    with pytest.raises(BlockedNetwork):
        _exception(middleware, Request("http://rebound.test/"), DNSLookupError("x"))
    assert told == ["dropped/blocked_network"]
    with pytest.raises(BlockedNetwork):  # what Scrapy 2.19's download handlers raise
        _exception(middleware, Request("http://rebound.test/"), CannotResolveHostError("x"))
    assert told == ["dropped/blocked_network"] * 2
    # a name that really does not resolve stays a failure for the retry middleware
    assert _exception(middleware, Request("http://gone.test/"), DNSLookupError("x")) is None
    assert told == ["dropped/blocked_network"] * 2


SERVICES = {"KAFKA_BOOTSTRAP_SERVERS": "k:9092", "REDIS_URL": "redis://r",
            "MONGO_URI": "mongodb://m"}


def test_distributed_mode_bounds_scrapys_limits_and_a_project_value_wins() -> None:
    settings = Settings(SERVICES)
    DistributedAddon().update_settings(settings)
    for name, value in DISTRIBUTED_LIMITS.items():
        assert settings[name] == value, name
    assert "crawler.middlewares.network.NetworkGuardMiddleware" in \
        settings.getdict("DOWNLOADER_MIDDLEWARES")
    project = Settings({**SERVICES, "DEPTH_LIMIT": 3, "ROBOTSTXT_OBEY": False})
    DistributedAddon().update_settings(project)
    assert project.getint("DEPTH_LIMIT") == 3
    assert project.getbool("ROBOTSTXT_OBEY") is False
    local = Settings({})
    DistributedAddon().update_settings(local)  # one spider on one machine: Scrapy's limits
    assert local.getint("DEPTH_LIMIT") == 0
    assert "crawler.middlewares.network.NetworkGuardMiddleware" in \
        local.getdict("DOWNLOADER_MIDDLEWARES")


def test_the_documented_limits_are_these_numbers() -> None:
    """docs/security.md's numbers, as literals: the test above reads them back from the code
    that sets them, which would pass whatever that code said."""
    from crawler import settings as project

    settings = Settings(SERVICES)
    DistributedAddon().update_settings(settings)
    assert settings.getint("DOWNLOAD_MAXSIZE") == 33_554_432  # 32 MiB
    assert settings.getint("DOWNLOAD_WARNSIZE") == 4_194_304  # 4 MiB
    assert settings.getint("REDIRECT_MAX_TIMES") == 10
    assert settings.getint("DEPTH_LIMIT") == 32
    assert settings.getint("URLLENGTH_LIMIT") == 2083
    assert settings.getbool("ROBOTSTXT_OBEY") is True
    assert project.DOWNLOAD_TIMEOUT == 30  # the project's; Scrapy's is 180
