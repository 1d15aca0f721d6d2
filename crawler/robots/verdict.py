"""What one robots.txt fetch means for a host, by RFC 9309 (section 2.3.1), as one value
every worker of a crawl can share.

- ``rules``: a 2xx answer; its body, at most ``ROBOTSTXT_MAX_SIZE`` bytes of it (2.5: parse
  at least 500 KiB), holds the rules.
- ``allow``: a 4xx answer ("unavailable": no rules at all), more than
  ``ROBOTSTXT_MAX_REDIRECTS`` redirects (2.3.1.2), or a fetch a component of the crawl
  refused (an offsite or private-network guard: the host's pages meet the same refusal).
- ``unreachable``: a 5xx or 429 answer, or a network error (2.3.1.3-4): everything is
  disallowed and the host's requests wait until the verdict expires, ``ROBOTSTXT_RETRY_AFTER``
  seconds later, when robots.txt is fetched again.
- ``gone``: unreachable ``ROBOTSTXT_RETRIES`` times in a row: the host's requests are
  dropped (``dropped/robots_unreachable`` in the ledger) until the verdict expires.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

RULES, ALLOW, UNREACHABLE, GONE = "rules", "allow", "unreachable", "gone"
KINDS = (RULES, ALLOW, UNREACHABLE, GONE)


@dataclass(frozen=True, slots=True)
class RobotsPolicy:
    """How long each verdict lasts (the ``ROBOTSTXT_*`` settings, checked once)."""

    ttl: float  # seconds a rules or allow verdict is used before robots.txt is fetched again
    retry_after: float  # seconds an unreachable verdict lasts
    retries: int  # unreachable verdicts in a row before the host is given up (gone)
    max_size: int  # bytes of a robots.txt body parsed
    max_redirects: int
    crawl_delay_max: float  # the longest Crawl-delay honoured (longer ones are cut to it)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One host's robots.txt verdict: *expires* is a ``time.time()``."""

    kind: str
    status: int  # the HTTP status; 0 when no response came
    reason: str  # for logs: "HTTP 503", "TimeoutError: ..."
    body: str = ""  # the rules (a ``rules`` verdict only)
    failures: int = 0  # unreachable verdicts in a row, this one included
    expires: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Verdict | None:
        """The verdict in *text*; None for anything else (a value from another version)."""
        try:
            data: Any = json.loads(text)
            verdict = cls(**data)
        except (TypeError, ValueError):
            return None
        return verdict if verdict.kind in KINDS else None


def truncated(body: bytes, limit: int) -> bytes:
    """*body* cut to *limit* bytes, at the end of its last whole line."""
    if len(body) <= limit:
        return body
    cut = body[:limit]
    end = max(cut.rfind(b"\n"), cut.rfind(b"\r"))
    return cut[: end + 1] if end >= 0 else cut


def of_status(status: int, body: bytes, policy: RobotsPolicy, now: float,
              previous: Verdict | None) -> Verdict:
    """The verdict of an HTTP answer (after the redirects the fetch followed)."""
    reason = f"HTTP {status}"
    if 200 <= status < 300:
        text = truncated(body, policy.max_size).decode("utf-8", errors="replace")
        return Verdict(RULES, status, reason, text, expires=now + policy.ttl)
    if 400 <= status < 500 and status != 429:
        return Verdict(ALLOW, status, reason, expires=now + policy.ttl)
    return unreachable(status, reason, policy, now, previous)  # 5xx, 429, a 3xx left over


def unreachable(status: int, reason: str, policy: RobotsPolicy, now: float,
                previous: Verdict | None) -> Verdict:
    """An unreachable verdict, ``gone`` once it is the ``retries``-th in a row."""
    failures = previous.failures + 1 if previous and previous.kind == UNREACHABLE else 1
    if failures >= policy.retries:
        return Verdict(GONE, status, reason, failures=failures, expires=now + policy.ttl)
    return Verdict(UNREACHABLE, status, reason, failures=failures,
                   expires=now + policy.retry_after)


def allowed_after_refusal(reason: str, policy: RobotsPolicy, now: float) -> Verdict:
    """The fetch was refused by the crawl itself (a guard, too many redirects): allow."""
    return Verdict(ALLOW, 0, reason, expires=now + policy.ttl)
