"""Typed values of a request's ``meta`` and ``cb_kwargs`` as JSON, and back (pure logic).

JSON holds ``str``, ``int``, ``float``, ``bool``, ``None``, lists and objects with string
keys. Each other type of :data:`SUPPORTED` travels as a tagged object ``{"$t": name, "v":
payload}``: ``{"$t": "datetime", "v": "2024-05-01T12:00:00+02:00"}``. A dict that JSON
cannot hold as it stands, because a key is not a string or is the tag key ``$t`` itself,
travels as ``{"$t": "dict", "v": [[key, value], ...]}``: that is the escape, and a
user's own dict comes back unchanged. Decoding knows the fixed registry below and nothing
else: it never imports or builds a class named by the data (scrapy-playwright's
``PageMethod`` is imported, lazily, by :func:`page_method_class` only).

:func:`is_plain` is the fast path: a value that JSON holds as it stands needs no copy.
"""

from __future__ import annotations

import base64
import importlib
import math
import sys
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from crawler.frontier.requestfields import function_name

TAG, VALUE = "$t", "v"
SUPPORTED = ("str, int, float, bool, None, list, dict, tuple, set, frozenset, bytes, datetime, "
             "date, timedelta, Decimal, PageMethod")
_SCALARS = frozenset({str, int, float, bool, type(None)})
_PAGE_METHOD = "scrapy_playwright.page"


class Unsupported(ValueError):
    """A value no record can hold; :attr:`steps` says where it sits, outermost first:
    ``("key", k)``, ``("index", i)``, ``("set", None)`` (an element of a set), ``("dict key",
    None)``, ``("args", i)`` and ``("kwargs", k)`` (of a ``PageMethod``)."""

    def __init__(self, value: Any, what: str = "", hint: str = "") -> None:
        self.value, self.steps = value, list[tuple[str, Any]]()
        name = type_name(value)
        self.what = what or f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"
        self.hint = hint or f"supported: {SUPPORTED}"
        super().__init__(f"{self.what}, which cannot travel through the frontier ({self.hint})")

    def inside(self, kind: str, key: Any = None) -> Unsupported:
        """Record that the value sits at *key* of a container of *kind*."""
        self.steps.insert(0, (kind, key))
        return self

    def where(self, field: str) -> str:
        """``meta key 'item' holds a shop.Price at ['rows'][3], which cannot travel ...``."""
        subject, steps = field, self.steps
        if steps and steps[0][0] == "key":
            subject, steps = f"{field} key {_short(steps[0][1])}", steps[1:]
        return (f"{subject} holds {self.what}{_path(steps)}, which cannot travel through "
                f"the frontier ({self.hint})")


_STEPS = {"key": "[{}]", "index": "[{}]", "args": ".args[{}]", "kwargs": ".kwargs[{}]",
          "set": " in a set", "dict key": " as a dict key"}


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _path(steps: list[tuple[str, Any]]) -> str:
    text = "".join(_STEPS[kind].format(_short(key)) for kind, key in steps)
    return f" at {text}" if text[:1] in ("[", ".") else text


class Undecodable(ValueError):
    """A tagged value that is malformed, or that this worker cannot build."""


def type_name(value: Any) -> str:
    """``module.Qualname`` of *value*'s type, without ``builtins.``."""
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def page_method_class(*, load: bool) -> type | None:
    """scrapy-playwright's ``PageMethod``: imported if *load*, else only if some module did
    (an instance cannot exist before); None when scrapy-playwright is not installed."""
    module = sys.modules.get(_PAGE_METHOD)
    if module is None and load:
        try:
            module = importlib.import_module(_PAGE_METHOD)  # the one import of scrapy-playwright
        except ImportError:
            return None
    found = getattr(module, "PageMethod", None)
    return found if isinstance(found, type) else None


# -- encoding ---------------------------------------------------------------------------
def is_plain(value: Any) -> bool:
    """Whether JSON holds *value* as it stands: scalars, lists and dicts of string keys
    (none of them the tag key) all the way down; ``RecursionError`` for a value that holds
    itself. Non-finite floats pass: ``json.dumps`` refuses them later. On the hot path:
    scalars are checked inline, not by a call each."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is list:
        for item in value:
            if type(item) not in _SCALARS and not is_plain(item):
                return False
        return True
    if kind is dict:
        if TAG in value:
            return False
        for key in value:
            if type(key) is not str:
                return False
        for item in value.values():
            if type(item) not in _SCALARS and not is_plain(item):
                return False
        return True
    return False


def encode(value: Any, used: set[str]) -> Any:
    """*value* as JSON, typed values tagged (their names added to *used*);
    :class:`Unsupported` for a value of no supported type, or ``RecursionError``."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is float and not math.isfinite(value):
            raise Unsupported(value, f"the float {value}", "only finite floats can")
        return value
    if kind is list:
        return _sequence(value, used)
    if kind is dict:
        return _dict(value, used)
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        return _other(value, used)
    name, payload = encoder(value, used)
    used.add(name)
    return {TAG: name, VALUE: payload}


def _other(value: Any, used: set[str]) -> Any:
    """A value of no registered type: a subclass (an ``IntEnum``, a named tuple, an
    ``OrderedDict``), which comes back as its base type; a ``PageMethod``; or none."""
    if isinstance(value, (str, int, float)):  # as json.dumps writes them: their base value
        return value
    if isinstance(value, list):
        return _sequence(value, used)
    if isinstance(value, dict):
        return _dict(value, used)
    encoder = next((e for base, e in _ENCODERS.items() if isinstance(value, base)), None)
    if encoder is None:
        page_method = page_method_class(load=False)
        if page_method is None or not isinstance(value, page_method):
            raise Unsupported(value)
        encoder = _page_method
    name, payload = encoder(value, used)
    used.add(name)
    return {TAG: name, VALUE: payload}


