"""Which addresses a crawl may connect to: ``BLOCKED_NETWORKS``, ``BLOCK_PRIVATE_NETWORKS``
(on: closed to any host but the operator's seeds') and ``ALLOWED_NETWORKS``.

A crawler fetches URLs that other systems chose (seeds from any Kafka client, links and
redirects from any page), so each is a way to make it fetch from inside its own network: the
cloud metadata endpoint, the crawl's Redis, an admin page on localhost. ``docs/security.md``
has the threat model.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Self

from scrapy.settings import BaseSettings

from crawler.config.readers import SettingError, get_bool, get_list

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# BLOCKED_NETWORKS's default (crawler.config.defaults): link-local, which holds the metadata
# endpoint of AWS, GCP, Azure and OpenStack (169.254.169.254), and the metadata addresses
# outside it (Alibaba's 100.100.100.200, AWS's IPv6 fd00:ec2::254).
#: what BLOCK_PRIVATE_NETWORKS adds: loopback, "this host" (0.0.0.0 reaches localhost),
#: RFC 1918, CGNAT, link-local, IPv6 unique-local, multicast
PRIVATE_NETWORKS = ("127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128", "10.0.0.0/8",
                    "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
                    "fe80::/10", "fc00::/7", "224.0.0.0/4", "ff00::/8")


def address_of(text: str) -> Address | None:
    """*text* as an IP address (an IPv4-mapped IPv6 one as its IPv4), or None for a name."""
    try:
        address = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class NetworkPolicy:
    """The networks no request of the crawl may connect to: *blocked* ones whatever the host,
    *private* ones unless the host is trusted (a seed's) or the address is in *allowed*."""

    blocked: tuple[Network, ...]
    private: tuple[Network, ...] = ()
    allowed: tuple[Network, ...] = ()

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Read the settings; a CIDR that does not parse fails naming its setting."""
        private = PRIVATE_NETWORKS if get_bool(settings, "BLOCK_PRIVATE_NETWORKS") else ()
        return cls(_networks("BLOCKED_NETWORKS", get_list(settings, "BLOCKED_NETWORKS")),
                   _networks("BLOCK_PRIVATE_NETWORKS", list(private)),
                   _networks("ALLOWED_NETWORKS", get_list(settings, "ALLOWED_NETWORKS")))

    def refuses(self, address: str, *, trusted: bool = False) -> Network | None:
        """The network that holds *address* and is closed to it, or None (a name: None).
        *trusted*: the host is one of the operator's seeds (private networks are open)."""
        ip = address_of(address)
        if ip is None:
            return None
        blocked = _holder(ip, self.blocked)
        if blocked is not None or trusted or _holder(ip, self.allowed) is not None:
            return blocked
        return _holder(ip, self.private)

    def private_only(self, address: str) -> bool:
        """Whether *address* is closed only as a private one (a seed's host may reach it)."""
        ip = address_of(address)
        return ip is not None and _holder(ip, self.blocked) is None \
            and _holder(ip, self.private) is not None


def _holder(ip: Address, networks: tuple[Network, ...]) -> Network | None:
    for network in networks:
        if ip.version == network.version and ip in network:
            return network
    return None


def _networks(name: str, texts: list[str]) -> tuple[Network, ...]:
    networks: list[Network] = []
    for text in texts:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise SettingError(name, f"{text!r} is not a network: {exc}") from exc
    return tuple(dict.fromkeys(networks))
