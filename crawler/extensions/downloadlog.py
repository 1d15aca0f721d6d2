"""One line, not a traceback, for a download that failed the way downloads fail.

Scrapy's scraper logs every failed download that is not an ``IgnoreRequest`` at ERROR with
the exception's traceback: about 40 lines of Twisted and Scrapy frames for a timeout, a
reset, a refused connection or a body cut at ``DOWNLOAD_MAXSIZE``. Those are what origins
do (the hostile-pages test meets each of them); the frames say nothing an operator can
act on, and a crawl of a flaky site fills its log with them. :class:`DownloadErrorLog`
keeps the ERROR line and its request and puts the exception's type and message on it::

    Error downloading <GET http://example.com/slow>: DownloadTimeoutError: Getting
    http://example.com/slow took longer than 30.0 seconds.

An exception of any other type (a bug in a component) keeps its traceback, and
``DOWNLOAD_ERROR_TRACEBACKS = True`` keeps every traceback.
"""

from __future__ import annotations

import logging
from typing import Self

from scrapy import exceptions
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.logformatter import DOWNLOADERRORMSG_LONG, DOWNLOADERRORMSG_SHORT

from crawler._scrapy import SCRAPER_LOGGER, TunnelError
from crawler.config import readers as config

#: what a download raises when the origin, the network or a size bound ended it
DOWNLOAD_FAILURES: tuple[type[BaseException], ...] = (
    exceptions.DownloadConnectionRefusedError, exceptions.CannotResolveHostError,
    exceptions.DownloadTimeoutError, exceptions.DownloadCancelledError,
    exceptions.DownloadFailedError, exceptions.ResponseDataLossError,
    exceptions.UnsupportedURLSchemeError, TunnelError,
)


_DOWNLOAD_ERROR_MESSAGES = (DOWNLOADERRORMSG_SHORT, DOWNLOADERRORMSG_LONG)  # LogFormatter's


class OneLineDownloadErrors(logging.Filter):
    """Rewrites the scraper's "Error downloading" records of :data:`DOWNLOAD_FAILURES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, DOWNLOAD_FAILURES) and record.msg in _DOWNLOAD_ERROR_MESSAGES:
            text = " ".join(str(error).split())  # one line, whatever the message held
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {text}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


_FILTER = OneLineDownloadErrors()


def install() -> OneLineDownloadErrors:
    """Put the filter on Scrapy's scraper logger (once per process)."""
    logger = logging.getLogger(SCRAPER_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return _FILTER


class DownloadErrorLog:
    """The extension: installs :class:`OneLineDownloadErrors` unless tracebacks are wanted."""

    def __init__(self, tracebacks: bool) -> None:
        if tracebacks:
            raise NotConfigured("DOWNLOAD_ERROR_TRACEBACKS is on")
        install()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(config.get_bool(crawler.settings, "DOWNLOAD_ERROR_TRACEBACKS"))
