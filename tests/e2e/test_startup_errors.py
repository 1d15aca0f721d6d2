"""A user's mistake at start-up ends ``scrapy crawl`` with one ERROR line, and nothing else.

Each test runs ``scrapy crawl site ...`` from the repository root, the way users run it,
and asserts a non-zero exit code, exactly one ERROR line naming the setting or the
argument, no traceback, no asyncio "Task exception was never retrieved" and no ERROR
line of the client libraries (kafka-python's reconnect attempts).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler.commands import preflight
from crawler.config.readers import SettingError
from crawler.connections.clients import CLIENT_LOGGERS, quiet_client_logs
from crawler.localstack.services import free_port

REPO = Path(__file__).resolve().parents[2]
SCRAPY = Path(sys.executable).parent / "scrapy"
SERVICE_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI", "MONGO_DATABASE", "CRAWL_ID")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:]+ \[([\w.]+)\] ([A-Z]+): ")
START = ("-a", "start_urls=http://127.0.0.1:9/")


def crawl(env: dict[str, str], *args: str, timeout: float = 90,
          command: tuple[str, ...] = ("crawl", "site")) -> tuple[int, str, float]:
    clean = {k: v for k, v in os.environ.items()
             if k not in SERVICE_VARS and k != "SCRAPY_SETTINGS_MODULE"}
    started = time.monotonic()
    proc = subprocess.run([str(SCRAPY), *command, *args], cwd=REPO, env={**clean, **env},
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def the_one_error(code: int, out: str) -> str:
    """The one ERROR line of a failed start-up; fails on anything else in *out*."""
    assert code != 0, out[-3000:]
    levels = [(m.group(1), m.group(2), line) for line in out.splitlines()
              if (m := LOG_LINE.match(line))]
    errors = [line for _, level, line in levels if level in {"ERROR", "CRITICAL"}]
    assert len(errors) == 1, "\n".join(errors) or out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "Task exception was never retrieved" not in out
    assert not [line for name, level, line in levels
                if name.split(".")[0] in CLIENT_LOGGERS and level in {"ERROR", "CRITICAL"}]
    return errors[0]


@pytest.mark.parametrize("given, missing", [
    ({"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092"}, ("REDIS_URL", "MONGO_URI")),
    ({"REDIS_URL": "redis://127.0.0.1:6379/0", "MONGO_URI": "mongodb://127.0.0.1:27017/"},
     ("KAFKA_BOOTSTRAP_SERVERS",)),
])
def test_partial_configuration(given: dict[str, str], missing: tuple[str, ...]) -> None:
    line = the_one_error(*crawl(given, *START)[:2])
    assert all(f"{name}" in line.split("set but")[1] for name in missing), line
    assert "distributed mode needs all of" in line


@pytest.mark.parametrize("name, value, right", [
    ("KAFKA_PARTITIONS", "abc", "expected an integer"),
    ("CRAWL_IDLE_TIMEOUT", "-1", "expected a number >= 0"),
    ("CONNECT_TIMEOUT", "0", "expected a number > 0"),
    ("MONGO_BATCH_SIZE", "0", "expected an integer >= 1"),
])
def test_malformed_setting(stack, name: str, value: str, right: str) -> None:
    line = the_one_error(*crawl(stack.env(), *START, "-s", f"{name}={value}")[:2])
    assert f"Setting {name}: {right}" in line, line


def test_runspider_tells_a_malformed_setting_in_one_line(stack, tmp_path: Path) -> None:
    """``scrapy runspider FILE`` in the project starts as ``scrapy crawl`` does; it used to
    end a bad setting with two tracebacks (the setting's, then "Engine slot not assigned")."""
    spider = tmp_path / "one.py"
    spider.write_text("from scrapy import Spider\n\n\nclass One(Spider):\n"
                      "    name = 'one'\n    start_urls = ['http://127.0.0.1:9/']\n")
    code, out, _ = crawl(stack.env(), "-s", "KAFKA_FETCH_MAX_BYTES=10",
                         command=("runspider", str(spider)))
    line = the_one_error(code, out)
    assert "Setting KAFKA_FETCH_MAX_BYTES: expected an integer >= 1024, got 10" in line, line


@pytest.mark.parametrize("distributed", [False, True], ids=["single-node", "distributed"])
def test_missing_spider_argument(request: pytest.FixtureRequest, distributed: bool) -> None:
    env = request.getfixturevalue("stack").env() if distributed else {}
    line = the_one_error(*crawl(env)[:2])
    assert "Spider argument start_urls: missing" in line and "-a start_urls=URL" in line, line


def test_spider_argument_that_is_no_url() -> None:
    line = the_one_error(*crawl({}, "-a", "start_urls=example.com")[:2])
    assert "Spider argument start_urls: 'example.com' is not an absolute URL" in line, line


@pytest.mark.parametrize("setting", ["KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "MONGO_URI"])
def test_unreachable_service(stack, setting: str) -> None:
    port = free_port()  # nothing listens there: connections are refused
    dead = {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
            "REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "MONGO_URI": f"mongodb://127.0.0.1:{port}/"}[setting]
    code, out, elapsed = crawl({**stack.env(), setting: dead}, *START, "-s", "CONNECT_TIMEOUT=2")
    line = the_one_error(code, out)
    assert f"Cannot reach the service of {setting} at" in line and f":{port}" in line, line
    assert f"point {setting} at a running one" in line
    assert elapsed < 30


def test_client_logs_show_again_after_the_check() -> None:
    """The chatter is silenced during the check only: a later real error still shows."""
    kafka = logging.getLogger("kafka.net.manager")
    with pytest.raises(RuntimeError), quiet_client_logs():
        assert not kafka.isEnabledFor(logging.ERROR)
        raise RuntimeError("the check failed")
    assert kafka.isEnabledFor(logging.ERROR)
    assert all(logging.getLogger(name).level == logging.NOTSET for name in CLIENT_LOGGERS)


def test_scrapyd_job_tells_the_mistake_in_one_line() -> None:
    """scrapyd runs ``python -m scrapyd.runner crawl ...``: the project's crawl command."""
    clean = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env = {**clean, "SCRAPY_PROJECT": "crawler", "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    proc = subprocess.run([sys.executable, "-m", "scrapyd.runner", "crawl", "site",
                           "-a", "_job=startup-errors"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=90)
    line = the_one_error(proc.returncode, proc.stdout + proc.stderr)
    assert "Spider argument start_urls: missing" in line, line


def test_a_second_error_does_not_hide_the_first() -> None:
    """Scrapy's ``Engine slot not assigned``, raised while closing, hides no SettingError."""
    second = RuntimeError("Engine slot not assigned")
    second.__context__ = SettingError("KAFKA_PARTITIONS", "expected an integer, got 'abc'")
    mistake = preflight.mistake_in(second)
    assert isinstance(mistake, SettingError) and mistake.setting == "KAFKA_PARTITIONS"
    assert preflight.mistake_in(RuntimeError("a bug")) is None


def test_unknown_spider() -> None:
    """Not a log line but a usage error (exit code 2), as for any wrong command line."""
    proc = subprocess.run([str(SCRAPY), "crawl", "nosuch"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "error: Spider not found: nosuch ('scrapy list' lists" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
