"""What a seed from outside the crawl may set: the rule of ``SEED_META_KEYS`` and
``SEED_REQUEST_FIELDS`` (pure logic, no I/O).

A seed record that no worker of the crawl signed (:mod:`crawler.frontier.seedtrust`) is an
*external* seed: ``scrapy seed``, or any Kafka client that can write the seeds topic. Such a
seed may give its ``url``, its ``priority`` and the ``meta`` keys of ``SEED_META_KEYS``; the
other request fields (:data:`REQUEST_FIELDS`) only if ``SEED_REQUEST_FIELDS`` lists them.
A field left at its default (``"method": "GET"``, ``"headers": {}``, ``"callback": null``)
sets nothing, and is allowed. ``*`` in either setting allows every key or field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from crawler.config import defaults
from crawler.config import readers as config
from crawler.config.readers import SettingError

ANY = "*"
#: the request fields an external seed may set only when SEED_REQUEST_FIELDS lists them
REQUEST_FIELDS = ("method", "headers", "body", "cookies", "callback", "errback", "cb_kwargs",
                  "dont_filter", "flags", "encoding")
#: the values of a field that set nothing (a request's defaults, as JSON)
_UNSET: dict[str, tuple[Any, ...]] = {
    "headers": ({},), "body": ("",), "cookies": ({}, []), "callback": (None,),
    "errback": (None,), "cb_kwargs": ({},), "dont_filter": (False,), "flags": ([],),
    "encoding": ("utf-8",),
}


def _unset(name: str, value: Any) -> bool:
    if name == "method":
        return isinstance(value, str) and value.upper() == "GET"
    return any(value == unset and type(value) is type(unset) for unset in _UNSET[name])


def _quoted(names: Iterable[str], most: int = 10) -> str:
    """*names* quoted (``repr``: a key the seed chose may hold any character), the first
    *most* of them, each cut at 60 characters."""
    given = list(names)
    shown = ", ".join(repr(name[:60]) for name in given[:most])
    return shown + (f" and {len(given) - most} more" if len(given) > most else "")


def _listing(allowed: Iterable[str] | None) -> str:
    return ANY if allowed is None else ", ".join(sorted(allowed)) or "none"


@dataclass(frozen=True, slots=True)
class SeedRule:
    """The meta keys (None: any) and request fields an external seed may set."""

    meta_keys: frozenset[str] | None = frozenset(defaults.SEED_META_KEYS)
    request_fields: frozenset[str] = frozenset(defaults.SEED_REQUEST_FIELDS)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SeedRule:
        """``SEED_META_KEYS`` and ``SEED_REQUEST_FIELDS``; :class:`SettingError` if malformed."""
        return cls(_meta_keys(settings), _request_fields(settings))

    def refusal(self, seed: Mapping[str, Any]) -> str | None:
        """Why the external *seed* (its JSON object) may not be taken, or None."""
        fields = [name for name in REQUEST_FIELDS
                  if name in seed and not _unset(name, seed[name])
                  and name not in self.request_fields]
        if fields:
            noun = "field" if len(fields) == 1 else "fields"
            return (f"seed {noun} {_quoted(fields)} not allowed from outside the crawl "
                    f"(SEED_REQUEST_FIELDS lists {_listing(self.request_fields)})")
        meta = seed.get("meta") or {}
        if not isinstance(meta, dict):
            return "field 'meta' must be an object"
        keys = [] if self.meta_keys is None else sorted(set(meta) - self.meta_keys)
        if keys:
            noun = "meta key" if len(keys) == 1 else "meta keys"
            return (f"seed {noun} {_quoted(keys)} not allowed from outside the crawl "
                    f"(SEED_META_KEYS lists {_listing(self.meta_keys)})")
        return _method_refusal(seed)


#: the rule of the defaults (``SEED_META_KEYS``, ``SEED_REQUEST_FIELDS``)
DEFAULT = SeedRule()
#: the rule of a seed a worker of the crawl signed: every field, every meta key
TRUSTED = SeedRule(meta_keys=None, request_fields=frozenset(REQUEST_FIELDS))


def _method_refusal(seed: Mapping[str, Any]) -> str | None:
    """An allowed callback or errback must name a public method of the spider."""
    for name in ("callback", "errback"):
        value = seed.get(name)
        if value is not None and (not isinstance(value, str) or value.startswith("_")):
            return f"field {name!r} must name a public method of the spider, got {value!r}"
    return None


def _meta_keys(settings: BaseSettings) -> frozenset[str] | None:
    keys = config.get_list(settings, "SEED_META_KEYS")
    return None if ANY in keys else frozenset(keys)


def _request_fields(settings: BaseSettings) -> frozenset[str]:
    fields = config.get_list(settings, "SEED_REQUEST_FIELDS")
    if ANY in fields:
        return frozenset(REQUEST_FIELDS)
    unknown = sorted(set(fields) - set(REQUEST_FIELDS))
    if unknown:
        raise SettingError("SEED_REQUEST_FIELDS", f"unknown request field {_quoted(unknown)} "
                           f"(expected some of {', '.join(REQUEST_FIELDS)}, or {ANY})")
    return frozenset(fields)
