"""``scrapy cluster dashboard``: the HTTP server alone, then live over two workers in Chromium.

``DASHBOARD_SCREENSHOT=1 pytest tests/test_dashboard.py`` also writes docs/dashboard.png.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from helpers import require, wait_until
from redis.exceptions import ConnectionError as RedisConnectionError

from crawler.localstack import demo_site as site
from crawler.localstack.demo import running, worker_command
from crawler.operations import dashboard
from crawler.operations.clusterview import Snapshot

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync")


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _status(base: str) -> dict:
    code, body = _get(base + "api/status")
    assert code == 200, body
    return json.loads(body)


# --- the server alone, with a fake reader (no services) ---------------------------------


PROXY_FAULTS = [
    {"id": "10.0.0.1:3128~81a60f20", "state": "dead", "proxy_faults": 41, "origin_faults": 1},
    {"id": "127.0.0.1:3128", "state": "alive", "proxy_faults": 3, "origin_faults": 12}]
HOST_FAULTS = {"127.0.0.2:8123": {"proxy_faults": 30, "origin_faults": 2},
               "shop.example": {"proxy_faults": 1, "origin_faults": 11}}


class FakeReader:
    def __init__(self, *, proxies: bool = False) -> None:
        self.acked, self.fail, self.proxies = 0, False, proxies

    async def read(self) -> Snapshot:
        if self.fail:
            raise RedisConnectionError("connection refused")
        self.acked += 5
        doc = {"ts": time.time(), "idle": False, "assigned": [0, 1], "lag": 7,
               "info": {"acked": self.acked, "pid": 42, "host": "h", "leases": 1}}
        if not self.proxies:
            return Snapshot(crawl_id="fake", now=time.time(), workers={"w1": doc})
        return Snapshot(crawl_id="fake", now=time.time(), workers={"w1": doc},
                        proxies={"members": 2, "alive": 1, "probation": 0, "dead": 1,
                                 "unreadable": 0},
                        proxy_faults=PROXY_FAULTS, host_faults=HOST_FAULTS)


@contextmanager
def _served(reader: Any, summary: Any = None) -> Iterator[str]:
    lines: list[str] = []
    loop = asyncio.new_event_loop()
    task = loop.create_task(dashboard.serve(reader.read, 3.0, 0, "redis://x", ready=lines.append,
                                            summary=summary))

    def run() -> None:
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: bool(lines), 10, "the dashboard URL")
        yield lines[0].removeprefix("Dashboard: ")
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)
        loop.close()


def test_server_serves_page_status_and_errors():
    reader = FakeReader()
    with _served(reader) as base:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", base)
        code, page = _get(base)
        assert code == 200 and b'id="acked-total"' in page
        status = _status(base)
        assert status["crawl_id"] == "fake" and status["totals"]["nodes"] == 1
        assert status["proxy_failures"] is None  # no proxy in this crawl
        wait_until(lambda: _status(base)["totals"]["rate"] is not None, 10, "a rate")
        assert _get(base + "nope")[0] == 404
        reader.fail = True
        wait_until(lambda: _get(base + "api/status")[0] == 503, 10, "the error")
        assert "connection refused" in json.loads(_get(base + "api/status")[1])["error"]


def test_page_splits_proxy_failures_per_proxy_and_per_host(tmp_path):
    with _served(FakeReader(proxies=True)) as base:
        failures = _status(base)["proxy_failures"]
        assert failures["totals"] == {"proxy_faults": 44, "origin_faults": 13}
        assert failures["by_proxy"] == PROXY_FAULTS and failures["hosts"] == 2
        assert failures["by_host"][0] == {"host": "127.0.0.2:8123", "proxy_faults": 30,
                                          "origin_faults": 2}
        require(CHROMIUM, "no chromium (apt-get install -y chromium): the API checks passed")
        dom = _chromium(base, tmp_path, "--virtual-time-budget=3000", "--dump-dom")
    assert _element(dom, "proxy-blame") == "44 / 13"
    assert _element(dom, "proxy-blame-detail") == "blamed on proxies / on origin sites; 2 hosts"
    assert _node_rows(dom, "proxies-body") == [["10.0.0.1:3128~81a60f20", "dead", "41", "1"],
                                               ["127.0.0.1:3128", "alive", "3", "12"]]
    assert _node_rows(dom, "hosts-body") == [["127.0.0.2:8123", "30", "2"],
                                             ["shop.example", "1", "11"]]
    assert 'class="s-dead"' in dom


FINISHED_AT = 1_765_000_095.0
SUMMARY = {"reason": "finished", "started": FINISHED_AT - 95, "closed": FINISHED_AT,
           "duration_s": 95.0, "pages": 2000, "failed": 3, "dropped": 12, "dead": 1,
           "stored": 1996, "balanced": True, "ledger": {}}


class FinishedReader:
    """A crawl whose workers are gone, marked finished."""

    async def read(self) -> Snapshot:
        return Snapshot(crawl_id="done", now=time.time(), workers={}, finished_at=FINISHED_AT)


def test_page_of_a_finished_crawl_shows_its_summary(tmp_path):
    asked: list[float] = []

    async def summary(finished_at: float) -> dict[str, Any]:
        asked.append(finished_at)
        return SUMMARY

    with _served(FinishedReader(), summary) as base:
        assert _status(base)["finished"] == SUMMARY
        assert set(asked) == {FINISHED_AT}
        require(CHROMIUM, "no chromium (apt-get install -y chromium): the API checks passed")
        dom = _chromium(base, tmp_path, "--virtual-time-budget=3000", "--dump-dom")
    text = _element(dom, "finished")
    assert text.startswith("finished ") and "(finished), ran 95 s: 2000 pages fetched, 3 " \
        "failed, 12 dropped, 1 dead-lettered, 1996 stored; every request accounted for" in text


def test_page_without_proxies_says_so(tmp_path):
    require(CHROMIUM, "no chromium (apt-get install -y chromium)")
    with _served(FakeReader()) as base:
        dom = _chromium(base, tmp_path, "--virtual-time-budget=3000", "--dump-dom")
    assert _element(dom, "proxy-blame") == "none"
    assert _element(dom, "hosts-note") == "no proxy in this crawl"
    assert _node_rows(dom, "proxies-body") == [] and _node_rows(dom, "hosts-body") == []
    assert _element(dom, "conn") == "live"


# --- live: two workers, the command as a subprocess, the page in Chromium --------------


def _read_url(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if selector.select(timeout=0.5):
            match = re.match(r"Dashboard: (http://127\.0\.0\.1:\d+/)$", proc.stdout.readline())
            if match:
                return match.group(1)
    raise AssertionError(f"no dashboard URL; exit code {proc.poll()}")


def _chromium(url: str, tmp_path: Path, *extra: str) -> str:
    assert CHROMIUM
    cmd = [CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
           *extra, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class Cdp:
    """Chromium's DevTools protocol over ``--remote-debugging-pipe`` (fds 3 and 4)."""

    def __init__(self, tmp_path: Path) -> None:
        assert CHROMIUM
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.log = (tmp_path / "cdp.log").open("wb")
        flags = [*CHROME_FLAGS, f"--user-data-dir={tmp_path / 'cdp-profile'}",
                 "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{cmd_r} 4>&{out_w}', CHROMIUM, *flags],
            pass_fds=(cmd_r, out_w), stdout=subprocess.DEVNULL,
            stderr=self.log)
        os.close(cmd_r)
        os.close(out_w)
        self.buffer, self.next_id = b"", 0

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        self.next_id += 1
        message: dict = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.cmd_w, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.out_r, 1 << 20)
                assert chunk, "chromium closed the pipe"
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]

    def close(self) -> None:
        self.proc.terminate()  # by PID
        self.proc.wait(30)
        os.close(self.cmd_w)
        os.close(self.out_r)
        self.log.close()


