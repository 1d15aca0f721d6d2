"""Background tasks of a component: kept referenced, failures logged once, cancelled on close.

A bare ``asyncio.ensure_future`` may be collected while it runs, and an exception nobody
retrieves surfaces at exit as asyncio's "Task exception was never retrieved". A
:class:`Tasks` keeps each task it spawns until it ends, logs an unexpected exception once
with the owner's and the task's name, and :meth:`Tasks.close` cancels and awaits them all.
:func:`every` is the periodic loop such a task runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Tasks:
    """The background tasks of one component (*owner* names it in the log)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run *coro* in the background; *name* says what it does, in the log."""
        task = asyncio.ensure_future(coro)
        task.set_name(f"{self.owner}: {name}")
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved: asyncio does not report it again
        if exc is not None:
            logger.error("Background task %s failed: %s", task.get_name(), exc,
                         exc_info=(type(exc), exc, exc.__traceback__))

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Any:
        return iter(list(self._tasks))

    async def close(self) -> None:
        """Cancel every task still running and wait until they have all ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def every(interval: float, call: Callable[[], Awaitable[object]], *,
                wait_first: bool = True) -> None:
    """``await call()`` every *interval* seconds (after a first wait unless *wait_first* is
    false), until it returns ``False``; its exceptions end the loop."""
    if wait_first:
        await asyncio.sleep(interval)
    while await call() is not False:
        await asyncio.sleep(interval)
