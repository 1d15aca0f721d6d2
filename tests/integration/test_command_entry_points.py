"""This package's commands need no ``COMMANDS_MODULE``: a new Scrapy project with only the
add-on line lists the ``fleet`` template and runs ``scrapy seed``, and a project without the
add-on keeps Scrapy's own ``crawl``. The ``scrapy`` of this virtualenv, where the package is
installed (its ``scrapy.commands`` entry points), in a project made by ``scrapy startproject``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer

from crawler.config.readers import ENV_SETTINGS

SCRAPY = str(Path(sys.executable).parent / "scrapy")
ADDON = 'ADDONS = {"crawler.addon.DistributedAddon": 0}\n'
SPIDER = 'import scrapy\n\n\nclass Pages(scrapy.Spider):\n    name = "pages"\n    start_urls = []\n'


def _env(**extra: str) -> dict[str, str]:
    """This environment without the crawler's or Scrapy's settings, plus *extra*."""
    env = {k: v for k, v in os.environ.items()
           if k not in ENV_SETTINGS and not k.startswith("SCRAPY_")}
    return {**env, **extra}


def _project(where: Path, name: str, addon: bool) -> Path:
    subprocess.run([SCRAPY, "startproject", name], cwd=where, check=True, env=_env(),
                   capture_output=True, timeout=60)
    root = where / name
    (root / name / "spiders" / "pages.py").write_text(SPIDER)
    if addon:
        with (root / name / "settings.py").open("a") as settings:
            settings.write(ADDON)
    return root


def _scrapy(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRAPY, *args], cwd=root, env=_env(**env), text=True,
                          capture_output=True, timeout=120)


def test_a_project_with_only_the_add_on_line_lists_the_fleet_template_and_seeds(
        stack: Any, crawl_id: str, tmp_path: Path) -> None:
    root = _project(tmp_path, "fresh", addon=True)
    assert "COMMANDS_MODULE" not in (root / "fresh" / "settings.py").read_text()
    listed = _scrapy(root)
    assert "seed " in listed.stdout and "cluster " in listed.stdout, listed.stdout
    templates = _scrapy(root, "genspider", "-l")
    assert templates.stdout.split()[:3] == ["Available", "templates:", "fleet"], templates
    url = "http://127.0.0.1:9/seeded"
    seeded = _scrapy(root, "seed", "pages", url, **stack.env(), CRAWL_ID=crawl_id)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    consumer = KafkaConsumer(f"{crawl_id}.seeds", bootstrap_servers=stack.env()[
        "KAFKA_BOOTSTRAP_SERVERS"], auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        values = [record.value for record in consumer]
    finally:
        consumer.close()
    assert values == [url.encode()]  # a seed as any client may write one: its URL


def test_a_project_without_the_add_on_keeps_scrapys_own_crawl(tmp_path: Path) -> None:
    """The control: ``REDIS_URL`` alone (as a scrapy-redis project sets it) is no partial
    configuration of this crawler there; with the add-on, the same is one line naming it."""
    plain = _scrapy(_project(tmp_path, "plain", addon=False), "crawl", "pages",
                    REDIS_URL="redis://127.0.0.1:9/0")
    assert plain.returncode == 0 and "'finish_reason': 'finished'" in plain.stderr, plain.stderr
    ours = _scrapy(_project(tmp_path, "ours", addon=True), "crawl", "pages",
                   REDIS_URL="redis://127.0.0.1:9/0")
    assert ours.returncode == 1, ours.stderr[-3000:]
    assert "Cannot start the crawl: Setting KAFKA_BOOTSTRAP_SERVERS" in ours.stderr
    assert "Traceback" not in ours.stderr


def test_listing_the_commands_imports_none_of_the_service_clients(tmp_path: Path) -> None:
    """Scrapy makes every command of the environment at each run, to list them: the stand-ins
    (crawler.scrapy_commands) import nothing of Kafka, Redis or MongoDB until one runs."""
    root = _project(tmp_path, "plain", addon=False)
    code = ("import sys; from scrapy.cmdline import _get_commands_dict; "
            "from scrapy.utils.project import get_project_settings; "
            "cmds = _get_commands_dict(get_project_settings(), True); "
            "[c.short_desc() for c in cmds.values()]; "
            "print(sorted(cmds)); print(sorted(m for m in ('kafka', 'redis', 'pymongo', "
            "'crawler.frontier') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=_env(), text=True,
                         capture_output=True, timeout=60, check=True).stdout.splitlines()
    assert "'seed'" in out[0] and "'cluster'" in out[0], out
    assert out[1] == "[]", out