def _screenshot(url: str, path: Path, tmp_path: Path, seconds: float) -> None:
    """Open *url*, let it poll for *seconds* of real time (the chart fills), shoot it."""
    cdp = Cdp(tmp_path)
    try:
        target = cdp.call("Target.createTarget", url=url)
        session = cdp.call("Target.attachToTarget", targetId=target["targetId"],
                           flatten=True)["sessionId"]
        cdp.call("Emulation.setDeviceMetricsOverride", session, width=1280, height=900,
                 deviceScaleFactor=1, mobile=False)
        time.sleep(seconds)
        shot = cdp.call("Page.captureScreenshot", session, format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        cdp.close()


def _element(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert match, f"#{element_id} not in the DOM"
    return match.group(1)


def _node_rows(dom: str, body: str = "nodes-body") -> list[list[str]]:
    """The cells of each row of the ``#nodes-body`` table (or another *body*), as text."""
    match = re.search(rf'<tbody id="{body}"[^>]*>(.*?)</tbody>', dom, re.DOTALL)
    assert match, f"#{body} not in the DOM"
    return [re.findall(r"<td[^>]*>([^<]*)</td>", row)
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), re.DOTALL)]


def _check_page(base: str, tmp_path: Path, pids: set[int]) -> None:
    require(CHROMIUM, "no chromium (apt-get install -y chromium): the API checks passed")
    dom = _chromium(base, tmp_path, "--virtual-time-budget=5000", "--dump-dom")
    assert _element(dom, "nodes-count") == "2"
    assert int(_element(dom, "acked-total")) > 0
    assert _element(dom, "conn") == "live"
    rows = _node_rows(dom)  # id, host, health, pid, beat, ...
    assert sorted(int(row[3]) for row in rows) == sorted(pids), rows
    assert all(row[2] in ("ok", "idle") for row in rows), rows
    if os.environ.get("DASHBOARD_SCREENSHOT") == "1":
        shot = ROOT / "docs" / "dashboard.png"
        _screenshot(base, shot, tmp_path, seconds=25)
        assert shot.stat().st_size > 10_000


