"""The generated demo site of the ``site_dir`` fixture (tests/conftest.py): its size."""

from __future__ import annotations

PAGES = 200
