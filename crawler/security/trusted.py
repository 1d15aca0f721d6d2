"""The hosts of the operator's own seeds, which private networks stay open to.

With ``BLOCK_PRIVATE_NETWORKS`` (on) a link or a redirect to a private address is refused,
unless its host is the host of a seed: an intranet crawl works by seeding it. A worker that
takes a seed (:mod:`crawler.frontier.seeding`; a start request in single-node mode) records
its host here and, in distributed mode, in the Redis set ``{<CRAWL_ID>}:seed-hosts`` before
the seed goes on, so every worker can check a host its own seeds did not name
(:meth:`TrustedHosts.check`, one ``SISMEMBER`` per refusal, a yes kept). The set is
process-wide, as the reactor's resolver is (one crawl per worker process).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from crawler.config.keys import CrawlKeys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

logger = logging.getLogger(__name__)


class TrustedHosts:
    def __init__(self) -> None:
        self.local: set[str] = set()
        self._client: aioredis.Redis | None = None
        self._key = ""

    def bind(self, client: aioredis.Redis | None, crawl_id: str) -> None:
        """Share the hosts through *client* (distributed mode); None: this process only."""
        self._client, self._key = client, CrawlKeys(crawl_id).seed_hosts

    def knows(self, host: str) -> bool:
        return _normal(host) in self.local

    def trust_local(self, host: str) -> None:
        """Trust *host* in this worker only (a start request of its own spider)."""
        if host:
            self.local.add(_normal(host.strip("[]")))

    def trust_proxy(self, proxy_url: str) -> None:
        """A proxy's host (the operator's, or the spider's choice): its connection goes
        through the guarded resolver too, which must not refuse it (this worker only)."""
        try:
            host = urlsplit(proxy_url).hostname or ""
        except ValueError:
            return
        if host:
            self.local.add(_normal(host))

    async def add(self, host: str) -> None:
        """Trust *host* (a seed's); Redis errors propagate: the seed waits and is retried."""
        host = _normal(host)
        if self._client is not None and host not in self.local:
            await self._client.sadd(self._key, host)
        self.local.add(host)

    async def check(self, host: str) -> bool:
        """Whether *host* is trusted, asking Redis if this worker does not know it yet."""
        host = _normal(host)
        if host in self.local:
            return True
        if self._client is None or not await self._client.sismember(self._key, host):
            return False
        self.local.add(host)
        return True


    async def write_back(self) -> None:
        """Write every host this worker trusts back to Redis (one ``SADD``): a Redis that
        came back empty must not make the next worker refuse a seed's host. Every
        ``REFRESH_INTERVAL`` with the crawl scope; an error waits for the next turn."""
        if self._client is None or not self.local:
            return
        try:
            await self._client.sadd(self._key, *sorted(self.local))
        except (RedisError, OSError, TimeoutError) as exc:
            logger.debug("Cannot write the seeds' hosts back: %s", exc)


def _normal(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


TRUSTED = TrustedHosts()