def _live_api_checks(base: str, pids: set[int]) -> None:
    status = _status(base)
    assert len(status["nodes"]) == 2 and status["totals"]["nodes"] == 2
    assert {n["pid"] for n in status["nodes"]} == pids
    assert status["totals"]["acked"] > 0 and status["dedup"]["items"] > 0
    wait_until(lambda: (_status(base)["totals"]["rate"] or 0) > 0, 30, "a positive rate")


@pytest.mark.e2e
def test_dashboard_over_two_live_workers(stack, crawl_id, tmp_path):
    env = {**os.environ, **stack.env(), "CRAWL_ID": crawl_id,
           "SCRAPY_SETTINGS_MODULE": "crawler.settings"}
    site.generate(tmp_path / "site", 3000)
    server = site.serve(tmp_path / "site")
    cmd = worker_command(server.base_url + "/", {
        "CRAWL_IDLE_TIMEOUT": 30, "CONCURRENT_REQUESTS": 2,
        "DOWNLOAD_DELAY": 0.02})  # about 100 pages/s: the crawl lasts while the page is shot
    dash: subprocess.Popen[str] | None = None
    try:
        with running(2, cmd, env, tmp_path / "logs") as workers:
            pids = {w.process.pid for w in workers}
            dash = subprocess.Popen(
                [sys.executable, "-m", "scrapy", "cluster", "dashboard", crawl_id,
                 "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, cwd=ROOT)
            base = _read_url(dash)
            wait_until(lambda: _status(base)["totals"]["nodes"] == 2
                       and _status(base)["totals"]["acked"] > 0, 90, "two nodes with pages")
            _live_api_checks(base, pids)
            _check_page(base, tmp_path, pids)
    finally:
        if dash is not None:
            dash.terminate()  # by PID
            dash.wait(10)
        server.close()
