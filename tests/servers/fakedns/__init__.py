"""Made-up host names for worker processes (``sitecustomize.py`` here does the mapping)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker_env(names: Mapping[str, str]) -> dict[str, str]:
    """The environment that makes a worker resolve each of *names* to its address."""
    path = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path),
            "FAKE_DNS": ",".join(f"{name}={address}" for name, address in names.items())}
