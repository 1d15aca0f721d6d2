"""Aligned text columns, for the text form of ``scrapy cluster status``."""

from __future__ import annotations

from collections.abc import Collection


def aligned(rows: list[list[str]], left: Collection[int] = (0,)) -> list[str]:
    """*rows* as lines of columns two spaces apart: the columns *left* left-aligned, the
    others (numbers) right-aligned; trailing blanks stripped."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) if i in left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return lines
