"""The docs site's build hooks (``docs/hooks/``): links to repository files outside ``docs/``
are checked and rewritten, README.md is included with its links rebased, and the docstrings'
Sphinx roles become optional cross-references. The strict build itself runs in ``./run tests``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from griffe import load_extensions, temporary_visited_package

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


repo_links = _load("repo_links")
sphinx_roles = _load("sphinx_roles")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a docs page, a package file and a README that links into docs/."""
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "docs" / "guide" / "page.md").write_text("# Page\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "README.md").write_text(
        "See [the guide](docs/guide/page.md#setup) and [`pkg/mod.py`](pkg/mod.py).\n")
    return tmp_path


def _rewrite(repo: Path, markdown: str, url: str = "") -> tuple[str, list[str]]:
    site = repo_links.Site(repo=repo, docs=repo / "docs", repository_files=url)
    page = repo / "docs" / "guide" / "page.md"
    done = repo_links.rewrite(markdown, site=site, source=page, page=page)
    return done.markdown, done.problems


def test_a_repository_file_becomes_its_path_or_its_url(repo: Path) -> None:
    text = "[`pkg/mod.py`](../../pkg/mod.py) and [the module](../../pkg/mod.py#L1 \"t\")"
    assert _rewrite(repo, text) == ("`pkg/mod.py` and the module (`pkg/mod.py`)", [])
    linked, problems = _rewrite(repo, text, url="https://git.example/r/blob/main/")
    assert problems == []
    assert linked == ("[`pkg/mod.py`](https://git.example/r/blob/main/pkg/mod.py) and "
                      '[the module](https://git.example/r/blob/main/pkg/mod.py#L1 "t")')


def test_a_link_to_nothing_is_a_problem_and_stays(repo: Path) -> None:
    text = "[gone](../../pkg/gone.py), [out](../../../elsewhere.txt), ![img](../../pkg/mod.py)"
    markdown, problems = _rewrite(repo, text)
    assert markdown == text
    assert problems == [
        "links to '../../pkg/gone.py', which is not in the repository",
        "links to '../../../elsewhere.txt', which is not in the repository",
        "shows image '../../pkg/mod.py', which is outside docs/",
    ]


def test_links_inside_docs_urls_and_code_are_left_alone(repo: Path) -> None:
    text = ("[o](../other.md#a) [u](https://x.example/a.md) [s](#here)\n"
            "`[c](../../pkg/gone.py)`\n```\n[f](../../pkg/gone.py)\n```\n")
    assert _rewrite(repo, text) == (text, [])


def test_readme_is_included_with_its_links_rebased(repo: Path) -> None:
    site = repo_links.Site(repo=repo, docs=repo / "docs")
    page = repo / "docs" / "index.md"
    done = repo_links.include("# Home\n<!-- include: README.md -->\n", site=site, page=page)
    assert done.problems == []
    assert done.markdown == ("# Home\nSee [the guide](guide/page.md#setup) and `pkg/mod.py`.\n\n")
    missing = repo_links.include("<!-- include: NOPE.md -->", site=site, page=page)
    assert missing.problems == ["includes 'NOPE.md', which is not in the repository"]


def test_sphinx_roles_become_optional_crossrefs() -> None:
    code = {
        "b.py": "class Thing:\n    '''A thing.'''\n",
        "c.py": ("'''Uses :class:`Thing`, :mod:`~pkg.b`, :func:`crawler.x.y`, :file:`a/b`.\n\n"
                 "Enable it::\n\n    X = 1\n'''\nfrom pkg.b import Thing\n\n"
                 "class User:\n    '''Has :class:`pkg.b.Thing` though its attribute is pkg.'''\n"
                 "    def __init__(self) -> None:\n        self.pkg = 1\n"),
    }
    with temporary_visited_package(
            "pkg", code, extensions=load_extensions(sphinx_roles.SphinxRoles)) as package:
        module_doc = package["c"].docstring.value
        class_doc = package["c.User"].docstring.value
    assert module_doc == (
        'Uses <autoref identifier="pkg.b.Thing" optional><code>Thing</code></autoref>, '
        '<autoref identifier="pkg.b" optional><code>b</code></autoref>, '
        '<autoref identifier="crawler.x.y" optional><code>crawler.x.y</code></autoref>, '
        "<code>a/b</code>.\n\nEnable it:\n\n    X = 1")
    assert 'identifier="pkg.b.Thing"' in class_doc  # absolute, not the attribute self.pkg
