"""Scrapy's remote control (2.19: on by default; an HTTP server that runs the Python code it
is sent) is off under the add-on unless the project turns it on, and then not even imported.

The crawls run in a fresh interpreter: other tests of this process may have imported aiohttp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings
from support.onecrawl import one_crawl

from crawler.addon import DistributedAddon

pytestmark = pytest.mark.unit

ADDON = {"ADDONS": {"crawler.addon.DistributedAddon": 0}}
REMOTE_CONTROL = "scrapy.extensions.remote_control.RemoteControl"
LISTENING = "Remote control HTTP server listening"


def extensions(project: dict[str, Any], addon: bool = True) -> list[str]:
    """The extensions of a crawl with the *project*'s settings, after the add-on's changes
    (Scrapy's get_crawler would set REMOTE_CONTROL_ENABLED itself, at the project's priority)."""
    settings = Settings(project)
    if addon:
        DistributedAddon().update_settings(settings)
    return list(settings.get_component_priority_dict_with_base("EXTENSIONS"))


def test_off_with_the_addon_on_when_the_project_asks() -> None:
    assert REMOTE_CONTROL in extensions({}, addon=False), "Scrapy's default changed"
    assert REMOTE_CONTROL not in extensions({})
    assert REMOTE_CONTROL in extensions({"REMOTE_CONTROL_ENABLED": True})
    assert REMOTE_CONTROL not in extensions({"REMOTE_CONTROL_ENABLED": False})  # not imported


def crawl(tmp_path: Path, settings: dict[str, Any]) -> tuple[dict[str, Any], str]:
    settings = {**settings, "LOG_LEVEL": "INFO", "REMOTE_CONTROL_JOBS_DIR": str(tmp_path / "jobs")}
    seen, log = one_crawl(tmp_path, settings, roots=("aiohttp",))
    seen["aiohttp"] = "aiohttp" in seen["modules"]
    return seen, log


def test_a_crawl_with_the_addon_neither_listens_nor_imports_it(tmp_path: Path) -> None:
    seen, log = crawl(tmp_path, ADDON)
    assert seen["items"] == 1 and "DownloadErrorLog" in seen["extensions"]  # the add-on ran
    assert "RemoteControl" not in seen["extensions"] and LISTENING not in log
    assert not seen["aiohttp"]
    # the control: asked for, it listens (and the check above could see it)
    seen, log = crawl(tmp_path, {**ADDON, "REMOTE_CONTROL_ENABLED": True})
    assert "RemoteControl" in seen["extensions"] and LISTENING in log and seen["aiohttp"]
