"""URL traps: the URLs a crawl stops at before it fetches them (``docs/urls.md``).

- ``path_repeats``: one path segment more than ``URLTRAP_MAX_SEGMENT_REPEATS`` times
  (``/a/b/a/b/a/b/a/``, ``/x/x/x/x/``): a relative link that climbs into itself, a
  server that answers any path with the same page. Empty segments (``//``) do not count.
- ``url_length``: a URL longer than Scrapy's ``URLLENGTH_LIMIT``.

A calendar's endless "next month", a new query each time, is no repetition: the depth
limit (``DEPTH_LIMIT``) ends it. Pure logic: no I/O, no Scrapy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from crawler.config import defaults

PATH_REPEATS, URL_LENGTH = "path_repeats", "url_length"


@dataclass(frozen=True, slots=True)
class TrapRules:
    """The most repeats of one path segment, and the longest URL (0: no bound)."""

    max_segment_repeats: int = defaults.URLTRAP_MAX_SEGMENT_REPEATS
    max_length: int = 0

    def repeats(self, url: str) -> bool:
        """Whether one segment of *url*'s path occurs more than ``max_segment_repeats`` times."""
        limit = self.max_segment_repeats
        if not limit:
            return False
        try:
            path = urlsplit(url).path
        except ValueError:
            return False
        if path.count("/") <= limit:  # too few segments to repeat one past the limit
            return False
        counts = Counter(segment for segment in path.split("/") if segment)
        return bool(counts) and max(counts.values()) > limit

    def reason(self, url: str) -> str | None:
        """Why *url* is a trap (:data:`URL_LENGTH`, :data:`PATH_REPEATS`), or None."""
        if self.max_length and len(url) > self.max_length:
            return URL_LENGTH
        if self.repeats(url):
            return PATH_REPEATS
        return None
