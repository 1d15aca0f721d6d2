"""robots.txt by RFC 9309, fetched once per host for the whole cluster (``docs/robots.md``).

:mod:`~crawler.robots.verdict` says what a fetch means, :mod:`~crawler.robots.store` shares
the verdicts, :mod:`~crawler.robots.book` gets each origin's once; the downloader middleware
is :class:`crawler.middlewares.robots.ClusterRobotsTxtMiddleware`.
"""

from crawler.robots.book import Known, RobotsBook
from crawler.robots.config import claim_seconds, robots_policy
from crawler.robots.store import MemoryRobotsStore, RedisRobotsStore, RobotsStore
from crawler.robots.verdict import (
    ALLOW,
    GONE,
    RULES,
    UNREACHABLE,
    RobotsPolicy,
    Verdict,
    allowed_after_refusal,
    of_status,
    unreachable,
)

__all__ = ["ALLOW", "GONE", "RULES", "UNREACHABLE", "Known", "MemoryRobotsStore",
           "RedisRobotsStore", "RobotsBook", "RobotsPolicy", "RobotsStore", "Verdict",
           "allowed_after_refusal", "claim_seconds", "of_status", "robots_policy",
           "unreachable"]
