"""Every module of the package imports on its own, first, in a fresh interpreter: an import
cycle that the usual order (``scrapy crawl`` imports the frontier before the rest) hides
fails here. One subprocess imports each module after forgetting every ``crawler`` module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "crawler"

PROBE = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "crawler" or m.startswith("crawler.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        failed[name] = repr(exc)
print(json.dumps(failed))
"""


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def test_every_module_imports_first() -> None:
    modules = _modules()
    assert "crawler.ledger.balance" in modules and "crawler.extensions.metrics" in modules
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(modules)],
                          capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(proc.stdout.splitlines()[-1]) == {}