def _sequence(values: Any, used: set[str], kind: str = "index") -> list[Any]:
    out = []
    for index, item in enumerate(values):
        try:
            out.append(encode(item, used))
        except Unsupported as exc:
            raise exc.inside(kind, None if kind == "set" else index) from None
    return out


def _dict(value: dict[Any, Any], used: set[str]) -> Any:
    if TAG not in value and all(type(key) is str for key in value):
        out = {}
        for key, item in value.items():
            try:
                out[key] = encode(item, used)
            except Unsupported as exc:
                raise exc.inside("key", key) from None
        return out
    used.add("dict")
    pairs = []
    for key, item in value.items():
        try:
            pairs.append([encode(key, used), None])
        except Unsupported as exc:
            raise exc.inside("dict key") from None
        try:
            pairs[-1][1] = encode(item, used)
        except Unsupported as exc:
            raise exc.inside("key", key) from None
    return {TAG: "dict", VALUE: pairs}


def _datetime(value: datetime, _used: set[str]) -> tuple[str, Any]:
    return "datetime", value.isoformat()


def _page_method(value: Any, used: set[str]) -> tuple[str, Any]:
    if not isinstance(value.method, str):
        raise Unsupported(value, f"a PageMethod of the callable {function_name(value.method)}",
                          "only a Page method named by a string can")
    kwargs = {}
    for key, item in value.kwargs.items():
        try:
            kwargs[key] = encode(item, used)
        except Unsupported as exc:
            raise exc.inside("kwargs", key) from None
    args = _sequence(value.args, used, "args")
    return "PageMethod", [value.method, args, kwargs]


_Encoder = Callable[[Any, set[str]], tuple[str, Any]]
_ENCODERS: dict[type, _Encoder] = {
    tuple: lambda v, used: ("tuple", _sequence(v, used)),
    set: lambda v, used: ("set", _sequence(v, used, "set")),
    frozenset: lambda v, used: ("frozenset", _sequence(v, used, "set")),
    bytes: lambda v, _used: ("bytes", base64.b64encode(v).decode("ascii")),
    datetime: _datetime,
    date: lambda v, _used: ("date", v.isoformat()),
    timedelta: lambda v, _used: ("timedelta", [v.days, v.seconds, v.microseconds]),
    Decimal: lambda v, _used: ("Decimal", str(v)),
}



# -- decoding ---------------------------------------------------------------------------
def decode(value: Any) -> Any:
    """The value that :func:`encode` wrote as *value* (parsed JSON); :class:`Undecodable`
    for a malformed tagged value, ``RecursionError`` for one nested too deeply."""
    kind = type(value)
    if kind is list:
        return [decode(item) for item in value]
    if kind is dict:
        if TAG in value:
            return _tagged(value)
        return {key: decode(item) for key, item in value.items()}
    return value


def _tagged(value: dict[str, Any]) -> Any:
    name, payload = value[TAG], value.get(VALUE)
    decoder = _DECODERS.get(name) if type(name) is str else None
    if decoder is None:
        raise Undecodable(f"unknown type tag {str(name)[:40]!r} (known: {', '.join(_DECODERS)})")
    if len(value) != 2 or VALUE not in value:
        raise Undecodable(f"a {name} tag must hold exactly {TAG!r} and {VALUE!r}")
    try:
        return decoder(payload)
    except Undecodable:
        raise
    except (TypeError, ValueError, ArithmeticError) as exc:  # unhashable, bad text, overflow
        raise Undecodable(f"malformed {name}: {str(exc)[:200]}") from None


def _list(payload: Any) -> list[Any]:
    if type(payload) is not list:
        raise Undecodable("a list was expected")
    return [decode(item) for item in payload]


def _text(payload: Any) -> str:
    if type(payload) is not str:
        raise Undecodable("a string was expected")
    return payload


def _timedelta(payload: Any) -> timedelta:
    if type(payload) is not list or len(payload) != 3 or any(type(n) is not int for n in payload):
        raise Undecodable("[days, seconds, microseconds] was expected")
    return timedelta(days=payload[0], seconds=payload[1], microseconds=payload[2])


def _pairs(payload: Any) -> dict[Any, Any]:
    if type(payload) is not list or any(type(p) is not list or len(p) != 2 for p in payload):
        raise Undecodable("a list of [key, value] pairs was expected")
    return {decode(key): decode(item) for key, item in payload}


def _page_method_of(payload: Any) -> Any:
    if (type(payload) is not list or len(payload) != 3 or type(payload[0]) is not str
            or type(payload[1]) is not list or type(payload[2]) is not dict):
        raise Undecodable("[method, [args], {kwargs}] was expected")
    args, kwargs = _list(payload[1]), {key: decode(item) for key, item in payload[2].items()}
    page_method = page_method_class(load=True)
    if page_method is None:
        raise Undecodable("a PageMethod needs scrapy-playwright, which this worker lacks "
                          "(pip install scrapy-playwright)")
    return page_method(payload[0], *args, **kwargs)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "tuple": lambda p: tuple(_list(p)),
    "set": lambda p: set(_list(p)),
    "frozenset": lambda p: frozenset(_list(p)),
    "bytes": lambda p: base64.b64decode(_text(p), validate=True),
    "datetime": lambda p: datetime.fromisoformat(_text(p)),
    "date": lambda p: date.fromisoformat(_text(p)),
    "timedelta": _timedelta,
    "Decimal": lambda p: Decimal(_text(p)),
    "dict": _pairs,
    "PageMethod": _page_method_of,
}
#: every name a record's ``tags`` may list
TAGS = frozenset(_DECODERS)
