"""Background tasks of a component: kept referenced, failures logged once, cancelled on close.

A bare ``asyncio.ensure_future`` may be collected while it runs, and an exception nobody
retrieves surfaces at exit as asyncio's "Task exception was never retrieved". A
:class:`Tasks` keeps each task it spawns until it ends, logs an unexpected exception once
with the owner's and the task's name, and :meth:`Tasks.close` cancels and awaits them all.
:func:`every` is the periodic loop such a task runs, :func:`wait_event` the wait for an event
or a timeout it may use; :func:`in_thread` runs a blocking call a caller may give up on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")
RECANCEL = 1.0  # seconds before a task that outlived its cancellation is cancelled again


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
        """Cancel every task still running and wait until they have all ended; one still
        running :data:`RECANCEL` s later is cancelled again (it swallowed its cancellation:
        Python 3.11's ``asyncio.wait_for`` returns instead of raising when what it waits for
        completes as it is cancelled, and a loop around it went on: a worker's close hung
        for ever on the per-host limits' task, woken by a rebalance as it closed)."""
        pending = set(self._tasks)
        while pending:
            for task in pending:
                task.cancel()
            _done, pending = await asyncio.wait(pending, timeout=RECANCEL)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Whether *event* was set within *timeout* seconds. Unlike ``asyncio.wait_for`` on
    Python 3.11, a cancellation that comes as the event is set is never swallowed."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _pending = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)


async def every(interval: float, call: Callable[[], Awaitable[object]], *,
                wait_first: bool = True) -> None:
    """``await call()`` every *interval* seconds (after a first wait unless *wait_first* is
    false), until it returns ``False``; its exceptions end the loop."""
    if wait_first:
        await asyncio.sleep(interval)
    while await call() is not False:
        await asyncio.sleep(interval)


async def in_thread(call: Callable[[], T], name: str) -> T:
    """``call()`` in a daemon thread named *name*, awaited. Unlike ``asyncio.to_thread``, a
    call its caller gave up on (a ``wait_for`` timed out, the task was cancelled) cannot
    hold the process at exit, where Python joins every thread of the default executor: a
    blocking client without a deadline of its own (kafka-python's ``committed()``, which
    retries a busy coordinator for ever) kept a closed worker alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # the caller gave up
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def run() -> None:
        result: Any = None
        exc: BaseException | None = None
        try:
            result = call()
        except BaseException as error:  # handed to the awaiting task
            exc = error
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop closed meanwhile: nobody is waiting
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
