"""The ``WARC_*`` settings, read once (``docs/warc.md``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from scrapy.settings import BaseSettings

from crawler.config import readers as config
from crawler.config.readers import SettingError

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True, slots=True)
class WarcConfig:
    """Where and how a worker writes its WARC files."""

    directory: str  # WARC_DIR
    prefix: str  # WARC_PREFIX, or the crawl id
    max_size: int  # bytes of a file after which the next record starts a new one
    flush_interval: float  # seconds: the shortest gap between two fsyncs

    @classmethod
    def from_settings(cls, settings: BaseSettings, crawl_id: str) -> WarcConfig:
        """The settings; a bad value raises :class:`SettingError` naming it."""
        directory = config.get_str(settings, "WARC_DIR")  # empty: the default
        prefix = config.get_str(settings, "WARC_PREFIX") or crawl_id
        if not _PREFIX_RE.match(prefix):
            raise SettingError("WARC_PREFIX", f"{prefix!r} is not usable in a file name "
                               "(letters, digits, '.', '_' and '-', at most 100 characters)")
        return cls(directory=directory, prefix=prefix,
                   max_size=config.get_int(settings, "WARC_MAX_SIZE", minimum=1),
                   flush_interval=config.get_float(settings, "WARC_FLUSH_INTERVAL",
                                                   minimum=0, maximum=10))


def check_directory(directory: str) -> None:
    """``WARC_DIR`` is usable: a directory this process may write, or one it may create.
    A :class:`SettingError` names it otherwise (at start-up, before any page is fetched)."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise SettingError("WARC_DIR", f"{directory!r} exists and is not a directory")
    existing = next((p for p in (path, *path.absolute().parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise SettingError("WARC_DIR", f"{directory!r}: this process may not write in "
                           f"{str(existing)!r}")
