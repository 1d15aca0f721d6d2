"""Griffe extension (``extensions:`` of mkdocstrings' Python handler in ``mkdocs.yml``): the
docstrings' reStructuredText, in the Markdown that mkdocstrings renders.

The docstrings are written for Sphinx: roles such as ``:class:`KafkaScheduler``` and
``:mod:`~crawler.frontier.records```, and a paragraph ending in ``::`` before an indented
literal block. Each role becomes an optional cross-reference: a link when the API reference
documents its target, the name in code otherwise, with no warning (most docstrings name
internals the reference leaves out). A name is resolved in the scope of the object whose
docstring it is in, as Sphinx does; ``~`` shows its last part only. ``text::`` becomes
``text:``, whose indented block Markdown shows as code.
"""

from __future__ import annotations

import html
import re
from typing import Any

from griffe import Extension, NameResolutionError, Object

ROLE = re.compile(
    r":(?:py:)?(?P<role>mod|class|func|meth|attr|data|exc|obj|const|file):"
    r"`(?P<tilde>~?)(?P<target>[^`]+)`"
)
LITERAL = re.compile(r"(?P<before>\S?)(?P<space>[ \t]*)::$", re.MULTILINE)


def resolve(obj: Object, target: str) -> str:
    """The full path *target* names in the scope of *obj* (as written if unresolved). A
    dotted name that starts with a loaded package (``crawler.``) is already absolute."""
    head, dot, rest = target.lstrip(".").partition(".")
    if dot and head in obj.modules_collection.members:
        return target
    try:
        full = obj.resolve(head)
    except NameResolutionError:
        return target.lstrip(".")
    return full + dot + rest


def markdown(obj: Object, text: str) -> str:
    """*text*, a docstring of *obj*, with its roles and literal-block markers in Markdown."""

    def role(match: re.Match[str]) -> str:
        target = re.sub(r"\s+", "", match["target"])  # a role may be cut over two lines
        shown = target.rsplit(".", 1)[-1] if match["tilde"] else target.lstrip(".")
        code = f"<code>{html.escape(shown)}</code>"
        if match["role"] == "file":
            return code
        identifier = html.escape(resolve(obj, target), quote=True)
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    def literal(match: re.Match[str]) -> str:
        before = match["before"]
        return before + ":" if before and not match["space"] else before

    return LITERAL.sub(literal, ROLE.sub(role, text))


class SphinxRoles(Extension):
    """Rewrites every docstring of a loaded package, once all its modules are known."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        self._rewrite(pkg, set())

    def _rewrite(self, obj: Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, seen)  # type: ignore[arg-type]
