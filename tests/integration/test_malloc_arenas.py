"""``MALLOC_ARENA_MAX``: the add-on caps a distributed worker's malloc arenas (glibc)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from typing import Any

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.operations import malloc


def test_zero_or_the_environment_variable_leaves_glibc_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert malloc.limit_arenas(0) is False
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # glibc read it when the process started
    assert malloc.limit_arenas(2) is False


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no libc to call")
def test_the_cap_limits_the_arenas_threads_get() -> None:
    """Eight threads allocating at once: with the cap, malloc_info shows at most two
    heaps (arenas); without it, more. Each case runs in a fresh process, since arenas made
    before the call stay."""
    code = """
import ctypes, sys, threading
from crawler.operations import malloc
if sys.argv[1] == "cap":
    assert malloc.limit_arenas(2)
libc = ctypes.CDLL(None)
libc.open_memstream.restype = ctypes.c_void_p
barrier = threading.Barrier(8)
def churn():
    barrier.wait()
    for _ in range(20000):
        bytearray(4096)  # above pymalloc's 512 bytes: malloc
threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
buf = ctypes.c_char_p(); size = ctypes.c_size_t()
stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
libc.malloc_info(0, stream); libc.fclose(stream)
print(buf.value.decode().count("<heap nr="))
"""
    def heaps(mode: str) -> int:
        env = {"PYTHONPATH": ".", "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                             text=True, check=True, env=env)
        return int(out.stdout)

    assert heaps("cap") <= 2
    assert heaps("none") > 2


SERVICES = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "REDIS_URL": "redis://127.0.0.1:9",
            "MONGO_URI": "mongodb://127.0.0.1:9"}  # closed ports: nothing connects here
ADDON = {"ADDONS": {"crawler.addon.DistributedAddon": 0}, "DOWNLOAD_HANDLERS": {}}


@pytest.mark.parametrize(("settings", "expected"), [
    (SERVICES, [2]), ({**SERVICES, "MALLOC_ARENA_MAX": 0}, [0]), ({}, [])])
def test_a_distributed_worker_sets_the_cap_a_single_node_crawl_does_not(
        monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], expected: list[int]) -> None:
    from crawler import addon

    calls: list[int] = []
    monkeypatch.setattr(addon, "limit_arenas", calls.append)
    for name in SERVICES:
        monkeypatch.delenv(name, raising=False)
    get_crawler(Spider, {**ADDON, **settings})
    assert calls == expected
