"""This worker's robots.txt verdicts: each origin's is asked of the store once, and fetched
once for the whole cluster (the worker whose claim succeeds fetches it; the others wait for
the verdict it stores).

A verdict is kept here until it expires. The store failing (Redis down) stalls the origin's
requests, which wait for a verdict; it never allows them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from crawler.robots.store import RobotsStore
from crawler.robots.verdict import RULES, Verdict

logger = logging.getLogger(__name__)

POLL_FIRST, POLL_MAX = 0.1, 2.0  # seconds between two looks at a verdict another worker fetches
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 10.0  # seconds before the store is tried again after an error
ERRORS = (RedisError, OSError, asyncio.TimeoutError)

Fetch = Callable[[str, Verdict | None], Awaitable[Verdict]]


class Known:
    """A verdict, and its rules parsed (a ``rules`` verdict only)."""

    __slots__ = ("parser", "verdict")

    def __init__(self, verdict: Verdict, parser: Any) -> None:
        self.verdict, self.parser = verdict, parser


class RobotsBook:
    def __init__(self, store: RobotsStore, fetch: Fetch, *, parse: Callable[[str], Any],
                 worker: str, claim_seconds: float, on_known: Callable[[str, Known], None],
                 stats: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.store, self._fetch, self._parse, self.worker = store, fetch, parse, worker
        self.claim_seconds, self._on_known = claim_seconds, on_known
        self._stats, self._clock = stats, clock
        self._known: dict[str, Known] = {}
        self._pending: dict[str, asyncio.Task[Known]] = {}
        self._failing = False

    def known(self, origin: str) -> Known | None:
        """*origin*'s verdict if this worker has one that has not expired."""
        known = self._known.get(origin)
        return known if known is not None and known.verdict.expires > self._clock() else None

    def resolve(self, origin: str) -> asyncio.Task[Known]:
        """The one task that gets *origin*'s verdict (from the store, else by fetching it)."""
        task = self._pending.get(origin)
        if task is None:
            task = asyncio.ensure_future(self._resolve(origin))
            self._pending[origin] = task
            task.add_done_callback(lambda _t: self._pending.pop(origin, None))
        return task

    def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()

    async def _resolve(self, origin: str) -> Known:
        poll, backoff = POLL_FIRST, BACKOFF_FIRST
        while True:
            try:
                verdict = await self._lookup(origin)
            except ERRORS as exc:
                self._store_failed(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if self._failing:
                logger.info("robots.txt verdicts: the store answers again")
                self._failing = False
            if verdict is not None:
                return self._keep(origin, verdict)
            await asyncio.sleep(poll)  # another worker is fetching it
            poll = min(poll * 2, POLL_MAX)

    async def _lookup(self, origin: str) -> Verdict | None:
        """The stored verdict if it is current; else the one this worker fetches, if its claim
        succeeds; else None (another worker fetches it)."""
        stored = await self.store.get(origin)
        if stored is not None and stored.expires > self._clock():
            return stored
        if not await self.store.claim(origin, self.worker, self.claim_seconds):
            return None
        # read again: a peer may have stored its verdict (and freed its claim) between the
        # read above and this claim; it was fetched twice at start-up 0 to 4 times a run
        again = await self.store.get(origin)
        if again is not None and again.expires > self._clock():
            return again  # the claim expires by itself; nobody needs it now
        verdict = await self._fetch(origin, stored)
        try:
            await self.store.put(origin, verdict, self.worker)
        except ERRORS as exc:  # used here; the others fetch it once the claim expires
            self._store_failed(exc)
        return verdict

    def _keep(self, origin: str, verdict: Verdict) -> Known:
        known = Known(verdict, self._parse(verdict.body) if verdict.kind == RULES else None)
        self._known[origin] = known
        self._on_known(origin, known)
        return known

    def _store_failed(self, exc: BaseException) -> None:
        if self._stats is not None:
            self._stats.inc_value("robotstxt/store_errors")
        if not self._failing:
            logger.warning("robots.txt verdicts: the store fails (requests of hosts without "
                           "a verdict wait): %s", exc)
            self._failing = True
