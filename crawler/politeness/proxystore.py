"""Where a proxy pool's members and health live: in the process, or shared in Redis.

:class:`RedisProxyStore` keeps, per crawl (``{<CRAWL_ID>}`` is the cluster hash tag):

* ``{<CRAWL_ID>}:proxies`` — a set of proxy addresses, the live membership that
  operators edit with ``SADD`` / ``SREM``;
* ``{<CRAWL_ID>}:proxy:seeded`` — the addresses the settings have ever added, so a
  worker starting later does not bring back a proxy an operator removed;
* ``{<CRAWL_ID>}:proxy:health`` — a hash: credential-free proxy id -> JSON
  :class:`~crawler.politeness.proxypool.Health`;
* ``{<CRAWL_ID>}:proxy:none`` — the tombstone: while it exists, a missing members set
  means "no proxy, on purpose".

Redis has no empty set: removing the last member deletes the key, as do ``FLUSHALL``,
a restart without persistence and an eviction. So a members set that is missing while
this worker knows proxies is taken for lost state, unless the tombstone says otherwise:
the worker keeps its last known set, writes it back (once, atomically, if the set is
still missing) and logs it once. An operator empties the pool with ``SET
{<CRAWL_ID>}:proxy:none 1`` first, then ``DEL`` (or ``SREM``); ``SADD`` fills it again.

Each worker applies its observations to its local view at once and queues them. A
sync (every ``PROXY_REFRESH_INTERVAL`` seconds, and at once after a ban) is one Lua
call: it writes every record this worker changed, compare-and-set on the value the
worker last read, and returns the members and all records. A record another worker
changed meanwhile is re-computed from the fresh value and written again. So every
observation of every worker is applied exactly once to the shared record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Self

from redis.exceptions import RedisError

from crawler.config import readers as config
from crawler.config.keys import CrawlKeys
from crawler.config.readers import SettingError
from crawler.connections import clients as connection
from crawler.connections import shared
from crawler.connections.records import UNREADABLE
from crawler.politeness.proxyconfig import pool_policy
from crawler.politeness.proxypool import Health, Outcome, Proxy, ProxyPool, apply, parse_proxy

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
MAX_PENDING = 10_000  # observations kept for the next sync while Redis is unreachable
CAS_ATTEMPTS = 5

_SEED = """
local added = 0
for i = 1, #ARGV do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    added = added + redis.call('SADD', KEYS[1], ARGV[i])
  end
end
return added
"""
_SYNC = """
local conflicts = {}
for i = 1, #ARGV, 3 do
  local old = redis.call('HGET', KEYS[2], ARGV[i]) or ''
  if old == ARGV[i + 1] then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
  else
    table.insert(conflicts, ARGV[i])
  end
end
return {conflicts, redis.call('SMEMBERS', KEYS[1]), redis.call('HGETALL', KEYS[2]),
        redis.call('EXISTS', KEYS[3])}
"""
# KEYS[1]: members, KEYS[2]: tombstone; ARGV: the last known members
_RESTORE = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
for i = 1, #ARGV do redis.call('SADD', KEYS[1], ARGV[i]) end
return #ARGV
"""

Observation = tuple[str, Outcome, float | None, float]  # id, outcome, latency, time


def parse_members(addresses: Iterable[str]) -> tuple[list[Proxy], int]:
    """The proxies among *addresses*, and how many were not proxy addresses."""
    proxies, bad = [], 0
    for address in addresses:
        try:
            proxies.append(parse_proxy(address))
        except ValueError:
            bad += 1
    return proxies, bad


