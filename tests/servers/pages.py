"""The HTML page the test sites answer: a title and one link per line."""

from __future__ import annotations


def link_page(title: str, hrefs: list[str]) -> bytes:
    """A page titled *title* that links to each of *hrefs* (the link text is the href)."""
    body = "".join(f'<a href="{href}">{href}</a>\n' for href in hrefs)
    return f"<html><head><title>{title}</title></head><body>{body}</body></html>".encode()
