"""What became of a frontier record: the names the ledger counts, and how they are found.

Every record of a crawl's topics ends as exactly one *outcome*, counted once per record
(:mod:`crawler.ledger.recorder`):

- a request record: ``fetched/<N>xx`` (its last response's status class),
  ``failed/retries`` (the retry middleware gave up on it), ``failed/<error>`` (an error no
  retry covers), ``dropped/<reason>`` (a component ignored it: ``offsite``, ``robots``,
  ``redirects``, ``size``, ``raced_copy``, ``path_repeats``, ``url_length``, ``ignored``),
  ``dead`` (it could not be decoded: dead-lettered) or ``requeued`` (its lease expired and a
  new record carries it);
- a seed record: ``seeds/accepted``, ``seeds/duplicate``, ``seeds/out_of_scope`` or
  ``seeds/invalid`` (dead-lettered).

A component that drops or fails a request says so with the :data:`OUTCOME` signal
(:func:`tell`); the frontier keeps the last word of each lease.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest

#: signal ``(request, outcome)``: *outcome* is what became of *request* (sent by components)
OUTCOME = object()

FETCHED, FAILED, DROPPED, DEAD, REQUEUED, SEEDS = (
    "fetched/", "failed/", "dropped/", "dead", "requeued", "seeds/")
RETRIES_EXHAUSTED = FAILED + "retries"
RACED_COPY = DROPPED + "raced_copy"
UNKNOWN = DROPPED + "unknown"  # a lease that ended with no word from anyone: a gap to fix
SEED_ACCEPTED, SEED_DUPLICATE = SEEDS + "accepted", SEEDS + "duplicate"
SEED_OUT_OF_SCOPE, SEED_INVALID = SEEDS + "out_of_scope", SEEDS + "invalid"
ITEMS_STORED, ITEMS_DROPPED, ITEMS_ERROR = "items/stored", "items/dropped", "items/error"
AGAIN = "again/"  # prefix of what a redelivered record would have counted a second time

#: IgnoreRequest messages of Scrapy's components -> the reason counted
_IGNORED = (
    ("Filtered offsite request", "offsite"),
    ("Forbidden by robots.txt", "robots"),
    ("max redirections reached", "redirects"),
    ("during decompression", "size"),
    ("larger than download max size", "size"),
)


def fetched(status: int) -> str:
    return f"{FETCHED}{status // 100}xx"


def of_exception(exception: BaseException) -> str:
    """The outcome of a request whose download ended with *exception*."""
    reason = getattr(exception, "ledger_reason", None)  # a component's own IgnoreRequest
    if isinstance(reason, str) and reason:
        return DROPPED + reason
    text = str(exception)
    for needle, name in _IGNORED:
        if needle in text:
            return DROPPED + name
    if isinstance(exception, IgnoreRequest):
        return DROPPED + "ignored"
    if isinstance(exception, DownloadCancelledError) and not str(exception):
        return DROPPED + "size"  # Scrapy's HTTP/1.1 handler cut a body past DOWNLOAD_MAXSIZE
    # (it logged why; it cancels the download without a message, and nothing else does)
    return FAILED + type(exception).__name__


def tell(crawler: Any, request: Request, outcome: str) -> None:
    """Tell the frontier what became of *request* (:data:`OUTCOME`)."""
    crawler.signals.send_catch_log(OUTCOME, request=request, outcome=outcome)
