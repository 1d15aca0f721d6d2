"""A scrapy-redis dupefilter SET into a crawl's Bloom filter: the Redis half of
``python -m crawler.migrate.scrapy_redis`` (no settings, no Scrapy).

The SET holds one member per request scrapy-redis let through, the 40 hex digits of its
fingerprint (:mod:`crawler.migrate.fingerprint`). Each member, unhexed, is added to the
filter as the workers add a fingerprint (:meth:`RedisBloom.add
<crawler.dedup.dupefilter.RedisBloom.add>`), in batches read with ``SSCAN``: the SET is
never loaded whole and never changed.

The fingerprints of the pending requests are in the SET too (scrapy-redis marks a request
seen when it queues it). They are left out, or the seeds made of those requests would be
filtered as duplicates; and they tell whether the SET was written with the fingerprint the
workers use: if none of them is in it, nothing is imported (:class:`Refused`).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

BATCH = 10_000  # SET members a SSCAN step asks for, and fingerprints one Bloom call adds
FINGERPRINT_HEX = 40  # a SHA1 in hex, as scrapy-redis stores it


class Refused(Exception):
    """The SET cannot be imported; the message says why."""


class Bloom(Protocol):
    async def add(self, fingerprints: Sequence[bytes]) -> list[bool]: ...


@dataclass
class Imported:
    """What an import did."""

    members: int = 0  # members of the SET when it began (SCARD)
    pending: int = 0  # fingerprints of the pending seeds given
    pending_found: int = 0  # of which the SET has: left out of the import
    scanned: int = 0  # members read (SSCAN may return a member twice)
    added: int = 0  # fingerprints new to the filter
    present: int = 0  # fingerprints the filter had already (an import run again)
    invalid: int = 0  # members that are not 40 hex digits: skipped


def unhex(member: bytes | str) -> bytes | None:
    """The fingerprint of SET member *member*, or None if it is no 40-hex-digit SHA1."""
    text = member.decode("ascii", "replace") if isinstance(member, bytes) else member
    if len(text) != FINGERPRINT_HEX:
        return None
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        return None


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def check(source: Any, key: str, pending: set[bytes], *, verify: bool = True) -> Imported:
    """The SET's size and how many *pending* fingerprints it holds; :class:`Refused` if
    *key* is no SET, or (*verify*) if it holds none of them: another fingerprint wrote it."""
    kind = await source.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind != "set":
        found = "does not exist" if kind == "none" else f"is a {kind}"
        raise Refused(f"{key} {found}: expected scrapy-redis's dupefilter SET "
                      f"(SCHEDULER_DUPEFILTER_KEY, default <spider>:dupefilter)")
    result = Imported(members=await source.scard(key), pending=len(pending))
    for chunk in _chunks(pending, BATCH):
        flags = await source.smismember(key, [fp.hex() for fp in chunk])
        result.pending_found += sum(1 for flag in flags if flag)
    if verify and pending and result.members and not result.pending_found:
        raise Refused(
            f"none of the {len(pending):,} pending requests' fingerprints is in {key}: "
            f"that SET was not written by scrapy-redis 0.9's RFPDupeFilter (another "
            f"version, or a dupefilter of your own), so importing it would mark nothing "
            f"seen; nothing was imported (if every pending seed is a start URL, which "
            f"scrapy-redis never marks seen, pass --no-check)")
    return result


async def import_set(source: Any, key: str, bloom: Bloom, pending: set[bytes],
                     result: Imported,
                     progress: Callable[[Imported], None] | None = None) -> Imported:
    """Add every fingerprint of SET *key* but the *pending* ones to *bloom*; counts in
    *result* (from :func:`check`)."""
    batch: list[bytes] = []
    async for member in source.sscan_iter(key, count=BATCH):
        result.scanned += 1
        fingerprint = unhex(member)
        if fingerprint is None:
            result.invalid += 1
        elif fingerprint not in pending:
            batch.append(fingerprint)
            if len(batch) >= BATCH:
                await _add(bloom, batch, result)
                batch = []
                if progress is not None:
                    progress(result)
    if batch:
        await _add(bloom, batch, result)
    return result


async def _add(bloom: Bloom, batch: list[bytes], result: Imported) -> None:
    new = sum(1 for flag in await bloom.add(batch) if flag)
    result.added += new
    result.present += len(batch) - new
