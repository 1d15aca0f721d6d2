"""The test proxies behave as labelled when fetching the fault origin through them."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from servers.faultorigin import Faults, OriginProcess, read_log, site_urls, start_origin
from servers.testproxies import AUTH, SLOW_DELAY, ProxySet, group_alive, start_proxies

PAGES = 10


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OriginProcess]:
    log = tmp_path_factory.mktemp("origin") / "origin.jsonl"
    handle, _ = start_origin(PAGES, log, hosts=("127.0.0.1", "127.0.0.2"),
                             faults=Faults.parse("none"))
    with handle:
        yield handle


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxySet]:
    with start_proxies(tmp_path_factory.mktemp("proxies")) as started:
        yield started


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def through(proxy: str, url: str, timeout: float = 10) -> tuple[int, str, float]:
    """GET *url* through *proxy* with urllib: status, body, seconds taken."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    start = time.monotonic()
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read().decode(), time.monotonic() - start
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), time.monotonic() - start


def session(proxy: str) -> requests.Session:
    client = requests.Session()
    client.trust_env = False
    client.proxies = {"http": proxy}
    return client


def test_healthy_proxies_forward_and_say_so(origin: OriginProcess, proxies: ProxySet) -> None:
    assert proxies.healthy[-1].startswith(f"http://{AUTH[0]}:{AUTH[1]}@127.0.0.1:")
    for proxy in proxies.healthy:
        url = f"{origin.base_urls[1]}/"
        status, body, _ = through(proxy, url)
        assert status == 200 and "<title>Page 1</title>" in body
        entry = read_log(origin.log_path)[-1]
        assert entry["proxy"] == urlsplit(proxy).netloc.rpartition("@")[2]
        assert entry["via"].startswith("1.1 proxy.py") and entry["site"] == "127.0.0.2"


def test_credentials_are_required(origin: OriginProcess, proxies: ProxySet) -> None:
    bare = proxies.healthy[-1].replace(f"{AUTH[0]}:{AUTH[1]}@", "")
    assert through(bare, f"{origin.base_urls[0]}/")[0] == 407
    assert through(bare.replace("://", "://user:wrong@"), f"{origin.base_urls[0]}/")[0] == 407


def test_keep_alive_across_hosts_reaches_the_right_address(
        origin: OriginProcess, proxies: ProxySet) -> None:
    """One client connection to the proxy, pages on two hosts: each reaches its own address."""
    before = len(read_log(origin.log_path))
    with session(proxies.healthy[0]) as client:
        for url in site_urls(origin.base_urls, PAGES):
            response = client.get(url, timeout=10)
            assert response.status_code == 200, url
    entries = read_log(origin.log_path)[before:]
    assert len(entries) == PAGES
    assert all(entry["addr"] == entry["host"] for entry in entries)


def test_dead_proxy_refuses(origin: OriginProcess, proxies: ProxySet) -> None:
    parts = urlsplit(proxies.dead)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((parts.hostname, parts.port), timeout=5)
    with session(proxies.dead) as client, pytest.raises(requests.exceptions.ProxyError):
        client.get(f"{origin.base_urls[0]}/", timeout=5)


def test_slow_proxy_is_slow(origin: OriginProcess, proxies: ProxySet) -> None:
    sent = time.time()
    status, body, slow = through(proxies.slow, f"{origin.base_urls[0]}/")
    assert status == 200 and "<title>Page 0</title>" in body
    # it held the request SLOW_DELAY before forwarding: the origin saw it that much later
    # (lower bounds only; a busy machine makes both later, never earlier)
    arrived = read_log(origin.log_path)[-1]
    assert arrived["proxy"] == urlsplit(proxies.slow).netloc and arrived["path"] == "/"
    assert arrived["ts"] - sent >= SLOW_DELAY - 0.01 and slow >= SLOW_DELAY - 0.01


def test_forbidden_proxy_answers_403(origin: OriginProcess, proxies: ProxySet) -> None:
    before = len(read_log(origin.log_path))
    status, body, _ = through(proxies.forbidden, f"{origin.base_urls[0]}/")
    assert status == 403 and "Forbidden" in body
    with session(proxies.forbidden) as client:
        assert client.get(f"{origin.base_urls[1]}/", timeout=10).status_code == 403
    assert len(read_log(origin.log_path)) == before  # never went upstream


def test_all_lists_every_proxy(proxies: ProxySet) -> None:
    assert proxies.all == [*proxies.healthy, proxies.dead, proxies.slow, proxies.forbidden]
    assert len(set(proxies.all)) == len(proxies.all) == 5


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    directory = tmp_path / "stopped-proxies"
    proxies = start_proxies(directory, healthy=1)
    pids = proxies.pids
    assert len(pids) == 3 and len(processes_mentioning(str(directory))) >= 3  # with acceptors
    proxies.stop()
    assert not any(group_alive(pid) for pid in pids)
    assert processes_mentioning(str(directory)) == []
    dead = urlsplit(proxies.dead)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((dead.hostname, dead.port), timeout=5)
