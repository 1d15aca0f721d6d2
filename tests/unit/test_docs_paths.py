"""The docs name only paths that exist: every ``crawler.…`` dotted path in ``README.md`` and
``docs/`` imports (a module, or a name in one), every ``python -m`` module has a ``__main__``
block, and every file path of the repository they mention is there.

``docs/migration.md`` is read by its tables: the paths of a "before" column are the ones that
are gone (none may resolve, but a module that became a package), those of a "now" column must.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
MIGRATION = REPO / "docs" / "migration.md"

DOTTED = re.compile(r"(?<![\w./-])crawler(?:\.[A-Za-z_]\w*)+")
RUN_MODULE = re.compile(r"python -m ((?:crawler|servers)(?:\.\w+)+)")
FILE = re.compile(r"(?<![\w./-])((?:crawler|tests|benchmarks|deploy|docs)/[\w./-]*\w)")
# Mentions that are not paths of this package: Scrapy's Crawler attribute, a file name.
NOT_PATHS = {"crawler.request_fingerprinter", "crawler.egg"}
NOT_FILES = {"deploy/.env",  # written by the user of the compose stack
             "deploy/secured/certs",  # the secured stack's certificates, generated (git-ignored)
             "tests/fuzz/.corpus"}  # the long fuzz run's corpus, made by that run (git-ignored)


def resolve(path: str) -> object | None:
    """The module or object *path* names, or None: the longest importable module prefix,
    then attributes. An import error inside an existing module is raised, not hidden."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent is not a package
            found = False
        if not found:
            continue
        target: object = importlib.import_module(name)
        for attr in parts[i:]:
            if not hasattr(target, attr):
                return None
            target = getattr(target, attr)
        return target
    return None


def _rel(doc: Path) -> str:
    return doc.relative_to(REPO).as_posix()


def _table_columns(text: str) -> tuple[list[str], list[str]]:
    """The cells of the "before" and of the "now" columns of every table in *text*."""
    before: list[str] = []
    now: list[str] = []
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = [c.lower() for c in cells]
            continue
        if set(cells) <= {"---", ""}:
            continue
        for name, cell in zip(header, cells, strict=False):
            {"before": before, "now": now}.get(name, []).append(cell)
    return before, now


def _dotted(text: str) -> set[str]:
    return set(DOTTED.findall(text)) - NOT_PATHS


def test_the_docs_mention_crawler_paths() -> None:
    assert len({p for doc in DOCS for p in _dotted(doc.read_text())}) > 30
    assert MIGRATION in DOCS


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_dotted_path_resolves(doc: Path) -> None:
    text = doc.read_text()
    gone: set[str] = set()
    if doc == MIGRATION:
        gone = {p for cell in _table_columns(text)[0] for p in _dotted(cell)}
    unresolved = sorted(p for p in _dotted(text) - gone if resolve(p) is None)
    assert unresolved == [], f"{_rel(doc)} names paths that do not import: {unresolved}"


def test_migration_before_paths_are_gone_and_now_paths_resolve() -> None:
    before, now = _table_columns(MIGRATION.read_text())
    assert len(before) == len(now) > 30
    old = {p for cell in before for p in _dotted(cell)}
    new = {p for cell in now for p in _dotted(cell)}
    assert "crawler.scheduler.KafkaScheduler" in old and "crawler.frontier.KafkaScheduler" in new
    still = sorted(p for p in old if not _became_package(resolve(p)))
    assert still == [], f"'before' paths that still resolve to the same kind of thing: {still}"
    assert sorted(p for p in new if resolve(p) is None) == []


def _became_package(target: object | None) -> bool:
    """True for a path that is gone (None) or now names a package (a module turned into one)."""
    return target is None or (isinstance(target, ModuleType) and hasattr(target, "__path__"))


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_python_m_module_runs(doc: Path) -> None:
    text = doc.read_text()
    gone = set()
    if doc == MIGRATION:
        gone = {m for cell in _table_columns(text)[0] for m in RUN_MODULE.findall(cell)}
    for module in sorted(set(RUN_MODULE.findall(text)) - gone):
        origin = _module_file(module)
        assert origin is not None, f"{_rel(doc)}: python -m {module}: no such module"
        assert 'if __name__ == "__main__":' in origin.read_text(), (
            f"{_rel(doc)}: python -m {module} has no __main__ block")


def _module_file(module: str) -> Path | None:
    if module.startswith("servers."):  # the test servers, run from tests/
        path = REPO / "tests" / (module.replace(".", "/") + ".py")
        return path if path.exists() else None
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec and spec.origin else None


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_repository_file_path_exists(doc: Path) -> None:
    missing = sorted(p for p in set(FILE.findall(doc.read_text())) - NOT_FILES
                     if not (REPO / p).exists() and not (doc.parent / p).exists())  # a link
    assert missing == [], f"{_rel(doc)} names files that are not in the repository: {missing}"
