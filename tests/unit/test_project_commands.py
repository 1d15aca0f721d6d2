"""``scrapy genspider`` and ``scrapy check`` of ``crawler.commands``: the project finds them,
genspider finds this package's templates ahead of Scrapy's and the tutorial shows what it
writes, and check runs on one node whatever the connection settings say."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import tomllib
from pathlib import Path

import pytest
import scrapy
from scrapy.cmdline import _get_commands_from_module
from scrapy.commands import ScrapyCommand
from scrapy.commands.genspider import Command as ScrapyGenspider
from scrapy.settings import Settings

from crawler import addon, scrapy_commands
from crawler.addon import distributed
from crawler.commands import check, genspider, runspider
from crawler.config.readers import SERVICE_SETTINGS, configured_services

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorials" / "add-a-site.md"
SERVICES = {"KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "REDIS_URL": "redis://redis:6379/0",
            "MONGO_URI": "mongodb://mongo/"}
ADDONS = {"crawler.addon.DistributedAddon": 0}


def _options(command: ScrapyCommand, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_options(parser)
    return parser.parse_args(argv)


def _genspider(settings: dict[str, object] | None = None) -> genspider.Command:
    command = genspider.Command()
    command.settings = Settings(settings or {"BOT_NAME": "tutorial"})
    return command


def test_the_project_gets_these_commands_from_commands_module() -> None:
    commands = _get_commands_from_module("crawler.commands", True)
    assert isinstance(commands["genspider"], genspider.Command)
    assert isinstance(commands["check"], check.Command)
    assert isinstance(commands["runspider"], runspider.Command)  # marks the imports' end


def test_the_genspider_hooks_overridden_here_are_in_scrapy() -> None:
    """An upgrade that renames them would leave ``-t fleet`` unfound: fail here first."""
    hooks = {"_find_template": ["self", "template"], "_list_templates": ["self"],
             "_generate_template_variables": ["self", "module", "name", "url",
                                              "template_name"]}
    for name, params in hooks.items():
        method = getattr(ScrapyGenspider, name, None)
        assert callable(method), f"Scrapy {scrapy.__version__}: no genspider {name}"
        assert list(inspect.signature(method).parameters) == params, name


def test_templates_are_found_here_first_then_in_scrapy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    command = _genspider()
    assert command._find_template("fleet") == genspider.TEMPLATES / "fleet.tmpl"
    assert command._find_template("fleet.tmpl") == genspider.TEMPLATES / "fleet.tmpl"
    assert command._find_template("basic") == Path(command.templates_dir, "basic.tmpl")
    assert command._find_template("nope") is None
    (tmp_path / "fleet.tmpl").write_text("mine")  # a file given by its path wins, as in Scrapy
    assert command._find_template("fleet") == Path("fleet.tmpl")


def test_the_templates_ship_in_the_wheel_as_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["crawler"]
    shipped = {path for pattern in patterns for path in (REPO / "crawler").glob(pattern)}
    templates = set((REPO / "crawler" / "templates").rglob("*"))
    assert genspider.TEMPLATES / "fleet.tmpl" in shipped
    assert {p for p in templates if p.is_file()} <= shipped


def test_the_list_has_this_packages_templates_and_scrapys(
        capsys: pytest.CaptureFixture[str]) -> None:
    _genspider()._list_templates()
    listed = capsys.readouterr().out.split()
    assert listed[:3] == ["Available", "templates:", "fleet"]
    assert {"basic", "crawl", "csvfeed", "xmlfeed"} <= set(listed)


@pytest.mark.parametrize(("url", "hostname", "domain"), [
    ("http://127.0.0.1:8000/", "127.0.0.1", "127.0.0.1:8000"),
    ("https://Example.COM/shop", "example.com", "Example.COM"),
    ("http://[::1]:81/", "::1", "[::1]:81"),
])
def test_hostname_is_the_urls_host_without_its_port(url: str, hostname: str,
                                                    domain: str) -> None:
    variables = _genspider()._generate_template_variables("pages", "pages", url, "fleet")
    assert (variables["hostname"], variables["domain"]) == (hostname, domain)


def test_the_tutorial_shows_the_spider_the_template_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = TUTORIAL.read_text()
    shown = re.search(r"^<!-- genspider writes: tutorial/spiders/pages\.py -->\n```python\n"
                      r"(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert shown is not None and "scrapy genspider -t fleet pages " in text
    monkeypatch.chdir(tmp_path)
    command = _genspider()
    command.run(["pages", "http://127.0.0.1:8000/"], _options(command, "-t", "fleet"))
    assert (tmp_path / "pages.py").read_text() == shown.group(1)


def _checked(monkeypatch: pytest.MonkeyPatch, *argv: str,
             addons: dict[str, int] = ADDONS) -> tuple[check.Command, Settings]:
    """``scrapy check`` options processed for a project with the add-on (*addons*) that sets
    every connection setting, with the environment setting them too."""
    for name, value in SERVICES.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    settings.setdict({**SERVICES, "ADDONS": addons}, priority="project")
    assert distributed(settings)
    command = check.Command()
    command.settings = settings
    command.process_options([], _options(command, *argv))
    return command, settings


def test_check_runs_on_one_node_though_every_connection_setting_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    command, settings = _checked(monkeypatch, "-s", "REDIS_URL=redis://elsewhere/0")
    assert sorted(command.unset) == sorted(SERVICE_SETTINGS)
    with check.without_services() as from_environment:
        assert sorted(from_environment) == sorted(SERVICE_SETTINGS)
        assert configured_services(settings) == [] and not distributed(settings)
    assert {name: os.environ[name] for name in SERVICES} == SERVICES  # given back


def test_check_knows_start_url_unless_the_project_switched_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, settings = _checked(monkeypatch)
    assert settings.getdict("SPIDER_CONTRACTS") == {check.START_URL_CONTRACT: 1}
    settings = Settings({"SPIDER_CONTRACTS": {check.START_URL_CONTRACT: None, "my.C": 5}})
    check.add_contract(settings)
    assert settings.getdict("SPIDER_CONTRACTS") == {check.START_URL_CONTRACT: None, "my.C": 5}


def test_check_is_scrapys_own_in_a_project_without_the_add_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    command, settings = _checked(monkeypatch, addons={})
    assert command.unset == () and settings.getdict("SPIDER_CONTRACTS") == {}


def _entry_points() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"]["scrapy.commands"])


def test_every_command_is_an_entry_point_standing_in_for_the_command_of_its_name() -> None:
    commands = _get_commands_from_module("crawler.commands", True)
    points = _entry_points()
    assert sorted(points) == sorted(commands)  # no COMMANDS_MODULE needed for any of them
    for name, target in points.items():
        module, _, attr = target.partition(":")
        standin = getattr(importlib.import_module(module), attr)()
        assert isinstance(standin, scrapy_commands.Standin), name
        assert standin.short_desc() == commands[name].short_desc(), name
        standin.settings = Settings({"BOT_NAME": "x"})  # set by Scrapy before syntax()
        assert standin.syntax() == commands[name].syntax(), name  # it became the command
        assert type(standin) is type(commands[name]), name
        assert standin.settings["BOT_NAME"] == "x", name  # what Scrapy had set is kept


@pytest.mark.parametrize(("settings", "enabled"), [
    ({"ADDONS": {"crawler.addon.DistributedAddon": 0}}, True),
    ({"ADDONS": {addon.DistributedAddon: 10}}, True),
    ({"ADDONS": {"crawler.addon.DistributedAddon": None}}, False),  # switched off
    ({"ADDONS": {"other.Addon": 0}}, False),
    ({"COMMANDS_MODULE": "crawler.commands"}, True),
    ({}, False),
])
def test_the_commands_are_this_packages_only_where_the_project_enables_it(
        settings: dict[str, object], enabled: bool) -> None:
    assert addon.enabled(Settings(settings)) is enabled
