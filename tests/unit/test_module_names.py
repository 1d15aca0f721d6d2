"""pytest imports test modules by their basename (rootdir import mode): two test files of one
name in different folders stop the whole run at collection (it happened twice)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_its_own_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1]
