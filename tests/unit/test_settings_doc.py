"""docs/settings.md lists every setting of crawler/config/defaults.py with its default.

The other pages' settings tables (retry.md, ratelimit.md, ...) must agree with the defaults too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from crawler.config import readers

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(r"^\|\s*`(?P<name>[A-Z][A-Z0-9_]*)`(?P<note>[^|]*)\|(?P<default>[^|]*)\|", re.M)
EMPTY = ("", [], {})


def documented(path: Path) -> dict[str, str]:
    """``{setting: default cell}`` of every settings-table row of *path*, Scrapy's excluded."""
    rows: dict[str, str] = {}
    for match in ROW.finditer(path.read_text(encoding="utf-8")):
        if "(Scrapy)" not in match["note"]:
            rows.setdefault(match["name"], match["default"].strip())
    return rows


def literal(cell: str) -> tuple[bool, Any]:
    """``(comparable, value)`` of a default cell: ``empty``, or a leading `code` span."""
    if cell == "empty":
        return True, EMPTY
    code = re.match(r"^`([^`]*)`", cell)
    if code is None:
        return False, None  # prose, e.g. "the spider's name"
    try:
        return True, ast.literal_eval(code[1])
    except (ValueError, SyntaxError):
        return True, code[1]  # a bare word: host, majority, a class path


def differs(name: str, cell: str) -> bool:
    comparable, value = literal(cell)
    if not comparable:
        return False
    expected = readers.default(name)
    if value is EMPTY:
        return expected not in EMPTY
    if isinstance(expected, bool) or isinstance(value, bool):
        return value is not expected
    if isinstance(expected, (list, dict)) and isinstance(value, tuple):
        value = list(value)
    return bool(value != expected or type(value) is not type(expected))


def test_every_default_is_documented_in_settings_md() -> None:
    rows = documented(DOCS / "settings.md")
    missing = [name for name in readers.names() if name not in rows]
    assert not missing, f"docs/settings.md lacks {', '.join(missing)}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_documented_defaults_match_defaults_py(page: str) -> None:
    known = set(readers.names())
    rows = {n: c for n, c in documented(DOCS / page).items() if n in known}
    wrong = {n: c for n, c in rows.items() if differs(n, c)}
    assert not wrong, "\n".join(f"docs/{page}: {n} documented as {c}, defaults.py has "
                                f"{readers.default(n)!r}" for n, c in wrong.items())


def test_the_comparison_catches_a_wrong_default() -> None:
    assert differs("RATELIMIT_RATE", "`2.0`")
    assert differs("RATELIMIT_RATE", "`1`")  # an int where the default is a float
    assert differs("MONGO_JOURNAL", "`False`")
    assert differs("MONGO_DATABASE", "empty")
    assert differs("PROXY_WHEN_NONE", "`direct`")
    assert not differs("PROXY_WHEN_NONE", "`wait`")
    assert not differs("MONGO_KEY_FIELDS", '`["url"]`')
    assert not differs("REDIS_URL", "empty")
    assert not differs("CRAWL_ID", "the spider's name")
