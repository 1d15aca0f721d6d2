"""MkDocs hook (``hooks:`` in ``mkdocs.yml``): links from the docs to the repository's other
files, checked, and README.md shown as the site's home page.

MkDocs checks links between the pages of ``docs/`` (a broken one fails ``mkdocs build
--strict``) but not a link to a file outside ``docs/``, such as
``../crawler/config/defaults.py``: no such file is on the site. This hook checks those: the
target must be a file or folder of the repository, or the hook logs a WARNING, which fails
the strict build. An existing target becomes a link to the file on the repository's web
host when ``extra.repository_files`` (a URL prefix, ``https://github.com/OWNER/REPO/blob/main/``)
is set in ``mkdocs.yml``; without it, the link's text followed by the repository path in code.

A line ``<!-- include: README.md -->`` in a page (``docs/index.md``) is replaced by that
file, its links rebased from the file's folder onto the page: README's ``docs/delivery.md``
becomes ``delivery.md``, which MkDocs checks; its other links follow the rule above.

Fenced code blocks and code spans are left as they are. The pure part, :func:`rewrite`,
returns the problems it found instead of logging them (``tests/unit/test_docs_hooks.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

log = get_plugin_logger("repo_links")

INCLUDE = re.compile(r"^<!-- include: (?P<path>[\w./-]+) -->[ \t]*$", re.MULTILINE)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# A code span (kept) or an inline link or image: [text](target "title").
INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+).+?(?P=ticks))"
    r"|(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\(\s*(?P<target>[^\s()]+)(?P<title>\s+\"[^\"]*\")?\s*\)"
)
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|#|/)")


@dataclass(frozen=True)
class Site:
    """Where the repository and the docs are, and the URL prefix of a repository file."""

    repo: Path
    docs: Path
    repository_files: str = ""


@dataclass
class Rewrite:
    """What a page's Markdown is rewritten to, and the links that point nowhere."""

    markdown: str
    problems: list[str] = field(default_factory=list)


def rewrite(markdown: str, *, site: Site, source: Path, page: Path) -> Rewrite:
    """*markdown*, written in file *source* and shown as page *page* (both absolute), with
    its links to files outside ``docs/`` checked and rewritten, and its links into ``docs/``
    made relative to *page* (they already are when *source* is *page*)."""
    result = Rewrite(markdown="")
    link = _linker(site, source, page, result.problems)
    out: list[str] = []
    for chunk, is_code in _chunks(markdown):
        out.append(chunk if is_code else INLINE.sub(link, chunk))
    result.markdown = "".join(out)
    return result


def _chunks(markdown: str) -> list[tuple[str, bool]]:
    """*markdown* cut into runs of lines, each flagged True if inside a fenced code block."""
    chunks: list[tuple[str, bool]] = []
    fence = ""
    for line in markdown.splitlines(keepends=True):
        opened = FENCE.match(line)
        if not fence and opened:
            fence = opened.group(1)
        elif fence and opened and opened.group(1).startswith(fence):
            chunks.append((line, True))
            fence = ""
            continue
        inside = bool(fence)
        if chunks and chunks[-1][1] == inside:
            chunks[-1] = (chunks[-1][0] + line, inside)
        else:
            chunks.append((line, inside))
    return chunks


def _linker(site: Site, source: Path, page: Path,
            problems: list[str]) -> Callable[[re.Match[str]], str]:
    def link(match: re.Match[str]) -> str:
        if match["code"] or EXTERNAL.match(match["target"]):
            return match[0]
        path, _, fragment = match["target"].partition("#")
        target = Path(os.path.normpath(source.parent / path))
        anchor = f"#{fragment}" if fragment else ""
        if target.is_relative_to(site.docs):
            relative = os.path.relpath(target, page.parent) if path else ""
            return _replace(match, Path(relative).as_posix() + anchor)
        if not target.is_relative_to(site.repo) or not target.exists():
            problems.append(f"links to '{match['target']}', which is not in the repository")
            return match[0]
        if match["bang"]:
            problems.append(f"shows image '{match['target']}', which is outside docs/")
            return match[0]
        in_repo = target.relative_to(site.repo).as_posix()
        if site.repository_files:
            return _replace(match, site.repository_files + in_repo + anchor)
        if match["text"].strip("`") in (in_repo, match["target"]):
            return f"`{in_repo}`"
        return f"{match['text']} (`{in_repo}`)"
    return link


def _replace(match: re.Match[str], target: str) -> str:
    return f"{match['bang']}[{match['text']}]({target}{match['title'] or ''})"


def include(markdown: str, *, site: Site, page: Path) -> Rewrite:
    """*markdown* with each ``<!-- include: PATH -->`` line replaced by the repository file
    PATH, rebased onto *page*."""
    problems: list[str] = []

    def included(match: re.Match[str]) -> str:
        source = site.repo / match["path"]
        if not source.is_file():
            problems.append(f"includes '{match['path']}', which is not in the repository")
            return match[0]
        done = rewrite(source.read_text(encoding="utf-8"), site=site, source=source, page=page)
        problems.extend(done.problems)
        return done.markdown

    return Rewrite(markdown=INCLUDE.sub(included, markdown), problems=problems)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """The MkDocs event: a page's Markdown, its links checked and its includes expanded."""
    site = Site(repo=Path(config.config_file_path).resolve().parent,
                docs=Path(config.docs_dir).resolve(),
                repository_files=str(config.extra.get("repository_files") or ""))
    source = Path(page.file.abs_src_path or site.docs / page.file.src_path).resolve()
    done = rewrite(markdown, site=site, source=source, page=source)
    included = include(done.markdown, site=site, page=source)
    for problem in done.problems + included.problems:
        log.warning("Doc file '%s' %s", page.file.src_uri, problem)
    return included.markdown