class ProxyStore:
    """Interface of a store; this base keeps everything in the process (one worker).

    A store owns the worker's :class:`~crawler.politeness.proxypool.ProxyPool` view. The
    middleware calls :meth:`open`, :meth:`observe` per outcome, :meth:`sync`
    periodically and after bans, and :meth:`close`.
    """

    shared: ClassVar[bool] = False

    def __init__(self, pool: ProxyPool) -> None:
        self.pool = pool

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(ProxyPool(pool_policy(crawler.settings)))

    async def open(self, seeds: Sequence[Proxy]) -> None:
        self.pool.set_proxies(seeds)

    def observe(self, proxy_id: str, outcome: Outcome, latency: float | None = None) -> Health:
        return self.pool.observe(proxy_id, outcome, latency)

    def count_host(self, cause: str, host: str) -> None:
        """One more failure of *host* seen through the pool, blamed on *cause* (kept for the
        crawl's shared count; in the process the stats have it already)."""

    async def sync(self) -> None:
        """Exchange observations with the shared state (nothing to do in the process)."""

    async def close(self) -> None:
        """Flush what is pending."""


class RedisProxyStore(ProxyStore):
    """Members and health shared by every worker of a crawl, in Redis."""

    shared = True

    def __init__(self, pool: ProxyPool, client: aioredis.Redis | None, crawl_id: str, *,
                 redis_url: str = "", connect: Callable[[], aioredis.Redis] | None = None,
                 release: Callable[[aioredis.Redis], Awaitable[None]] | None = None) -> None:
        """*client*, or ``None`` and *connect*, which :meth:`open` calls for it; *release*
        gives it back at :meth:`close` (by default the store closes it)."""
        super().__init__(pool)
        self.redis_url = redis_url
        self._connect, self._release = connect, release
        keys = CrawlKeys(crawl_id)
        self.members_key = keys.proxies
        self.seeded_key = keys.proxy_seeded
        self.health_key = keys.proxy_health
        self.hosts_key = keys.proxy_hosts
        self.tombstone_key = keys.proxy_tombstone
        self.client: aioredis.Redis | None = None
        if client is not None:
            self._use(client)
        self.host_counts: dict[str, int] = {}  # "<cause>:<host>" -> failures, not yet shared
        self.lost = 0  # times the members set was found lost and the last known set kept
        self._lost_now = False
        self._pending: list[Observation] = []
        self._raw: dict[str, str] = {}  # the records as last read
        self._bad_members = 0
        self._lock = asyncio.Lock()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        url = config.get_str(settings, "REDIS_URL")
        if not url:
            raise SettingError("REDIS_URL", "RedisProxyStore (PROXY_STORE) needs a Redis URL")
        assert crawler.spidercls is not None
        crawl = config.crawl_id(settings, crawler.spidercls.name)
        return cls(ProxyPool(pool_policy(settings)), None, crawl, redis_url=url,
                   connect=partial(shared.redis_for, crawler),
                   release=partial(shared.release_redis, crawler))

    def _use(self, client: aioredis.Redis) -> None:
        self.client = client
        self._seed_script = client.register_script(_SEED)
        self._sync_script = client.register_script(_SYNC)
        self._restore_script = client.register_script(_RESTORE)

    async def open(self, seeds: Sequence[Proxy]) -> None:
        if self.client is None and self._connect is not None:
            self._use(self._connect())
        assert self.client is not None, "RedisProxyStore needs a client or connect"
        await connection.check_redis(self.client, self.redis_url)
        added = await self._seed_script(keys=[self.members_key, self.seeded_key],
                                        args=[p.url for p in seeds])
        if added:
            logger.info("Added %d proxies of the settings to %s", added, self.members_key)
        await self.sync()

    def count_host(self, cause: str, host: str) -> None:
        field = f"{cause}:{host}"
        if field in self.host_counts or len(self.host_counts) < MAX_PENDING:
            self.host_counts[field] = self.host_counts.get(field, 0) + 1

    def observe(self, proxy_id: str, outcome: Outcome, latency: float | None = None) -> Health:
        now = self.pool.clock()
        self._pending.append((proxy_id, outcome, latency, now))
        del self._pending[:-MAX_PENDING]
        return self.pool.observe(proxy_id, outcome, latency, at=now)

    async def sync(self) -> None:
        """Write this worker's observations, read everyone's; RedisError if unreachable."""
        async with self._lock:
            batch, self._pending = self._pending, []
            try:
                members, emptied = await self._exchange(batch)
                if not members and not emptied and self.pool.proxies:
                    members = await self._keep_lost()
                else:
                    self._lost_now = False
            except BaseException:
                self._pending[:0] = batch
                del self._pending[:-MAX_PENDING]
                raise
            self.pool.load({i: _health(raw) for i, raw in self._raw.items()})
            self._set_members(members)
            for proxy_id, outcome, latency, at in self._pending:  # made during the round trip
                self.pool.observe(proxy_id, outcome, latency, at=at)
            await self._flush_hosts()

    async def _flush_hosts(self) -> None:
        """Add this worker's per-host failure counts to the crawl's (one round trip)."""
        counts, self.host_counts = self.host_counts, {}
        if not counts or self.client is None:
            return
        try:
            async with self.client.pipeline(transaction=True) as pipe:  # all or none
                for field, count in counts.items():
                    pipe.hincrby(self.hosts_key, field, count)
                await pipe.execute()
        except BaseException:
            for field, count in counts.items():  # counted again at the next sync
                self.host_counts[field] = self.host_counts.get(field, 0) + count
            raise

    async def _keep_lost(self) -> list[str]:
        """The members set is missing and no tombstone says why: keep the last known set."""
        known = sorted(p.url for p in self.pool.proxies.values())
        restored = await self._restore_script(keys=[self.members_key, self.tombstone_key],
                                              args=known)
        if not self._lost_now:
            self._lost_now = True
            self.lost += 1
            logger.warning(
                "The proxy set %s is missing from Redis (FLUSHALL, a restart without "
                "persistence, an eviction or a DEL?): keeping the last known %d proxies%s. "
                "To empty the pool on purpose, SET %s 1 first", self.members_key, len(known),
                " and writing them back" if restored else "", self.tombstone_key)
        return known

    def _set_members(self, addresses: list[str]) -> None:
        proxies, bad = parse_members(addresses)
        if bad != self._bad_members:  # the addresses may hold passwords: count them only
            self._bad_members = bad
            logger.warning("%d members of %s are not proxy addresses and are ignored",
                           bad, self.members_key)
        self.pool.set_proxies(proxies)

    async def close(self) -> None:
        if self.client is None:  # never opened, or closed already
            return
        try:
            await self.sync()
        except (RedisError, OSError) as exc:
            logger.warning("Could not write the last proxy observations to Redis: %s", exc)
        finally:
            await self._give_back()

    async def _give_back(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        await (client.aclose() if self._release is None else self._release(client))

    async def _exchange(self, batch: list[Observation]) -> tuple[list[str], bool]:
        """Write *batch*, read everything; returns the members and whether the
        tombstone exists."""
        todo: dict[str, list[Observation]] = {}
        for observation in batch:
            todo.setdefault(observation[0], []).append(observation)
        for _attempt in range(CAS_ATTEMPTS):
            args = []
            for proxy_id, observations in todo.items():
                old = self._raw.get(proxy_id, "")
                args += [proxy_id, old, self._updated(old, observations).to_json()]
            conflicts, members, flat, emptied = await self._sync_script(
                keys=[self.members_key, self.health_key, self.tombstone_key], args=args)
            self._raw = {_text(k): _text(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}
            todo = {i: todo[i] for i in map(_text, conflicts)}
            if not todo:
                break
        if todo:  # lost every race: keep them for the next sync
            self._pending[:0] = [o for observations in todo.values() for o in observations]
        return [_text(m) for m in members], bool(emptied)

    def _updated(self, old: str, observations: list[Observation]) -> Health:
        health = _health(old)
        for _id, outcome, latency, at in observations:
            health = apply(health, outcome, latency, at, self.pool.policy)
        return health


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _health(raw: str) -> Health:
    if not raw:
        return Health()
    try:
        return Health.from_json(raw)
    except UNREADABLE:
        logger.warning("Unreadable proxy health record %r: starting afresh", raw[:200])
        return Health()
