"""The SSRF guard: no request of a crawl reaches a blocked network (``docs/security.md``)."""

from crawler.security.networks import (
    PRIVATE_NETWORKS,
    NetworkPolicy,
    address_of,
)
from crawler.security.resolver import GuardedResolver, install

__all__ = ["PRIVATE_NETWORKS", "GuardedResolver", "NetworkPolicy",
           "address_of", "install"]
