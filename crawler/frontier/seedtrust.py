"""Which seed records the crawl's own workers published: an HMAC in a record header.

A worker publishes its spider's start requests to ``<CRAWL_ID>.seeds`` as full request
records (callbacks, ``cb_kwargs``, any JSON meta). Any Kafka client that can write that
topic could write the same JSON, so the record's shape cannot be what grants trust: each
record a worker sends there carries ``HMAC-SHA256(key, value)`` in the header
:data:`SIGNATURE_HEADER`, with the crawl's key, kept in Redis (``{<CRAWL_ID>}:seedkey``).
The first worker creates it, every worker reads it when it opens. A record whose signature
verifies is decoded in full; any other is an external seed, held to
:class:`~crawler.frontier.seedrule.SeedRule`. The key is never logged nor put in stats.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from enum import Enum
from typing import Any

from crawler.config.keys import CrawlKeys

logger = logging.getLogger(__name__)
SIGNATURE_HEADER = "crawler-seed-signature"
_CONTEXT = b"crawler seed record v1\x00"  # what the MAC is of: no other use of the key
KEY_BYTES = 32

# KEYS[1]: the crawl's seed key; ARGV[1]: a new key. Returns the key, creating it if there is
# none, and keeps it (a finished crawl's keys expire: a new run makes them persistent again)
_KEY = """
local key = redis.call('GET', KEYS[1])
if key then
  redis.call('PERSIST', KEYS[1])
  return key
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"""

Header = tuple[str, bytes]


class Verdict(Enum):
    SIGNED = "signed"  # by a worker of this crawl
    UNSIGNED = "unsigned"
    BAD = "bad"  # a signature that does not verify: another key, or a forgery


class SeedSigner:
    """Signs and checks seed records with the crawl's key (which its ``repr`` hides)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a seed key needs 16 bytes at least")
        self._key = key

    def __repr__(self) -> str:
        return "SeedSigner(key=***)"

    def _mac(self, value: bytes) -> bytes:
        return hmac.new(self._key, _CONTEXT + value, hashlib.sha256).hexdigest().encode()

    def headers(self, value: bytes) -> list[Header]:
        """The record headers that sign *value*."""
        return [(SIGNATURE_HEADER, self._mac(value))]

    def verdict(self, value: bytes, headers: Sequence[Header]) -> Verdict:
        """Whether the record (*value*, *headers*) was signed with this crawl's key."""
        given = [v for name, v in headers if name == SIGNATURE_HEADER]
        if not given:
            return Verdict.UNSIGNED
        mac = self._mac(value)
        signed = any(isinstance(v, bytes) and hmac.compare_digest(v, mac) for v in given)
        return Verdict.SIGNED if signed else Verdict.BAD


async def crawl_seed_key(client: Any, crawl_id: str, proposed: bytes | None = None) -> bytes:
    """The crawl's seed key from Redis (*client*: ``redis.asyncio.Redis``), created by the
    first worker to ask: a new random one, or *proposed* (the key a repair restores)."""
    script = client.register_script(_KEY)
    new = proposed.decode() if proposed is not None else secrets.token_hex(KEY_BYTES)
    key = await script(keys=[CrawlKeys(crawl_id).seed_key], args=[new])
    return key.encode() if isinstance(key, str) else bytes(key)
