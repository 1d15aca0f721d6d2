"""A real local scrapyd: ``scrapyd-deploy`` uploads the egg, ``schedule.json`` runs it.

One scrapyd per module, on a free loopback port, configured by its own ``scrapyd.conf`` in a
temporary directory (its eggs, logs, items and databases live there too) and stopped by PID.
The project is deployed from a temporary copy (``crawler/``, ``pyproject.toml`` and the
committed ``scrapy.cfg`` plus a ``[deploy:local-test]`` target at the test port), because
``scrapyd-deploy`` writes a ``setup.py`` and ``build/`` into the directory it deploys from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import require, tracebacks_outside_kafka
from pymongo import MongoClient

from crawler.localstack import demo_site as site
from crawler.localstack.secured import SecuredStack
from crawler.localstack.services import HOST, free_port
from crawler.localstack.stack import Stack

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROJECT = "crawler"
TARGET = "local-test"
START_TIMEOUT = 30.0
JOB_TIMEOUT = 60.0


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    """Skip without scrapyd and scrapyd-deploy; fail instead when CI=true."""
    require((BIN / "scrapyd").exists() and (BIN / "scrapyd-deploy").exists(),
            "scrapyd and scrapyd-client are not installed in this environment")


HTTP_TIMEOUT = 60.0  # seconds for one scrapyd API call

@dataclass
class Scrapyd:
    url: str  # with a trailing slash
    root: Path  # its working directory: scrapyd.conf, eggs/, logs/, items/, dbs/
    deploy_output: str

    # scrapyd answers within milliseconds, but a CI run's load held schedule.json past 10 s
    # once (2026-12-06: TimeoutError in the secured-stack job, which passes alone in 17 s)
    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(self.url + endpoint + query, timeout=HTTP_TIMEOUT) as response:
            data: dict[str, Any] = json.load(response)
        return data

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
        body = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(self.url + endpoint, data=body,
                                    timeout=HTTP_TIMEOUT) as response:
            data: dict[str, Any] = json.load(response)
        assert data.get("status") == "ok", data
        return data

    def log(self, spider: str, job: str) -> str:
        return (self.root / "logs" / PROJECT / spider / f"{job}.log").read_text(errors="replace")


def _write_config(root: Path, port: int) -> None:
    (root / "scrapyd.conf").write_text(
        "[scrapyd]\n"
        f"bind_address = {HOST}\n"
        f"http_port = {port}\n"
        f"eggs_dir = {root / 'eggs'}\n"
        f"logs_dir = {root / 'logs'}\n"
        f"items_dir = {root / 'items'}\n"
        f"dbs_dir = {root / 'dbs'}\n"
        "max_proc = 2\n"
        "poll_interval = 0.5\n"
    )


def _wait_until_up(server: Scrapyd, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"scrapyd exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if server.get("daemonstatus.json").get("status") == "ok":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"scrapyd did not answer daemonstatus.json:\n{log.read_text()}")


def _project_copy(directory: Path, url: str) -> Path:
    """The project as ``scrapyd-deploy`` sees it, with a deploy target at *url*."""
    shutil.copytree(REPO / "crawler", directory / "crawler",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(REPO / "pyproject.toml", directory / "pyproject.toml")
    cfg = (REPO / "scrapy.cfg").read_text()
    cfg += f"\n[deploy:{TARGET}]\nurl = {url}\nproject = {PROJECT}\n"
    (directory / "scrapy.cfg").write_text(cfg)
    return directory


def _stop(proc: subprocess.Popen[bytes], server: Scrapyd) -> None:
    if proc.poll() is None:
        try:  # jobs still running after a failure: scrapyd kills its own children
            for job in server.get("listjobs.json")["running"]:
                server.post("cancel.json", [("project", job["project"]), ("job", job["id"]),
                                            ("signal", "KILL")])
        except (OSError, ValueError, AssertionError):
            pass
        proc.terminate()  # SIGTERM to the PID we started
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def _serving(root: Path, env: dict[str, str] | None = None) -> Iterator[Scrapyd]:
    """A running scrapyd in *root* (its environment: *env*, else this process's), with this
    project deployed to it (project ``crawler``)."""
    port = free_port()
    _write_config(root, port)
    log = root / "scrapyd.out"
    with log.open("wb") as out:
        # cwd=root: scrapyd reads ./scrapyd.conf (and twistd writes twistd.pid there).
        proc = subprocess.Popen([str(BIN / "scrapyd")], cwd=root, stdout=out, env=env,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Scrapyd(f"http://{HOST}:{port}/", root, "")
    try:
        _wait_until_up(server, proc, log)
        project = _project_copy(root / "deploy", server.url)
        deploy = subprocess.run(
            [str(BIN / "scrapyd-deploy"), TARGET, "--version", "1"],
            cwd=project, capture_output=True, text=True, timeout=120,
        )
        server.deploy_output = deploy.stdout + deploy.stderr
        assert deploy.returncode == 0, server.deploy_output
        yield server
    finally:
        _stop(proc, server)


@pytest.fixture(scope="module")
def scrapyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapyd]:
    with _serving(tmp_path_factory.mktemp("scrapyd")) as server:
        yield server


def _schedule(server: Scrapyd, start_url: str, settings: dict[str, str]) -> str:
    fields = [("project", PROJECT), ("spider", "site"), ("start_urls", start_url)]
    fields += [("setting", f"{name}={value}") for name, value in settings.items()]
    job: str = server.post("schedule.json", fields)["jobid"]
    return job


def _wait_finished(server: Scrapyd, jobs: list[str], timeout: float = JOB_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        finished = {j["id"] for j in server.get("listjobs.json", project=PROJECT)["finished"]}
        if set(jobs) <= finished:
            return
        time.sleep(0.5)
    logs = "\n\n".join(server.log("site", j)[-3000:] for j in jobs
                       if (server.root / "logs" / PROJECT / "site" / f"{j}.log").exists())
    raise AssertionError(f"jobs {jobs} did not finish in {timeout} s:\n{logs}")


def _crawl_settings(stack: Stack, crawl_id: str) -> dict[str, str]:
    env = stack.env()
    return {
        "CRAWL_ID": crawl_id,
        "CRAWL_IDLE_TIMEOUT": "3",
        "KAFKA_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "REDIS_URL": env["REDIS_URL"],
        "MONGO_URI": env["MONGO_URI"],
    }


def _stored_urls(stack: Stack, crawl_id: str) -> list[str]:
    """The ``url`` of every document of the crawl's collection (duplicates kept)."""
    client: MongoClient[dict[str, Any]]
    with MongoClient(stack.env()["MONGO_URI"]) as client:
        documents: list[dict[str, Any]] = list(client["crawler"][crawl_id].find({}, {"url": 1}))
    return sorted(str(document["url"]) for document in documents)


def _assert_clean_finish(server: Scrapyd, job: str) -> None:
    log = server.log("site", job)
    assert "Distributed mode" in log, log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]


