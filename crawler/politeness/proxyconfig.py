"""The proxy pool's settings (``PROXY_*``, ``ROTATING_PROXY_*``), read and checked once.

:class:`ProxyConfig` is what :class:`~crawler.middlewares.proxies.ProxyPoolMiddleware`
reads; :func:`pool_policy` is the part a store reads (``PROXY_STORE`` is built by
``from_crawler(crawler)`` alone: it owns the pool whose health these settings tune). A bad
value raises :class:`~crawler.config.readers.SettingError` naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.politeness.proxypool import PoolPolicy, Proxy, parse_proxy

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

WHEN_NONE = ("wait", "direct", "fail")
LOCAL_STORE = "crawler.politeness.proxystore.ProxyStore"
REDIS_STORE = "crawler.politeness.proxystore.RedisProxyStore"


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """The middleware's settings: what to do without a proxy, ban retries, the refresh, the
    store and ban-policy classes (loaded) and the seed proxies."""

    store: type
    ban_policy: type
    seeds: tuple[Proxy, ...]
    when_none: str
    retries: int  # PROXY_RETRIES: re-issues through another proxy after the proxy's fault
    refresh_interval: float
    wait_max: float
    probe_url: str
    probe_timeout: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> ProxyConfig:
        if config.user_set(settings, "PROXY_BAN_RETRIES"):
            raise SettingError("PROXY_BAN_RETRIES", "renamed PROXY_RETRIES (it now counts "
                               "every failure that was the proxy's, bans included)")
        fallback = REDIS_STORE if config.get_str(settings, "REDIS_URL") else LOCAL_STORE
        return cls(
            store=load_class(settings, "PROXY_STORE", fallback),
            ban_policy=load_class(settings, _policy_setting(settings)),
            seeds=tuple(seed_proxies(settings)),
            when_none=config.get_choice(settings, "PROXY_WHEN_NONE", WHEN_NONE),
            retries=config.get_int(settings, "PROXY_RETRIES", minimum=0),
            refresh_interval=_positive(settings, "PROXY_REFRESH_INTERVAL"),
            wait_max=_positive(settings, "PROXY_WAIT_MAX"),
            probe_url=_probe_url(settings),
            probe_timeout=_positive(settings, "PROXY_PROBE_TIMEOUT"),
        )


def _policy_setting(settings: BaseSettings) -> str:
    """``PROXY_BAN_POLICY``, or scrapy-rotating-proxies' ``ROTATING_PROXY_BAN_POLICY`` when
    only that one is set."""
    ours, theirs = "PROXY_BAN_POLICY", "ROTATING_PROXY_BAN_POLICY"
    if not config.user_set(settings, theirs) or not config.get_str(settings, theirs):
        return ours
    if config.user_set(settings, ours) and \
            config.get_str(settings, ours) != config.get_str(settings, theirs):
        raise SettingError(theirs, f"set {ours} or {theirs}, not both to different classes")
    return theirs


def _probe_url(settings: BaseSettings) -> str:
    url = config.get_str(settings, "PROXY_PROBE_URL")
    if url and not url.startswith(("http://", "https://")):
        raise SettingError("PROXY_PROBE_URL", "expected an http:// or https:// URL")
    return url


def _positive(settings: BaseSettings, name: str) -> float:
    return config.get_float(settings, name, minimum=0, exclusive_min=True)


def pool_policy(settings: BaseSettings) -> PoolPolicy:
    """How observations move a proxy's health: ``PROXY_EWMA_ALPHA``, ``PROXY_BACKOFF_*``
    (the pauses between probes of a dead proxy)..."""
    base = _positive(settings, "PROXY_BACKOFF_BASE")
    return PoolPolicy(
        alpha=config.get_float(settings, "PROXY_EWMA_ALPHA", minimum=0, maximum=1,
                               exclusive_min=True),
        latency_ref=_positive(settings, "PROXY_LATENCY_REF"),
        min_success=config.get_float(settings, "PROXY_MIN_SUCCESS", minimum=0, maximum=1),
        backoff_base=base,
        backoff_max=config.get_float(settings, "PROXY_BACKOFF_MAX", minimum=base),
        probation_successes=config.get_int(settings, "PROXY_PROBATION_SUCCESSES", minimum=1),
        reset_after=config.get_int(settings, "PROXY_BACKOFF_RESET", minimum=1),
    )


def seed_proxies(settings: BaseSettings) -> list[Proxy]:
    """The proxies of ``ROTATING_PROXY_LIST`` and the file ``ROTATING_PROXY_LIST_PATH``."""
    found = [("ROTATING_PROXY_LIST", a) for a in config.get_list(settings, "ROTATING_PROXY_LIST")]
    path = config.get_str(settings, "ROTATING_PROXY_LIST_PATH")
    if path:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise SettingError("ROTATING_PROXY_LIST_PATH", f"cannot read {path}: "
                               f"{exc.strerror or exc}") from None
        found += [("ROTATING_PROXY_LIST_PATH", line) for line in lines
                  if line.strip() and not line.lstrip().startswith("#")]
    proxies = []
    for number, (setting, address) in enumerate(found, 1):
        try:
            proxies.append(parse_proxy(address))
        except ValueError as exc:  # the address may hold a password: name its position only
            raise SettingError(setting, f"entry {number}: {exc}") from None
    return proxies


def load_class(settings: BaseSettings, name: str, fallback: str = "") -> Any:
    """The class at the path of setting *name* (or *fallback* when it is empty)."""
    path = config.get_str(settings, name) or fallback
    try:
        return load_object(path)
    except (ImportError, AttributeError, ValueError, NameError) as exc:
        raise SettingError(name, f"cannot load {path!r}: {exc}") from None
