"""The dashboard page is self-contained: it loads nothing from elsewhere and has every element
its script fills in (served, and live over two workers: tests/e2e/test_dashboard.py)."""

from __future__ import annotations

import re

from crawler.operations.dashboard_page import PAGE


def test_page_loads_nothing_external():
    assert not re.search(r"(src|href)\s*=|https?://|@import|url\(", PAGE, re.IGNORECASE)
    for name in ("pages-per-second", "nodes-count", "acked-total", "lag-total", "failures",
                 "bloom-fill", "proxies-alive", "nodes-body", "chart-line", "proxy-blame",
                 "proxy-blame-detail", "proxies-body", "proxies-more", "hosts-body",
                 "hosts-note"):
        assert f'id="{name}"' in PAGE
