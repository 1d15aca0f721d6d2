"""The one normal form of a seed URL (before dedup): ``HTTPS://Example.COM:443/a/../b#frag``
becomes ``https://example.com/b``.

Lower-case scheme and host, no default port, no dot segments (RFC 3986, 5.2.4), no fragment,
``/`` for an empty path. The query and the user info are kept as written: a server may tell
``?a=1&b=2`` from ``?b=2&a=1``, and Scrapy's fingerprint already sorts queries for dedup.
It is the first part of the canonical form of every URL the crawl follows, which also drops
the parameters ``CANONICAL_DROP_PARAMS`` names (:mod:`crawler.frontier.canonical`).
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def remove_dot_segments(path: str) -> str:
    """RFC 3986, 5.2.4."""
    out: list[str] = []
    segments = path.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    result = "/".join(out)
    return result if result.startswith("/") or not path.startswith("/") else "/" + result


def normal_url(url: str, parts: SplitResult | None = None) -> str:
    """*url* (absolute, http or https: :func:`crawler.frontier.codec.check_url`) in normal
    form (*parts*: its :func:`~urllib.parse.urlsplit`, if the caller has it); raises
    ``ValueError`` for a URL :func:`urllib.parse.urlsplit` refuses."""
    parts = parts if parts is not None else urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username is not None:
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{netloc}"
    path = remove_dot_segments(parts.path) or "/"
    return urlunsplit((scheme, netloc, path, parts.query, ""))
