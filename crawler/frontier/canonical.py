"""The canonical form of a URL: one form for every variant of a page (``docs/urls.md``).

:func:`~crawler.frontier.urls.normal_url` first (lower-case scheme and host, no default
port, no dot segments, no fragment), then the parameters ``CANONICAL_DROP_PARAMS`` names go:
from the query (``?utm_source=x``) and from the path (``/cart;jsessionid=A1``). Names are
glob patterns (:mod:`fnmatch`), matched without regard to case on the percent-decoded name.
The kept parameters stay as written, in their order unless ``CANONICAL_SORT_QUERY`` is on;
empty ones (``&&``) go. Pure logic: no I/O, no Scrapy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import translate
from urllib.parse import SplitResult, unquote_plus, urlsplit

from scrapy.settings import BaseSettings

from crawler.config import defaults
from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.frontier.urls import normal_url

SCHEMES = ("http", "https")
_NOTHING = re.compile(r"(?!)")  # matches no name


def _matcher(patterns: tuple[str, ...]) -> re.Pattern[str]:
    if not patterns:
        return _NOTHING
    return re.compile("|".join(f"(?:{translate(p.lower())})" for p in patterns))


@dataclass(frozen=True, slots=True)
class CanonicalRules:
    """The parameters dropped (glob patterns) and whether the query is sorted."""

    drop_params: tuple[str, ...] = tuple(defaults.CANONICAL_DROP_PARAMS)
    sort_query: bool = defaults.CANONICAL_SORT_QUERY
    _dropped: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_dropped", _matcher(self.drop_params))

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> CanonicalRules:
        """``CANONICAL_DROP_PARAMS`` and ``CANONICAL_SORT_QUERY``; :class:`SettingError`
        for a malformed value."""
        patterns = config.get_list(settings, "CANONICAL_DROP_PARAMS")
        for pattern in patterns:
            if not pattern.strip() or "=" in pattern or "&" in pattern:
                raise SettingError("CANONICAL_DROP_PARAMS", f"{pattern!r} is no parameter name "
                                   "(expected names or glob patterns, like utm_* or sid)")
        return cls(tuple(p.strip() for p in patterns),
                   config.get_bool(settings, "CANONICAL_SORT_QUERY"))

    def dropped(self, name: str) -> bool:
        """Whether the parameter *name* (as written in the URL) is dropped."""
        return self._dropped.match(unquote_plus(name).lower()) is not None

    def url(self, url: str) -> str:
        """*url* in canonical form; a URL that is not absolute http(s), or that
        :func:`~urllib.parse.urlsplit` refuses, unchanged."""
        try:
            parts = urlsplit(url.strip())
            if parts.scheme.lower() not in SCHEMES or not parts.hostname:
                return url
            return normal_url(url, self._parts(parts))
        except ValueError:  # a port out of range, a bad IPv6 literal: the download says so
            return url

    def _parts(self, parts: SplitResult) -> SplitResult:
        path = self._path(parts.path) if ";" in parts.path else parts.path
        return parts._replace(path=path, query=self._query(parts.query))

    def _path(self, path: str) -> str:
        """*path* without its dropped ``;name=value`` parameters, in every segment."""
        segments = []
        for segment in path.split("/"):
            head, *params = segment.split(";")
            kept = [p for p in params if not self.dropped(p.partition("=")[0])]
            segments.append(";".join([head, *kept]))
        return "/".join(segments)

    def _query(self, query: str) -> str:
        if not query:
            return query
        kept = [p for p in query.split("&") if p and not self.dropped(p.partition("=")[0])]
        if self.sort_query:
            kept.sort(key=lambda p: p.partition("="))
        return "&".join(kept)


#: the rules of the defaults
DEFAULT = CanonicalRules()
