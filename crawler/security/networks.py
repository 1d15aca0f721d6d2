"""Which addresses a crawl may connect to: ``BLOCKED_NETWORKS`` and ``BLOCK_PRIVATE_NETWORKS``.

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
#: RFC 1918, CGNAT, IPv6 unique-local
PRIVATE_NETWORKS = ("127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128", "10.0.0.0/8",
                    "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")


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
    """The networks no request of the crawl may connect to."""

    blocked: tuple[Network, ...]

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Read the two settings; a CIDR that does not parse fails naming the setting."""
        texts = get_list(settings, "BLOCKED_NETWORKS")
        if get_bool(settings, "BLOCK_PRIVATE_NETWORKS"):
            texts = [*texts, *PRIVATE_NETWORKS]
        networks: list[Network] = []
        for text in texts:
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError as exc:
                raise SettingError("BLOCKED_NETWORKS", f"{text!r} is not a network: {exc}") \
                    from exc
        return cls(tuple(dict.fromkeys(networks)))

    def refuses(self, address: str) -> Network | None:
        """The blocked network that holds *address*, or None (a name: None)."""
        ip = address_of(address)
        if ip is None:
            return None
        for network in self.blocked:
            if ip.version == network.version and ip in network:
                return network
        return None
