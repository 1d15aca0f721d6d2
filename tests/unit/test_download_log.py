"""A failed download logs one ERROR line; a component's bug keeps its traceback."""

from __future__ import annotations

import logging

import pytest
from scrapy.exceptions import DownloadCancelledError, DownloadTimeoutError, NotConfigured
from scrapy.logformatter import LogFormatter
from scrapy.utils.test import get_crawler

from crawler._scrapy import SCRAPER_LOGGER
from crawler.extensions.downloadlog import DownloadErrorLog, install


def _log_download_error(error: Exception) -> None:
    """What Scrapy's scraper does with a failed download (scrapy/core/scraper.py)."""
    from scrapy import Request
    from twisted.python.failure import Failure

    try:
        raise error
    except Exception:
        failure = Failure()
    kws = LogFormatter().download_error(failure, Request("http://example.com/slow"), None)
    logging.getLogger(SCRAPER_LOGGER).log(kws["level"], kws["msg"], kws["args"],
                                          exc_info=(type(error), error, error.__traceback__))


def _record(caplog: pytest.LogCaptureFixture, error: Exception) -> logging.LogRecord:
    install()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=SCRAPER_LOGGER):
        _log_download_error(error)
    (record,) = caplog.records
    return record


@pytest.mark.parametrize("error", [
    DownloadTimeoutError("Getting http://example.com/slow took longer\nthan 30.0 seconds."),
    DownloadCancelledError("Received 33590240 bytes which is larger than download max size"),
])
def test_a_failed_download_is_one_line(caplog: pytest.LogCaptureFixture,
                                       error: Exception) -> None:
    record = _record(caplog, error)
    assert record.exc_info is None and record.levelno == logging.ERROR
    line = caplog.text.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert f"Error downloading <GET http://example.com/slow>: {type(error).__name__}: " in line
    assert " ".join(str(error).split()) in line


def test_a_bug_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    record = _record(caplog, KeyError("a component's bug"))
    assert record.exc_info is not None
    assert "Traceback" in caplog.text and "KeyError" in caplog.text


def test_tracebacks_back_on_with_the_setting() -> None:
    crawler = get_crawler(settings_dict={"DOWNLOAD_ERROR_TRACEBACKS": True})
    with pytest.raises(NotConfigured, match="DOWNLOAD_ERROR_TRACEBACKS"):
        DownloadErrorLog.from_crawler(crawler)


def test_the_addon_enables_it_in_both_modes() -> None:
    services = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
                "MONGO_URI": "mongodb://127.0.0.1:1"}  # never connected to: nothing opens
    for env in ({}, services):
        crawler = get_crawler(settings_dict={"ADDONS": {"crawler.addon.DistributedAddon": 0},
                                             **env})
        assert "crawler.extensions.downloadlog.DownloadErrorLog" in \
            crawler.settings.getdict("EXTENSIONS")
