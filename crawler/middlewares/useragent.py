"""Rotate the User-Agent header over a list, one random pick per request.

Enable it in place of Scrapy's ``UserAgentMiddleware`` (500)::

    USERAGENT_ROTATION_ENABLED = True
    USERAGENT_LIST = ["Mozilla/5.0 (X11; Linux x86_64) ...", "Mozilla/5.0 (Macintosh; ...) ..."]
    DOWNLOADER_MIDDLEWARES = {
        "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
        "crawler.middlewares.useragent.UserAgentRotationMiddleware": 500,
    }

A User-Agent set by the spider is kept; so is the one of a previous attempt (a
retry or redirect keeps its identity). Scrapy's default (``USER_AGENT``) is
replaced, so leaving Scrapy's middleware on works too.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from scrapy.exceptions import NotConfigured

from crawler.config import readers as config
from crawler.config.readers import SettingError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

_HEADER = b"User-Agent"


class UserAgentRotationMiddleware:
    """Give each request a User-Agent picked at random from ``USERAGENT_LIST``."""

    def __init__(self, user_agents: list[str], *, default: str = "",
                 rng: random.Random | None = None) -> None:
        self.user_agents = user_agents
        self.default = default.encode()
        self.rng = rng or random.Random()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not config.get_bool(crawler.settings, "USERAGENT_ROTATION_ENABLED"):
            raise NotConfigured("UserAgentRotationMiddleware needs USERAGENT_ROTATION_ENABLED")
        cfg = UserAgentConfig.from_settings(crawler.settings)
        return cls(list(cfg.user_agents), default=cfg.default)

    def process_request(self, request: Request) -> None:
        current = request.headers.get(_HEADER)
        if current is None or current == self.default:
            request.headers[_HEADER] = self.rng.choice(self.user_agents)


@dataclass(frozen=True, slots=True)
class UserAgentConfig:
    """``USERAGENT_LIST`` (at least one) and Scrapy's ``USER_AGENT``, the one replaced."""

    user_agents: tuple[str, ...]
    default: str

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> UserAgentConfig:
        user_agents = _user_agents(settings)
        if not user_agents:
            raise SettingError("USERAGENT_LIST", "expected at least one User-Agent string")
        return cls(tuple(user_agents), settings.get("USER_AGENT") or "")


def _user_agents(settings: BaseSettings) -> list[str]:
    """``USERAGENT_LIST``: a list, a JSON list, or one User-Agent per line (they hold commas)."""
    value = config.raw(settings, "USERAGENT_LIST")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else text.splitlines()
        except ValueError:
            raise SettingError("USERAGENT_LIST", "expected a JSON list of strings") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise SettingError("USERAGENT_LIST", f"expected a list of strings, got {value!r}")
    return [ua.strip() for ua in value if ua.strip()]