def test_deployed_egg_holds_the_project(scrapyd: Scrapyd) -> None:
    assert '"status": "ok"' in scrapyd.deploy_output, scrapyd.deploy_output
    assert scrapyd.get("listprojects.json")["projects"] == [PROJECT]
    assert scrapyd.get("listspiders.json", project=PROJECT)["spiders"] == ["site"]
    eggs = list((scrapyd.root / "eggs" / PROJECT).glob("*.egg"))
    assert len(eggs) == 1, eggs
    with zipfile.ZipFile(eggs[0]) as egg:
        names = set(egg.namelist())
        entry_points = egg.read("EGG-INFO/entry_points.txt").decode()
    assert {"crawler/settings.py", "crawler/spiders/site.py", "crawler/addon.py"} <= names
    assert "settings = crawler.settings" in entry_points  # scrapyd's runner needs it
    # scrapyd's runner puts the egg on sys.path ahead of the editable install's finder.
    probe = ("import sys; from scrapyd.runner import activate_egg; activate_egg(sys.argv[1]); "
             "import crawler.spiders.site as m; print(m.__file__)")
    where = subprocess.run([sys.executable, "-c", probe, str(eggs[0])], cwd=scrapyd.root,
                           capture_output=True, text=True, timeout=30, check=True)
    assert str(eggs[0]) in where.stdout, where.stdout + where.stderr


def test_scheduled_job_crawls_the_demo_site(
    scrapyd: Scrapyd, stack: Stack, demo_site: str, demo_site_pages: int, crawl_id: str
) -> None:
    job = _schedule(scrapyd, demo_site + "/", _crawl_settings(stack, crawl_id))
    _wait_finished(scrapyd, [job])
    assert _stored_urls(stack, crawl_id) == sorted(site.site_urls(demo_site, demo_site_pages))
    _assert_clean_finish(scrapyd, job)


def test_two_jobs_join_one_crawl(
    scrapyd: Scrapyd, stack: Stack, demo_site: str, demo_site_pages: int, crawl_id: str
) -> None:
    settings = _crawl_settings(stack, crawl_id)
    jobs = [_schedule(scrapyd, demo_site + "/", settings) for _ in range(2)]
    _wait_finished(scrapyd, jobs)
    finished = {j["id"]: j for j in scrapyd.get("listjobs.json", project=PROJECT)["finished"]}
    (start1, end1), (start2, end2) = (
        (datetime.fromisoformat(finished[j]["start_time"]),
         datetime.fromisoformat(finished[j]["end_time"])) for j in jobs)
    assert start1 < end2 and start2 < end1, "the two jobs did not run at the same time"
    assert _stored_urls(stack, crawl_id) == sorted(site.site_urls(demo_site, demo_site_pages))
    for job in jobs:
        _assert_clean_finish(scrapyd, job)



def test_a_job_through_the_secured_stack_logs_no_secret(
    secured_stack: SecuredStack, demo_site: str, demo_site_pages: int, crawl_id: str,
    tmp_path: Path,
) -> None:
    """The secured stack's settings in scrapyd's environment, as docs/security.md advises
    (a ``setting=`` of schedule.json would show in scrapyd's own log and job list): the job
    crawls through TLS and passwords, and neither its log, scrapyd's log nor the API's
    answers hold a password."""
    env = {**os.environ, **secured_stack.env()}
    with _serving(tmp_path, env) as server:
        job = _schedule(server, demo_site + "/", {"CRAWL_ID": crawl_id, "CRAWL_IDLE_TIMEOUT": "3"})
        _wait_finished(server, [job])
        _assert_clean_finish(server, job)
        answers = json.dumps([server.get("listjobs.json", project=PROJECT),
                              server.get("daemonstatus.json")])
    client: MongoClient[dict[str, Any]]
    with MongoClient(env["MONGO_URI"]) as client:
        urls = sorted(d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1}))
    assert urls == sorted(site.site_urls(demo_site, demo_site_pages))
    texts = {"job log": server.log("site", job), "scrapyd log": (tmp_path / "scrapyd.out")
             .read_text(errors="replace"), "scrapyd API": answers}
    for secret in secured_stack.passwords():
        assert not [where for where, text in texts.items() if secret in text]
